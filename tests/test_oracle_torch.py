"""Oracle: preflight's conv/matmul/attention FLOPs agree with torch's FlopCounterMode.

For every zoo model of the issue (at small input sizes) and the small models of
`tests/oracle_models.py`, the FLOPs of the multiply-add ops (sum over ops whose category is
conv, matmul or attention, and that are not weight-only, of 2 x MACs) must agree within 1% with
`torch.utils.flop_counter.FlopCounterMode` run on the source module (CPU, real random weights,
attention forced through the MATH backend so that it runs as bmm and is counted). Three routes:

  (a) `.pt2`: torch.export.save -> analyze(path)
  (b) ONNX:   torch.onnx.export(dynamo=True) -> analyze(path)
  (c) API:    analyze(module, inputs), and analyze("zoo:NAME") (built on the meta device).

Parameter counts are checked too (see `test_params_*`). Run with `-s` to see the tables.

Measured (torch 2.13, TVM 0.27, batch 1): every route agrees with the oracle exactly (0.000%),
except bert_base at -0.043% on every route: the zoo's BERT returns the last hidden state, so the
exported graph drops the pooler (768x768 linear, 1.18 MFLOPs) while eager torch still runs it.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from oracle_models import SMALL_MODELS, ZOO_SPECS, build_small
from torch.export.graph_signature import InputKind
from torch.utils.flop_counter import FlopCounterMode

import zoo
from analyzer.api import analyze
from passes.costs import MULTIPLY_ADD_CATEGORIES

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REL_TOL = 0.01

# ONNX export is slow for big graphs: a subset of the zoo goes through it.
ONNX_ZOO = ("resnet18", "mobilenet_v2", "bert_base", "vit_base", "gpt2")

# Parameters the exported graph does not use, so preflight rightly does not count them.
# bert_base: the zoo wraps BertModel and returns last_hidden_state; the pooler is dead code.
UNUSED_PARAMS = {"bert_base": ("model.pooler.",)}

# --------------------------------------------------------------------------------------------
# Oracle and helpers
# --------------------------------------------------------------------------------------------


def oracle_flops(module: torch.nn.Module, inputs: tuple) -> int:
    """torch's FlopCounterMode on a real CPU forward, attention decomposed to bmm (MATH backend)."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH), counter:
        module(*inputs)
    return counter.get_total_flops()


def multiply_add_flops(report) -> int:
    """Preflight's conv/matmul/attention FLOPs: 2 x MACs over the ops of those categories that are not folded."""
    return sum(2 * op.macs for op in report.analysis.ops if op.category in MULTIPLY_ADD_CATEGORIES and not op.folded)


def used_state(module: torch.nn.Module, inputs: tuple) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """(used parameters and buffers by name, unused parameter names, unused buffer names).

    "Used" means torch.export's placeholder for it has users once dead code is removed (an output
    the module computes but does not return, like BERT's pooler, is dead). A tied weight (gpt2's
    wte / lm_head) is used if any of its names is.
    """
    ep = torch.export.export(module, inputs)
    ep.graph_module.graph.eliminate_dead_code()
    users = {n.name: len(n.users) for n in ep.graph.nodes if n.op == "placeholder"}
    used: dict[str, torch.Tensor] = {}
    unused: list[tuple[str, InputKind, torch.Tensor]] = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER):
            continue
        tensor = (
            module.get_parameter(spec.target) if spec.kind == InputKind.PARAMETER else module.get_buffer(spec.target)
        )
        if users[spec.arg.name]:
            used[spec.target] = tensor
        else:
            unused.append((spec.target, spec.kind, tensor))
    used_ids = {id(t) for t in used.values()}
    unused = [(n, k) for n, k, t in unused if id(t) not in used_ids]
    return (used, [n for n, k in unused if k == InputKind.PARAMETER], [n for n, k in unused if k == InputKind.BUFFER])


