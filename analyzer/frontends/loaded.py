"""What every frontend returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoadedModel:
    """A model lowered to a Relax IRModule with static shapes.

    `n_inputs` leading parameters of `main` are model inputs; the rest are weights.
    `unconverted` lists source operators that had no conversion and were kept as opaque calls.
    """

    mod: object  # tvm.IRModule
    framework: str
    name: str
    source: str
    n_inputs: int | None
    unconverted: list[str] = field(default_factory=list)
    input_names: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)
