"""Predictors that turn an analysis into latency, energy, memory and a MIG recommendation.

Contract (docs/design.md): this package never imports TVM; it consumes the plain arrays and dataclasses
`passes/` produces (`Analysis.x`, `Analysis.edge_index`, `Analysis.static_features`, totals, per-op costs).

- `devices`: the one table of GPUs and MIG profiles; `roofline`: the roofline bound and memory estimate;
- `predict`: the `Prediction` of a model on a device (a trained predictor, or the roofline estimate);
- `mig`: the MIG recommender; `data`, `model`, `train`, `evaluate`: the GraphSAGE predictor and its evaluation;
- `measure`: the GPU measurement harness (pure torch; runs on a GPU machine without TVM).
"""
