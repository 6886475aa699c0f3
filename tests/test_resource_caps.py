"""Hostile files that aim at memory, time or the interpreter's stack rather than at code execution: each is
rebuilt small from what hostile users sent, and must end in a one-line error (exit 2 for a refused file, 3
for an analysis over its memory or time budget), never in an internal error or an exhausted machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from test_hostile_inputs import DYN_ARGS, _edit_program, _graph, _rewrite_archive, files, refused  # noqa: F401

from analyzer.frontends import sym_expr

# ---- 1. recursion: nested expressions ----------------------------------------------------------------------

NEG_CHAIN = "- " * 5000 + "s77"  # 5,000 unary minus signs: 5,000 nested calls in a recursive-descent parser


def test_negation_chain_is_refused_by_the_grammar():
    with pytest.raises(sym_expr.ExprError, match="nested more than 64 levels"):
        sym_expr.parse(NEG_CHAIN)
    with pytest.raises(sym_expr.ExprError, match="nested more than 64 levels"):
        sym_expr.parse("2**-" * 3000 + "2")  # the exponent's unary minus nests the same way


def test_negation_within_the_depth_limit_still_parses():
    # 60 minus signs: an even count, so the tree is 60 nested negations of the symbol (no folding: not a literal)
    tree = sym_expr.parse("- " * 60 + "s0")
    depth = 0
    while tree[0] == "neg":
        tree, depth = tree[1], depth + 1
    assert (depth, tree) == (60, ("sym", "s0", ()))
    assert sym_expr.parse("- - 3") == ("int", 3)  # two minus signs of a literal fold to the literal


def _neg_chain_editor(where: str):
    def edit(doc):
        g = _graph(doc)
        expr = {"as_expr": {"expr_str": NEG_CHAIN, "hint": None}}
        if where == "size":
            g["tensor_values"]["x"]["sizes"][0] = expr
        elif where == "stride":
            g["tensor_values"]["reshape"]["strides"][0] = expr
        elif where == "offset":
            g["tensor_values"]["linear"]["storage_offset"] = expr
        elif where == "sym_int":
            g["sym_int_values"]["floordiv"] = expr

    return edit


@pytest.mark.parametrize("where", ["size", "stride", "offset", "sym_int"])
def test_negation_chain_in_a_pt2_expression(tmp_path, files, where):  # noqa: F811
    """Was `internal error (RecursionError)`; now the grammar's depth limit refuses it (exit 2, one line)."""
    p = _edit_program(files["dyn"], tmp_path / "neg.pt2", _neg_chain_editor(where))
    msg = refused(p, 2, *DYN_ARGS)
    assert "is not a shape expression (nested more than 64 levels)" in msg, msg


def test_deeply_nested_json_in_model_json(tmp_path, files):  # noqa: F811
    """100,000 nested lists in models/model.json: json's C parser raises RecursionError, reported as unreadable."""

    def member(name, data):
        if name.endswith("models/model.json"):
            return name, data[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        return name, data

    _rewrite_archive(files["pt2"], p := tmp_path / "deep.pt2", member)
    assert "models/model.json is nested too deeply" in refused(p)


# ---- 2. .pt2 caps before parsing -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def buffered(tmp_path_factory) -> Path:
    """A .pt2 with a 4 MiB buffer of zeros (1,048,576 float32), stored as torch.export.save writes it."""
    import torch

    class Buf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.zeros(1 << 20))

        def forward(self, x):
            return x + self.table[:4]

    p = tmp_path_factory.mktemp("buffered") / "buf.pt2"
    torch.export.save(torch.export.export(Buf().eval(), (torch.ones(4),)), p)
    return p


def _deflated(src: Path, dst: Path) -> Path:
    """`src` re-zipped with every member deflated (4 MiB of zeros become about 4 KiB)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    return dst


def test_buffer_zip_bomb_is_refused_before_reading(tmp_path, buffered, monkeypatch):
    """The hostile file: a 1.5 GB buffer deflated to a few MB (4.6 GB peak, then a torch error). Rebuilt small:
    a 4 MiB buffer of zeros deflated, against a cap lowered from 256 MiB to 1 MiB through the same code path."""
    from analyzer.frontends import pt2_safety

    bomb = _deflated(buffered, tmp_path / "bomb.pt2")
    with zipfile.ZipFile(bomb) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data/weights/weight_0"))
    assert info.file_size == 4 * (1 << 20) and info.compress_size < 64 << 10  # 4 MiB of zeros: < 64 KiB on disk
    assert run_ok(bomb)  # under the default cap (256 MiB) this small one is analysed
    monkeypatch.setattr(pt2_safety, "MAX_DATA_INFLATION", 1 << 20)
    assert run_ok(buffered)  # stored (not deflated), the same model reads fine under the lowered cap
    reads = []
    monkeypatch.setattr(pt2_safety, "read_prefix", lambda *a: reads.append(a) or bytearray())
    msg = refused(bomb)
    assert "buffers and constants would inflate" in msg and "zip bomb" in msg, msg
    assert reads == []  # refused from the zip directory: no buffer byte was inflated


def run_ok(path: Path, *args) -> bool:
    from test_hostile_inputs import run

    res = run(path, *args)
    assert res.exit_code == 0, res.stderr
    return True


def _padded_program(src: Path, dst: Path, pad: int) -> Path:
    """`src` with `pad` bytes of whitespace after models/model.json's JSON (still valid JSON)."""
    _rewrite_archive(src, dst, lambda n, d: (n, d + b" " * pad) if n.endswith("models/model.json") else (n, d))
    return dst