def _unique_numel(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel()
    return total


def expected_params(module: torch.nn.Module, inputs: tuple, name: str) -> int:
    """sum(parameters) + sum(buffers used in forward) - parameters the graph does not use.

    The unused parameters must all be listed in UNUSED_PARAMS (documented exceptions); the unused
    buffers may only be BatchNorm's num_batches_tracked (not read in eval) and buffers the model
    keeps for bookkeeping (llama's rotary `original_inv_freq`).
    """
    used, unused_params, unused_buffers = used_state(module, inputs)
    allowed = UNUSED_PARAMS.get(name, ())
    assert all(p.startswith(allowed) for p in unused_params) if allowed else not unused_params, unused_params
    assert all(b.endswith(("num_batches_tracked", "original_inv_freq")) for b in unused_buffers), unused_buffers
    all_params = _unique_numel(module.parameters())
    unused = _unique_numel(module.get_parameter(p) for p in unused_params)
    buffer_names = {n for n, _ in module.named_buffers()}
    buffers = _unique_numel(t for n, t in used.items() if n in buffer_names)
    return all_params - unused + buffers


def onnx_float_initializers(path: Path) -> int:
    """Elements of the ONNX file's non-scalar floating-point initializers (what it stores as weights).

    Integer initializers are shape/index constants the importer consumes as attributes.
    """
    import onnx

    model = onnx.load(str(path))
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type in floats and len(t.dims))


def rel_diff(ours: int, oracle: int) -> float:
    return (ours - oracle) / oracle if oracle else float(ours != 0)


TABLE: list[tuple[str, str, int, int, float, float]] = []


def _record(model: str, route: str, ours: int, oracle: int, seconds: float) -> None:
    TABLE.append((model, route, ours, oracle, rel_diff(ours, oracle), seconds))


@pytest.fixture(scope="module", autouse=True)
def _print_table():
    yield
    if TABLE:
        print("\n\nmodel                 route         ours FLOPs       oracle FLOPs      diff     time")
        for model, route, ours, oracle, diff, sec in TABLE:
            print(f"{model:20s}  {route:6s} {ours:>17,d} {oracle:>17,d} {diff * 100:+8.3f}% {sec:6.1f}s")


# --------------------------------------------------------------------------------------------
# Model builders, cached across the routes
# --------------------------------------------------------------------------------------------


@functools.cache
def zoo_model(name: str):
    try:
        built = zoo.build(ZOO_SPECS[name], batch=1)
    except Exception as exc:  # noqa: BLE001 - the zoo is being extended; a family may not build yet
        pytest.skip(f"zoo model {ZOO_SPECS[name]} does not build: {exc}")
    return built.module, built.example_inputs


@functools.cache
def small_model(name: str):
    return build_small(name)


def get_model(kind: str, name: str):
    return zoo_model(name) if kind == "zoo" else small_model(name)


@functools.cache
def oracle_of(kind: str, name: str) -> int:
    module, inputs = get_model(kind, name)
    return oracle_flops(module, inputs)


_WORKDIRS: list[Path] = []


def _workdir() -> Path:
    """Where the exported files go; `_remove_exported_files` deletes it when this module's tests end."""
    if not _WORKDIRS:
        _WORKDIRS.append(Path(tempfile.mkdtemp(prefix="preflight-oracle-")))
    return _WORKDIRS[0]


@pytest.fixture(scope="module", autouse=True)
def _remove_exported_files():
    """The exported zoo models weigh about 3 GB (random fp32 weights): never leave them behind."""
    yield
    onnx_path.cache_clear()
    while _WORKDIRS:
        shutil.rmtree(_WORKDIRS.pop(), ignore_errors=True)


@functools.cache
def pt2_report(kind: str, name: str):
    module, inputs = get_model(kind, name)
    path = _workdir() / f"{kind}-{name}.pt2"
    torch.export.save(torch.export.export(module, inputs), path)
    try:
        return analyze(str(path))
    finally:
        path.unlink()  # only the report is reused


@functools.cache
def onnx_path(kind: str, name: str) -> Path:
    module, inputs = get_model(kind, name)
    path = _workdir() / f"{kind}-{name}.onnx"
    try:
        torch.onnx.export(module, inputs, str(path), dynamo=True, verbose=False)
    except Exception as exc:  # noqa: BLE001 - torch's exporter raises many error types
        pytest.skip(f"torch.onnx.export (dynamo) fails for {name}: {str(exc).strip().splitlines()[0][:200]}")
    return path


@functools.cache
def onnx_report(kind: str, name: str):
    return analyze(str(onnx_path(kind, name)))


@functools.cache
def api_report(name: str):
    module, inputs = zoo_model(name)
    return analyze(module, inputs)


@functools.cache
def zoo_report(name: str):
    return analyze(f"zoo:{ZOO_SPECS[name]}")


