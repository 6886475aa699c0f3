"""Predictors that turn an analysis into latency, energy, memory and a MIG recommendation.

Contract (DESIGN.md): this package never imports TVM; it consumes the plain arrays and dataclasses
`passes/` produces (`Analysis.x`, `Analysis.edge_index`, `Analysis.static_features`, totals).
The roofline bound, the device table, the GraphSAGE model and the MIG recommender land here
(issue 6); nothing is exported yet.
"""