def test_whitespace_program_is_refused_from_the_directory(tmp_path, files, monkeypatch):  # noqa: F811
    """The hostile file: a model.json of 1 GB of whitespace (2.3 GB peak). Rebuilt small: 200 KiB of whitespace
    against the program cap lowered from 128 MiB to 100 KiB; the cap is checked before any member is read."""
    from analyzer.frontends import pt2_safety

    p = _padded_program(files["pt2"], tmp_path / "ws.pt2", 200 << 10)
    assert run_ok(p)  # valid JSON: under the default cap it is analysed
    monkeypatch.setattr(pt2_safety, "MAX_PROGRAM_BYTES", 100 << 10)
    read = []
    real = pt2_safety._read
    monkeypatch.setattr(pt2_safety, "_read", lambda zf, info, cap: read.append(info.filename) or real(zf, info, cap))
    msg = refused(p)
    assert "models/model.json' declares" in msg and "(at most 102,400)" in msg, msg  # 100 KiB = 102,400 bytes
    assert read == []  # not even the control members were read


def test_default_program_cap_refuses_a_1_gb_program(tmp_path, files):  # noqa: F811
    """The 1 GB model.json as the directory declares it (the size is forged: no gigabyte is written)."""
    from test_hostile_inputs import _set_declared_size

    _rewrite_archive(files["pt2"], p := tmp_path / "big.pt2", lambda n, d: (n, d))
    _set_declared_size(p, "models/model.json", 1 << 30)
    assert "declares 1,073,741,824 bytes (at most 134,217,728)" in refused(p)  # 128 MiB = 134,217,728


def test_huge_string_in_model_json(tmp_path, files, monkeypatch):  # noqa: F811
    """The hostile file: a 900 MB string in model.json (3.0 GB peak). Now the program cap (128 MiB) refuses that
    file from the directory; a string under the program cap but over the string cap (16 MiB) is refused by
    the schema walk. Rebuilt small: a 2,000-character string against a string cap lowered to 1,000."""
    from analyzer.frontends import pt2_safety

    p = _edit_program(files["pt2"], tmp_path / "s.pt2", lambda d: d.update(guards_code=["x" * 2000]))
    monkeypatch.setattr(pt2_safety, "MAX_JSON_STRING", 1000)
    assert "guards_code[0] is a string of 2,000 characters (at most 1,000)" in refused(p)


def test_json_of_tiny_values_is_refused_before_parsing(tmp_path, files, monkeypatch):  # noqa: F811
    """127 MiB of `{"a":0},` in model.json (a 197 KB file) parsed into 3.2 GB of dicts (4.0 GB peak) before the
    schema walk refused it. The parse's memory is estimated from the text first. Rebuilt small: 10,000 of them
    against the estimate's cap lowered from 2 GiB to 1 MiB (the seed's own model.json stays well under)."""
    from analyzer.frontends import pt2_safety

    payload = b"[" + b",".join([b'{"a":0}'] * 10_000) + b"]"
    # estimate: 232 per '{' (10,000), 56 per '[' (1), 25 per quote (20,000), 8 per comma (9,999)
    assert pt2_safety.json_parse_bytes(payload) == 232 * 10_000 + 56 + 25 * 20_000 + 8 * 9_999  # 2,900,048

    def member(name, data):
        if name.endswith("models/model.json"):
            return name, data[:-1] + b', "x": ' + payload + b"}"
        return name, data

    _rewrite_archive(files["pt2"], p := tmp_path / "tiny_values.pt2", member)
    monkeypatch.setattr(pt2_safety, "MAX_JSON_PARSE_BYTES", 1 << 20)
    assert run_ok(files["pt2"])  # the seed's model.json promises far less than 1 MiB of objects
    parsed = []
    real = pt2_safety.json.loads
    monkeypatch.setattr(pt2_safety.json, "loads", lambda text, *a, **k: parsed.append(len(text)) or real(text, *a, **k))
    msg = refused(p)
    assert "models/model.json would parse into about" in msg and "(at most 1,048,576)" in msg, msg
    assert all(n < 10_000 for n in parsed)  # only the small control members' JSON was parsed, not the program


