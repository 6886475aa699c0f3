"""Memory and time of the ONNX route against the `.pt2` route (issue 12). Prints one table.

Models, built in a temporary folder and deleted afterwards:
- Qwen2-0.5B's configuration (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocab 151936,
  tied embeddings; random weights), exported with `torch.onnx.export(dynamo=True, external_data=True)` and
  with `torch.export.save`, input_ids 1x128;
- a Llama-7B-shaped ONNX graph (32 layers, hidden 4096, 32 heads, intermediate 11008, vocab 32000: 6.7 B
  parameters, 27 GB of float32) written with onnx.helper, every large weight in one external-data file made with
  `os.truncate`: a sparse file, so the bench writes almost nothing to disk. No .pt2 of it (that would write 27 GB).

Each row is `preflight analyze MODEL --format json` in a fresh process; peak RSS is
`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss` of a wrapper process that runs only that command (the largest
resident set of the command or any process it started and waited for: the `.pt2` route's isolated child).
Goal: peak RSS of the ONNX route independent of weight size, <= 1.5 GB for both models, time no worse than `.pt2`.

Usage: python bench/bench_onnx_memory.py [--before SRC] [--skip-qwen] [--skip-7b]
  --before SRC: also run the ONNX route with the preflight source tree at SRC (e.g. a `git worktree` of an older
  commit) on the Qwen2 file; not on the 7B file, which the old route reads whole into memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

EXPORT_QWEN = r"""
import sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
torch.manual_seed(0)
cfg = Qwen2Config(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, use_cache=False)
model = Qwen2ForCausalLM(cfg).eval()
ids = torch.ones(1, 128, dtype=torch.long)
out = sys.argv[1]
if out.endswith(".onnx"):
    torch.onnx.export(model, (ids,), out, dynamo=True, external_data=True, input_names=["input_ids"], verbose=False)
else:
    torch.export.save(torch.export.export(model, (ids,)), out)
