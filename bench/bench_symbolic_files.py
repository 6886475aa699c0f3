"""Symbolic files over the zoo: every family saved as a `.pt2` and an ONNX file with its batch dynamic, imported once
with the batch symbolic (`analyzer.symbolic.load_symbolic`), and each point checked against the same file analysed
concretely there; prints one table.

Per family (its smallest spec, as bench/bench_routes.py picks it) and format:
  symbolic   whether the file imports with its batch symbolic, or why not (the refusal, shortened)
  points     the batches checked (--points, default 2, 5, 17; a .pt2 also 1) and how many equal the concrete
             analysis of the file at that batch operator for operator (op, name, category, MACs, FLOPs, bytes,
             shapes), in totals, liveness and the kernel view
  first difference   where a point differs: the batch and the first differing operator
A file the exporter cannot write is a row with the exporter's error. Each family runs in its own process (--jobs,
--timeout per family).

Usage: python bench/bench_symbolic_files.py [--families resnet,bert] [--formats pt2,onnx] [--jobs 2] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))


def _save(module, inputs: tuple, path: Path, fmt: str) -> None:
    """`module` saved with dimension 0 of every tensor input dynamic (one `Dim("batch")` / `dynamic_axes` "batch")."""
    import torch

    batched = [isinstance(t, torch.Tensor) and t.ndim >= 1 for t in inputs]
    if fmt == "pt2":
        batch = torch.export.Dim("batch")
        dynamic = tuple({0: batch} if b else None for b in batched)
        torch.export.save(torch.export.export(module, inputs, dynamic_shapes=dynamic), path)
        return
    names = [f"x{i}" if i else "x" for i in range(len(inputs))]
    axes = {n: {0: "batch"} for n, b in zip(names, batched, strict=True) if b}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # the TorchScript exporter, as bench_routes; the dynamo one where it cannot (GPT-2's aten::diff)
            torch.onnx.export(
                module, inputs, str(path), dynamo=False, opset_version=17, input_names=names, dynamic_axes=axes
            )
        except Exception:  # noqa: BLE001
            batch = torch.export.Dim("batch")
            dynamic = tuple({0: batch} if b else None for b in batched)
            torch.onnx.export(module, inputs, str(path), dynamo=True, opset_version=18, dynamic_shapes=dynamic)


def _key(c):
    return (c.index, c.name, c.op, c.category, c.macs, c.flops, c.bytes_read, c.bytes_written, c.inputs, c.outputs)


def _one(family: str, formats: list[str], points: list[int]) -> list[dict]:
    from bench_routes import zoo_spec

    import zoo
    from analyzer.errors import PreflightError
    from analyzer.pipeline import analyze_model
    from analyzer.symbolic import analyze_at, load_symbolic

    fam = next(f for f in zoo.list_families() if f.name == family)
    spec = zoo_spec(fam)
    built = zoo.build(spec, batch=2)
    module, inputs = built.module.eval(), tuple(built.example_inputs)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-symfiles-"))
    for fmt in formats:
        row = {"model": spec, "format": fmt, "points": [], "equal": 0, "difference": ""}
        t0 = time.perf_counter()
        path = work / f"m.{fmt}"
        try:
            _save(module, inputs, path, fmt)
        except Exception as exc:  # noqa: BLE001 - the row says why
            row["symbolic"] = f"export: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
            rows.append(row)
            continue
        try:
            sm = load_symbolic(str(path))
        except PreflightError as exc:
            row["symbolic"] = f"no: {str(exc)[:100]}"
            rows.append(row)
            continue
        row["symbolic"] = "yes"
        for b in [p for p in ([1] if fmt == "pt2" else []) + points if sm.covers(p)]:
            row["points"].append(b)
            try:
                a = analyze_at(sm, b).analysis
                o = analyze_model(str(path), batch=b).analysis
            except PreflightError as exc:
                row["difference"] = row["difference"] or f"b={b}: {str(exc)[:80]}"
                continue
            ka, ko = [_key(c) for c in a.ops], [_key(c) for c in o.ops]
            if ka == ko and a.totals == o.totals and a.memory == o.memory and a.kernels == o.kernels:
                row["equal"] += 1
            elif not row["difference"]:
                n = min(len(ka), len(ko))
                first = next((i for i, (x, y) in enumerate(zip(ka, ko, strict=False)) if x != y), n)
                ours, theirs = (ka[first][2] if first < len(ka) else "-"), (ko[first][2] if first < len(ko) else "-")
                what = f"op {first}: {ours} vs {theirs}" if first < n or len(ka) != len(ko) else "totals or kernels"
                row["difference"] = f"b={b}: {len(ka)} vs {len(ko)} ops; {what}"
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
    return rows


def _child(family: str, formats: list[str], points: list[int], timeout: float) -> list[dict]:
    cmd = [sys.executable, __file__, "--child", family, "--formats", ",".join(formats)]
    cmd += ["--points", ",".join(map(str, points))]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"}
        )
    except subprocess.TimeoutExpired:
        return [{"model": family, "format": f, "symbolic": f"timed out after {timeout:.0f} s"} for f in formats]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("ROWS ")]
    if not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1][:100]
        return [{"model": family, "format": f, "symbolic": f"failed: {tail}"} for f in formats]
    return json.loads(lines[-1][5:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="", help="zoo families, comma-separated (default: all)")
    ap.add_argument("--formats", default="pt2,onnx")
    ap.add_argument("--points", default="2,5,17")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    points = [int(p) for p in args.points.split(",") if p]
    if args.child:
        warnings.filterwarnings("ignore")
        print("ROWS " + json.dumps(_one(args.child, formats, points)), flush=True)
        return
    import zoo

    families = [f for f in args.families.split(",") if f] or [f.name for f in zoo.list_families()]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda f: _child(f, formats, points, args.timeout), families))
    rows = [r for rs in results for r in rs]
    print(f"symbolic files: {len(families)} zoo families x {', '.join(formats)}; points {args.points} (.pt2 also 1)")
    print("model | format | symbolic | points equal | first difference | s")
    for r in rows:
        pts = r.get("points") or []
        eq = f"{r.get('equal', 0)} / {len(pts)}" if pts else "-"
        diff, secs = r.get("difference") or "-", r.get("seconds", "-")
        print(f"{r['model']} | {r['format']} | {r['symbolic']} | {eq} | {diff} | {secs}")
    for fmt in formats:
        mine = [r for r in rows if r["format"] == fmt]
        sym = [r for r in mine if r["symbolic"] == "yes"]
        exact = [r for r in sym if r.get("points") and r["equal"] == len(r["points"])]
        print(f"{fmt}: {len(sym)} of {len(mine)} import symbolic; {len(exact)} of them equal at every point")
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
