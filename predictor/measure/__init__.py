"""GPU (and CPU) measurement harness that produces the predictor's training labels.

Pure torch + transformers (+ ``nvidia-ml-py`` imported lazily on CUDA); never imports TVM or ``passes/``.

- :mod:`predictor.measure.configs`: seeded, enumerable config sampler over the zoo with a memory estimate.
- :mod:`predictor.measure.harness`: persistent-worker harness that measures latency, energy, memory and
  MIG fit as DESIGN.md's protocol defines them, writing ``preflight.measurement/1`` JSON lines.
- :mod:`predictor.measure.mig_profiles`: minimal device memory and MIG profile table.

Run ``python -m predictor.measure --help``.
"""