"""


def measure(cmd: list[str], env: dict, cwd: Path) -> dict:
    """Run `cmd` in a fresh wrapper process: wall seconds and the peak RSS (bytes) of cmd and its children."""
    wrapper = [sys.executable, str(Path(__file__).resolve()), "--measure", json.dumps(cmd)]
    out = subprocess.run(wrapper, check=True, capture_output=True, text=True, env=env, cwd=cwd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure_child(cmd: list[str]) -> None:
    t = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        print(json.dumps({"error": res.stderr.strip()[-400:]}))
        return
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"wall_s": wall, "peak_rss": peak}))


def llama7b_onnx(folder: Path) -> tuple[Path, int, int]:
    """A Llama-7B-shaped decoder as ONNX with its weights in a sparse external file; (path, params, bytes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    layers, hidden, heads, inter, vocab, seq = 32, 4096, 32, 11008, 32000, 128
    head = hidden // heads
    data = folder / "llama7b.onnx.data"
    inits: list = []
    nodes: list = []
    offset = 0
    params = 0

    def weight(name: str, shape: tuple[int, ...]) -> str:
        nonlocal offset, params
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
        n = int(np.prod(shape))
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(4 * n))):
            t.external_data.add(key=k, value=v)
        inits.append(t)
        offset += 4 * n
        params += n
        return name

    def small(name: str, array: np.ndarray) -> str:
        nonlocal params
        inits.append(numpy_helper.from_array(array, name))
        params += array.size if array.dtype == np.float32 else 0
        return name

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    split_heads = small("split_heads", np.array([1, seq, heads, head], np.int64))
    merge_heads = small("merge_heads", np.array([1, seq, hidden], np.int64))
    scale = small("scale", np.array(np.sqrt(head), np.float32))
    x = node("Gather", [weight("embed", (vocab, hidden)), "input_ids"], "h0", axis=0)
    for i in range(layers):
        p = f"l{i}."
        n1 = node("LayerNormalization", [x, small(p + "ln1", np.ones(hidden, np.float32))], p + "n1", axis=-1)
        qkv = []
        for w in ("q", "k", "v"):
            y = node("MatMul", [n1, weight(p + w, (hidden, hidden))], p + w + "_proj")
            y = node("Reshape", [y, split_heads], p + w + "_heads")
            qkv.append(node("Transpose", [y], p + w + "_bhsd", perm=[0, 2, 1, 3]))
        kt = node("Transpose", [qkv[1]], p + "kt", perm=[0, 1, 3, 2])
        s = node("Div", [node("MatMul", [qkv[0], kt], p + "qk"), scale], p + "scores")
        a = node("MatMul", [node("Softmax", [s], p + "probs", axis=-1), qkv[2]], p + "attn")
        a = node("Reshape", [node("Transpose", [a], p + "bshd", perm=[0, 2, 1, 3]), merge_heads], p + "merged")
        x = node("Add", [x, node("MatMul", [a, weight(p + "o", (hidden, hidden))], p + "o_proj")], p + "res1")
        n2 = node("LayerNormalization", [x, small(p + "ln2", np.ones(hidden, np.float32))], p + "n2", axis=-1)
        g = node("MatMul", [n2, weight(p + "gate", (hidden, inter))], p + "g")
        u = node("MatMul", [n2, weight(p + "up", (hidden, inter))], p + "u")
        act = node("Mul", [node("Mul", [g, node("Sigmoid", [g], p + "sig")], p + "silu"), u], p + "act")
        x = node("Add", [x, node("MatMul", [act, weight(p + "down", (inter, hidden))], p + "d")], p + "res2")
    x = node("LayerNormalization", [x, small("ln_f", np.ones(hidden, np.float32))], "nf", axis=-1)
    node("MatMul", [x, weight("lm_head", (hidden, vocab))], "logits")
    graph = helper.make_graph(
        nodes,
        "llama7b",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "llama7b.onnx"
    onnx.save(model, str(path))
    with open(data, "wb") as f:  # a sparse file: its size is the weights', its blocks are not written
        os.truncate(f.fileno(), offset)
    return path, params, offset


def analyze_row(label: str, route: str, path: Path, weights: int, src: Path = ROOT) -> dict:
    out = path.parent / f"{path.stem}.{route.split()[0]}.json"
    cmd = [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    m = measure(cmd, env, src)  # `python -m` imports from the working directory first
    row = {"model": label, "weights": weights, "route": route, **m}
    if "error" not in m:
        doc = json.loads(out.read_text())
        row.update(params=doc["totals"]["params"], flops=doc["totals"]["flops"])
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'model':<28} {'weights':>9} {'route':<16} {'wall':>8} {'peak RSS':>9} {'params':>14} {'FLOPs':>18}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<28} {r['weights'] / 1e9:>7.2f}GB {r['route']:<16} failed: {r['error'][:80]}")
            continue
        print(
            f"{r['model']:<28} {r['weights'] / 1e9:>7.2f}GB {r['route']:<16} {r['wall_s']:>7.1f}s "
            f"{r['peak_rss'] / 2**30:>7.2f}GiB {r['params']:>14,} {r['flops']:>18,}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, help="an older preflight source tree to run the ONNX route with too")
    ap.add_argument("--skip-qwen", action="store_true")
    ap.add_argument("--skip-7b", action="store_true")
    ap.add_argument("--dir", type=Path, default=None, help="where to build the models (default: a temp folder)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="preflight-onnx-mem-", dir=args.dir) as tmp:
        d = Path(tmp)
        free = shutil.disk_usage(d).free
        if not args.skip_qwen and free < 8 * 2**30:
            sys.exit(f"{d}: {free / 2**30:.1f} GiB free; the Qwen2 files need about 4 GiB (8 to be safe)")
        if not args.skip_qwen:
            onnx_dir = d / "qwen2_onnx"
            onnx_dir.mkdir()
            onnx_path, pt2_path = onnx_dir / "qwen2_0_5b.onnx", d / "qwen2_0_5b.pt2"
            for out in (onnx_path, pt2_path):
                subprocess.run([sys.executable, "-c", EXPORT_QWEN, str(out)], check=True, capture_output=True)
            weights = onnx_path.with_suffix(".onnx.data").stat().st_size
            rows.append(analyze_row("Qwen2-0.5B (config sizes)", ".pt2", pt2_path, weights))
            rows.append(analyze_row("Qwen2-0.5B (config sizes)", "ONNX", onnx_path, weights))
            if args.before:
                rows.append(analyze_row("Qwen2-0.5B (config sizes)", "ONNX (before)", onnx_path, weights, args.before))
            shutil.rmtree(onnx_dir)
            pt2_path.unlink()
        if not args.skip_7b:
            path, _, nbytes = llama7b_onnx(d)
            rows.append(analyze_row("Llama-7B shape (6.7B params)", "ONNX", path, nbytes))
    print_table(rows)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        _measure_child(json.loads(sys.argv[2]))
    else:
        main()