# ---- 3. nothing is materialised that only needs a shape ---------------------------------------------------


def test_pt2_randn_is_a_fill_not_a_constant(tmp_path):
    """The hostile file: a long chain of `aten.randn` nodes (75 s, 4.9 GB: TVM's importer drew every tensor with
    np.random.randn into a constant, and counted it as parameters). Now each is a fill of its shape."""
    import torch
    from test_hostile_inputs import run

    class R(torch.nn.Module):
        def forward(self, x):
            return x + torch.randn(64, 256), torch.randn_like(x, dtype=torch.float16)

    p = tmp_path / "randn.pt2"
    torch.export.save(torch.export.export(R(), (torch.ones(64, 256),)), p)
    res = run(p, "--format", "json")
    assert res.exit_code == 0, res.stderr
    totals = json.loads(res.stdout)["totals"]
    assert (totals["params"], totals["param_bytes"]) == (0, 0)  # was 2 x 16,384 "parameters", 98,304 bytes
    assert totals["flops"] == 64 * 256  # the add: 16,384
    assert totals["bytes_read"] == 2 * 64 * 256 * 4  # the add reads x and the randn tensor: 131,072
    # written: the add's output and the randn fill (65,536 bytes each, float32), the randn_like fill (float16)
    assert totals["bytes_written"] == 64 * 256 * 4 * 2 + 64 * 256 * 2  # 163,840