def _check_flops(model: str, route: str, make_report) -> None:
    start = time.perf_counter()
    report = make_report()
    seconds = time.perf_counter() - start
    kind = "small" if model in SMALL_MODELS else "zoo"
    oracle = oracle_of(kind, model)
    ours = multiply_add_flops(report)
    _record(model, route, ours, oracle, seconds)
    assert oracle > 0
    assert not report.totals.unsupported, report.totals.unsupported
    assert abs(rel_diff(ours, oracle)) <= REL_TOL, (
        f"{model} via {route}: preflight {ours:,} vs FlopCounterMode {oracle:,} ({rel_diff(ours, oracle) * 100:+.3f}%)"
    )


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ZOO_SPECS))
def test_zoo_pt2_flops(name: str) -> None:
    _check_flops(name, "pt2", lambda: pt2_report("zoo", name))


@pytest.mark.parametrize("name", ONNX_ZOO)
def test_zoo_onnx_flops(name: str) -> None:
    _check_flops(name, "onnx", lambda: onnx_report("zoo", name))


@pytest.mark.parametrize("name", list(ZOO_SPECS))
def test_zoo_api_module_flops(name: str) -> None:
    _check_flops(name, "api", lambda: api_report(name))


@pytest.mark.parametrize("name", list(ZOO_SPECS))
def test_zoo_api_meta_flops(name: str) -> None:
    """`analyze("zoo:NAME")` builds on the meta device; it must count what the real module counts."""
    _check_flops(name, "zoo:", lambda: zoo_report(name))


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_small_pt2_flops(name: str) -> None:
    _check_flops(name, "pt2", lambda: pt2_report("small", name))


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_small_onnx_flops(name: str) -> None:
    _check_flops(name, "onnx", lambda: onnx_report("small", name))


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ZOO_SPECS))
def test_zoo_pt2_params(name: str) -> None:
    module, inputs = zoo_model(name)
    expected = expected_params(module, inputs, name)
    assert pt2_report("zoo", name).totals.params == expected
    # The same count through the Python API, from the real module and from the meta-device zoo build.
    assert api_report(name).totals.params == expected
    assert zoo_report(name).totals.params == expected


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_small_pt2_params(name: str) -> None:
    module, inputs = small_model(name)
    assert pt2_report("small", name).totals.params == expected_params(module, inputs, name)


def _bn_layers(module: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    return [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def _folded_bias(bn) -> torch.Tensor:
    """The bias a conv gets when `bn` is folded into it (the conv having none)."""
    with torch.no_grad():
        return bn.bias - bn.running_mean * bn.weight / torch.sqrt(bn.running_var + bn.eps)


@pytest.mark.parametrize(("kind", "name"), [("zoo", n) for n in ONNX_ZOO] + [("small", n) for n in SMALL_MODELS])
def test_onnx_params(kind: str, name: str) -> None:
    """ONNX route: preflight counts the file's weights, which the exporter has changed.

    What torch.onnx.export (dynamo, with its default optimizer) changes, measured here:
      * BatchNorm after a conv is folded into it: BN's weight, bias, running_mean and running_var
        vanish; the conv gets a bias of out_channels, unless the folded bias is all zero (fresh
        BN: mean 0, beta 0), in which case the exporter drops it. So the zoo CNNs (fresh BN) lose
        4 x channels per BN, and `depthwise_separable` (random BN statistics) loses 4 x channels
        and gains channels per folded conv.
      * Initializers with identical values are stored once (HF's zero biases and unit LayerNorm
        weights): bert_base/gpt2 files hold fewer elements than the torch module.
      * Constants computed in forward become initializers and count (the causal mask of
        `sdpa_causal`, 12 x 12; a 1-element scale of the SDPA decompositions).
    Preflight counts exactly the file's non-scalar float initializers (TVM's importer folds weight
    transforms such as Transpose of gpt2's tied embedding into new constants, so the IR's constants
    would count some weights twice).
    """
    module, inputs = get_model(kind, name)
    path = onnx_path(kind, name)
    ours = onnx_report(kind, name).totals.params
    assert ours == onnx_float_initializers(path)

    bns = _bn_layers(module)
    if bns:
        torch_params = sum(p.numel() for p in module.parameters())
        folded = sum(4 * bn.num_features for bn in bns)  # weight, bias, running_mean, running_var
        new_bias = sum(bn.num_features for bn in bns if _folded_bias(bn).abs().sum() > 0)
        # torch's params include BN weight and bias; the buffers (mean, var) were never params.
        assert ours == torch_params + sum(2 * bn.num_features for bn in bns) - folded + new_bias
