"""The three routes of one model, shared by tests/test_routes.py and bench/bench_routes.py.

`export_routes` writes what a user would bring for an `nn.Module`: the `.pt2` of `torch.export.save` and the ONNX file
of `torch.onnx.export`. This is a test and benchmark helper, not part of preflight (it runs the exporters).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch

TORCHSCRIPT = {"dynamo": False, "opset_version": 17}
KEEP_BN = {**TORCHSCRIPT, "training": torch.onnx.TrainingMode.PRESERVE}
DYNAMO = {"dynamo": True, "opset_version": 18}


def export_pt2(module: torch.nn.Module, inputs: tuple, path: Path) -> Path:
    """`torch.export.save(torch.export.export(module, inputs), path)`; returns `path`."""
    torch.export.save(torch.export.export(module, inputs), path)
    return path


def export_onnx(module: torch.nn.Module, inputs: tuple, path: Path, onnx_args: dict) -> Path:
    """`torch.onnx.export(module, inputs, path, **onnx_args)` with the exporter's warnings silenced; returns `path`.

    A copy of `module` is exported: a TorchScript trace can change the module it runs (Hugging Face's Swin stores
    its window size as a tensor where `torch.jit.is_tracing()`, and `torch.export` of the module then stops at a
    data-dependent guard), and the module route must see the module as the user has it."""
    try:
        module = copy.deepcopy(module)
    except Exception:  # noqa: BLE001 - a module that cannot be copied is exported itself
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, str(path), **onnx_args)
    return path