def _generators_onnx(path: Path, n: int) -> Path:
    """y = x + sum(float(Range(0, n, 1))) + sum(ConstantOfShape([n], 1.0)): every generator operand a constant."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("s", 0), ("l", n), ("d", 1), ("shp", [n]))]
    nodes = [
        helper.make_node("Range", ["s", "l", "d"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["rf"], ["y0"], keepdims=0),
        helper.make_node("ConstantOfShape", ["shp"], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1])),
        helper.make_node("ReduceSum", ["c"], ["y1"], keepdims=0),
        helper.make_node("Add", ["y0", "y1"], ["y2"]),
        helper.make_node("Add", ["y2", "x"], ["y"]),
    ]
    scalar = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [])  # noqa: E731
    graph = helper.make_graph(nodes, "generators", [scalar("x")], [scalar("y")], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _totals(path: Path) -> dict:
    from test_hostile_inputs import run

    res = run(path, "--format", "json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)["totals"]


def test_onnx_range_of_400m_elements_is_not_materialised(tmp_path):
    """The hostile file: an ONNX Range of 400 M elements (9.5 GB peak: TVM's importer computed it with numpy).
    Now it is an `arange` op of that shape, costed, not computed; so is the ConstantOfShape (a `full`, which the
    analysis leaves out as folded ahead of time: its only operand is a constant)."""
    n = 400_000_000
    t = _totals(_generators_onnx(tmp_path / "range.onnx", n))
    assert t["params"] == 0
    assert t["flops"] == n + 2  # the Range's sum: n additions; the two scalar adds: 1 each
    # written: arange n int64 (3.2e9), the cast n float32 (1.6e9), three scalars (4 bytes each)
    assert t["bytes_written"] == 8 * n + 4 * n + 3 * 4
    # read: the cast reads the arange (8n), the sum the cast (4n); the adds two scalars each
    assert t["bytes_read"] == 8 * n + 4 * n + 2 * 2 * 4


def test_onnx_small_generators_are_still_folded(tmp_path, monkeypatch):
    """Small generated tensors keep their values (converters read them: shapes, positions); the cap counts the
    generated elements of the whole model, so a chain of many large ones cannot add up either. (preflight's own
    folding of small integer values, `fold_constant_indices`, would compute the int64 Range before TVM sees it: off
    here, this is TVM's generator cap.)"""
    from analyzer.frontends import onnx_frontend
    from analyzer.frontends.onnx_frontend import load_onnx
    from passes import tvm_ir

    monkeypatch.setattr(onnx_frontend, "FOLD_ELEMENTS", 0)

    p = _generators_onnx(tmp_path / "small.onnx", 1000)

    def ops() -> tuple[bool, bool]:
        text = str(load_onnx(p, {}, None).mod["main"])
        return "R.arange" in text, "R.full" in text

    assert ops() == (False, False)  # both folded into constants (2 x 1,000 elements, under 2**24)
    assert _totals(p)["flops"] == 1  # and so are their sums: only `+ x` remains
    monkeypatch.setattr(tvm_ir, "ONNX_FOLDED_ELEMENTS", 1500)
    assert ops() == (False, True)  # the Range's 1,000 fit; with the ConstantOfShape's 1,000 they would not
    monkeypatch.setattr(tvm_ir, "ONNX_FOLDED_ELEMENTS", 500)
    assert ops() == (True, True)
    t = _totals(p)
    assert t["flops"] == 1000 + 2  # the Range's sum now runs: 1,000 additions, and the two scalar adds
    assert t["bytes_written"] == 8 * 1000 + 4 * 1000 + 3 * 4  # arange int64, cast float32, three scalars


# ---- 4. one budget for every analysis ---------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI in a real process: the budget ends the process (os._exit), which CliRunner cannot survive."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "analyzer.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def _one_line_exit_3(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert p.stdout == "" and "Traceback" not in p.stderr
    # (`report` announces its batch sweep once its first batch is done, where that finishes inside the budget)
    lines = [line for line in p.stderr.strip().splitlines() if not line.startswith("batch sweep: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


def test_memory_budget_stops_the_analysis(files):  # noqa: F811
    """Importing TVM and torch alone adds far more than 10 MiB of RSS: a budget of 0.01 GiB stops analyze."""
    msg = _one_line_exit_3(_cli("analyze", str(files["onnx"]), "--max-memory", "0.01"))
    assert (
        msg
        == "error: tiny.onnx: the analysis went over its memory budget (0.01 GiB; --max-memory raises it); stopped it"
    )


@pytest.mark.parametrize("command", ["analyze", "predict", "report"])
def test_time_budget_stops_every_command(tmp_path, files, command):  # noqa: F811
    """The imports alone take longer than 0.05 s; the budget applies to analyze, predict and report alike."""
    out = ("-o", str(tmp_path / "r.json")) if command == "report" else ()
    msg = _one_line_exit_3(_cli(command, str(files["pt2"]), *out, "--timeout", "0.05"))
    assert "net.pt2: the analysis did not finish within its time budget (0.05 s; --timeout raises it)" in msg


def test_budget_counts_and_kills_child_processes(tmp_path):
    """A tracked child holding 256 MiB goes over a 0.1 GiB budget its parent is far under: exit 3, child killed."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from analyzer import budget\n"
        "hold = 'b = bytearray(256 << 20); import time; time.sleep(60)'\n"
        "with budget.watch('m.onnx', 0.1, 0):\n"
        "    child = subprocess.Popen([sys.executable, '-c', hold])\n"
        "    print(child.pid, flush=True)\n"
        "    budget.track(child.pid)\n"
        "    time.sleep(30)\n"
        "print('not stopped')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip() == (
        "error: m.onnx: the analysis went over its memory budget (0.1 GiB; --max-memory raises it); stopped it"
    )
    pid = int(p.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:  # SIGKILL is delivered at once; reaping may lag
        time.sleep(0.1)
    assert not _running(pid)


def _running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (killed, waiting to be reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return status.split("State:")[1].split()[0] != "Z"


def test_isolated_steps_get_what_is_left_of_the_time_budget():
    from analyzer import budget
    from analyzer.frontends.isolate import Limits, child_limits

    own = Limits()  # 1,800 s of wall and CPU time, 8 GiB of address space
    assert child_limits(own) == own  # no budget active: unchanged
    with budget.watch("m.pt2", 0, 30):
        capped = child_limits(own)
    assert 1.0 <= capped.wall_s <= 30 and capped.cpu_s <= 31
    assert capped.memory == own.memory  # address space is not RSS: a child may map parameters it never touches


# ---- 5. long recurrences ------------------------------------------------------------------------------------


def _recurrent_onnx(path: Path, kind: str, steps: int, *, direction: str = "forward", via_identity: bool = False):
    """One ONNX `kind` node (hidden 4, input 3, batch 1) over `steps` steps; X a graph input, or an Identity of one."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g, dirs = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind], 2 if direction == "bidirectional" else 1
    w = numpy_helper.from_array(np.zeros((dirs, g * 4, 3), np.float32), "W")
    r = numpy_helper.from_array(np.zeros((dirs, g * 4, 4), np.float32), "R")
    nodes = [helper.make_node("Identity", ["x"], ["xi"])] if via_identity else []
    outs = ["y", "yh"] + (["yc"] if kind == "LSTM" else [])
    nodes.append(
        helper.make_node(kind, ["xi" if via_identity else "x", "W", "R"], outs, hidden_size=4, direction=direction)
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, 3])
    yh = helper.make_tensor_value_info("yh", TensorProto.FLOAT, [dirs, 1, 4])
    graph = helper.make_graph(nodes, "rnn", [x], [yh], [w, r])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    return path


@pytest.mark.parametrize(("kind", "steps"), [("LSTM", 10**6), ("GRU", 2**31 - 1)])
def test_recurrence_longer_than_preflight_unrolls_is_extrapolated(tmp_path, kind, steps):
    """The hostile files: an LSTM over 10**6 steps (killed at 120 s, 10 GB), a GRU over the largest dimension
    (16.8 GB). Each step was ten Relax bindings; now the model is analysed at 12, 13 and 14 steps and the totals
    extrapolated (passes.analysis.extrapolate_steps): exit 0, the MACs of every step."""
    from analyzer import analyze

    rep = analyze(str(_recurrent_onnx(tmp_path / "rnn.onnx", kind, steps)))
    assert rep.analysis.steps.steps == steps
    # B 1, I 3, H 4: steps x G*4 x (3 + 4) MACs, G = 4 (LSTM), 3 (GRU)
    assert rep.totals.macs == steps * {"LSTM": 16, "GRU": 12}[kind] * 7


def test_recurrence_cap_counts_directions_and_holds_in_the_converter(tmp_path, monkeypatch):
    from passes import tvm_ir

    monkeypatch.setattr(tvm_ir, "MAX_RECURRENT_STEPS", 8)  # below the 12 to 14 steps of the samples: refused
    assert run_ok(_recurrent_onnx(tmp_path / "a.onnx", "LSTM", 8))  # 8 steps: at the cap
    msg = refused(_recurrent_onnx(tmp_path / "b.onnx", "RNN", 5, direction="bidirectional"), 1)
    assert "a sequence of 5 steps in 2 directions is more than preflight unrolls (8 per node)" in msg  # 5 x 2 > 8
    # X computed by another node: the shape is known only in the import, where the converter raises it
    msg = refused(_recurrent_onnx(tmp_path / "c.onnx", "GRU", 9, via_identity=True), 1)
    assert "GRU node 'GRU': a sequence of 9 steps (more than the 8 preflight unrolls per node) is not supported" in msg
    # 20 steps: sampled at 12 steps, which is still more than 8: the sample's refusal
    msg = refused(_recurrent_onnx(tmp_path / "d.onnx", "GRU", 20), 1)
    assert "a sequence of 12 steps (more than the 8 preflight unrolls per node)" in msg


def test_recurrence_fed_by_a_computed_sequence_is_extrapolated(tmp_path, monkeypatch):
    """X from an Identity of the input: the converter raises the long recurrence in the import; the input axis
    equal to the sequence is shortened all the same."""
    from analyzer import analyze
    from passes import tvm_ir

    monkeypatch.setattr(tvm_ir, "MAX_RECURRENT_STEPS", 16)
    rep = analyze(str(_recurrent_onnx(tmp_path / "c.onnx", "GRU", 100, via_identity=True)))
    assert rep.analysis.steps.steps == 100
    assert rep.totals.macs == 100 * 12 * 7  # 100 steps x 3 gates x 4 x (3 + 4) = 8,400


def test_pt2_node_cap_counts_the_graph_and_its_subgraphs(tmp_path, files, monkeypatch):  # noqa: F811
    """An unrolled chain costs about 15 ms a node to deserialize, decompose and import: more than MAX_NODES nodes
    are refused before the child starts. Rebuilt small: Net has 2 nodes (linear, relu), the cap lowered to 1."""
    from analyzer.frontends import pt2_safety

    monkeypatch.setattr(pt2_safety, "MAX_NODES", 1)
    assert "its graph has more than 1 nodes (subgraphs included)" in refused(files["pt2"])
    # a subgraph (a cond branch, a while_loop body) counts: 1 node above, 2 in the graph an argument holds
    sub = {"nodes": [{"target": "a"}, {"target": "b"}], "tensor_values": {}}
    graph = {"nodes": [{"target": "cond", "inputs": [{"arg": {"as_graph": {"graph": sub}}}]}], "tensor_values": {}}
    monkeypatch.setattr(pt2_safety, "MAX_NODES", 3)
    pt2_safety._check_node_count(graph)
    monkeypatch.setattr(pt2_safety, "MAX_NODES", 2)
    with pytest.raises(pt2_safety._Refused, match="more than 2 nodes"):
        pt2_safety._check_node_count(graph)
