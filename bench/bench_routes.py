"""One model, one prediction, over every zoo family and the outside-architecture suite (issue 23, item 4).

Each model (the zoo family's first variant shrunk: 2 layers, 64 x 64 images, at most 32 tokens, where its bounds
allow; the models of tests/outside_models.py repeated to batch 2) is analysed three ways at batch 2: the `nn.Module`
with example inputs, the `.pt2` of `torch.export.save`, the ONNX file of `torch.onnx.export` (TorchScript exporter,
opset 17, batch norm kept; the dynamo exporter where that fails), each predicted on h100-80gb. The count oracle is
the eager dispatch trace (tests/kernel_trace.py, inference mode, on the CPU). One row per model:

    model | kernels module/pt2/onnx | trace | latency ms module/pt2/onnx | max lat diff | max count diff | verdict

The diffs are the largest |route / module - 1| over the `.pt2` and ONNX routes, the ONNX route against the module
analysed as a constant-folding runtime runs it ("folded", shown where the module computes on weights alone: the
project's rule for ONNX files, docs/execution-model.md, as in tests/test_routes.py); PASS when latency is within 5% and
the count within 10%. A route that fails gets its one-line reason instead of numbers. Every model runs in its own
process (`--jobs` at a time, `--timeout` seconds each).

Usage: python bench/bench_routes.py [--families resnet,bert] [--outside gemma,phi] [--no-outside] [--no-zoo]
       [--jobs 2] [--timeout 600] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFLIGHT_CHECKPOINTS", str(ROOT / "tests" / "no-checkpoints"))

DEVICE = "h100-80gb"
BATCH = 2
LAT_TOL, COUNT_TOL = 0.05, 0.10


def zoo_spec(family) -> str:
    """The family's first variant with the smallest sizes its bounds allow among 2 layers / 64 px / 32 tokens."""
    import zoo

    variant = next(iter(family.variants))
    wanted = {"layers": 2, "resolution": 64, "seq_len": 32}
    overrides = {k: v for k, v in wanted.items() if k in family.params}
    while True:
        spec = variant + ("?" + "&".join(f"{k}={v}" for k, v in overrides.items()) if overrides else "")
        try:
            zoo.resolve(spec) if hasattr(zoo, "resolve") else None
            return spec
        except zoo.ZooError:
            if not overrides:
                return variant
            overrides.pop(next(iter(overrides)) if "resolution" not in overrides else "resolution")


_T0 = time.monotonic()


def _step(what: str) -> None:
    """Mark the start of a step of `_one` on stdout ("STEP <seconds since start> <what>"), so that the row of a
    model over `--timeout` can say where its time went (`_timed_out`)."""
    print(f"STEP {time.monotonic() - _T0:.1f} {what}", flush=True)


def _timed_out(timeout: float, out: str) -> str:
    """The reason of a model over `timeout` s, from its child's stdout so far: the step it was in and how long each
    step before took ("timed out after 180 s in trace (build 3 s, export pt2 20 s, ...)")."""
    steps = [ln.split(" ", 2)[1:] for ln in out.splitlines() if ln.startswith("STEP ") and ln.count(" ") >= 2]
    if not steps:
        return f"timed out after {timeout:.0f} s"
    marks = [(float(t), what) for t, what in steps]
    done = [f"{what} {marks[i + 1][0] - t:.0f} s" for i, (t, what) in enumerate(marks[:-1])]
    last_t, last = marks[-1]
    return f"timed out after {timeout:.0f} s in {last} (from {last_t:.0f} s; " + ", ".join(done) + ")"


def _one(kind: str, name: str) -> dict:
    """Analyse one model on every route; a dict of the row's numbers (or the failing route's reason)."""
    import torch
    from kernel_trace import trace_kernels
    from route_export import DYNAMO, KEEP_BN, export_onnx, export_pt2

    from analyzer import pipeline, report

    row: dict = {"model": name, "errors": {}}
    _step("build")
    if kind == "zoo":
        import zoo

        spec = zoo_spec(next(f for f in zoo.list_families() if f.name == name))
        row["model"] = spec
        built = zoo.build(spec, batch=BATCH)
        module, inputs = built.module.eval(), tuple(built.example_inputs)
    else:
        import outside_models

        module, inputs = outside_models.BUILDERS[name]()
        inputs = tuple(torch.cat([t] * BATCH) if isinstance(t, torch.Tensor) else t for t in inputs)
    work = Path(tempfile.mkdtemp(prefix="bench-routes-"))
    paths: dict = {"module": None}
    _step("export pt2")
    try:
        paths["pt2"] = str(export_pt2(module, inputs, work / "m.pt2"))
    except Exception as e:  # noqa: BLE001 (a row says why)
        row["errors"]["pt2"] = f"export: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    for args in (KEEP_BN, DYNAMO):
        _step(f"export onnx ({'dynamo' if args['dynamo'] else 'torchscript'})")
        try:
            paths["onnx"] = str(export_onnx(module, inputs, work / "m.onnx", args))
            row["onnx_exporter"] = "dynamo" if args["dynamo"] else "torchscript"
            row["errors"].pop("onnx", None)
            break
        except Exception as e:  # noqa: BLE001
            row["errors"]["onnx"] = f"export: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    row["count"], row["latency_ms"] = {}, {}
    for route, path in paths.items():
        _step(f"analyse {route}")
        try:
            t0 = time.perf_counter()
            rep = (
                report(module, inputs, devices=[DEVICE], batches=[])
                if path is None
                else report(path, devices=[DEVICE], batches=[])
            )
            row.setdefault("seconds", {})[route] = round(time.perf_counter() - t0, 1)
            row["count"][route] = len(rep.analysis.kernels)
            row["latency_ms"][route] = rep.predictions[0].latency_ms
            weight_only = any(c.weight_only for c in rep.analysis.ops) or rep.analysis.kernel_view.recomputed
            if path is None and weight_only:  # the module as a constant-folding runtime runs it: the ONNX rule
                _step("analyse module folded")
                with mock.patch.object(
                    pipeline, "FOLDING_RUNTIMES", (*pipeline.FOLDING_RUNTIMES, rep.model["framework"])
                ):
                    folded = report(module, inputs, devices=[DEVICE], batches=[])
                row["count"]["folded"] = len(folded.analysis.kernels)
                row["latency_ms"]["folded"] = folded.predictions[0].latency_ms
        except Exception as e:  # noqa: BLE001
            row["errors"][route] = f"analyse: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    _step("trace")
    try:
        trace = trace_kernels(module, inputs, inference=True)
        row["trace"], row["trace_dependent"] = trace.count, trace.dependent_count
    except Exception as e:  # noqa: BLE001
        row["errors"]["trace"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    return row


def _diffs(row: dict) -> tuple[float | None, float | None]:
    """(max latency diff, max count diff) of the `.pt2` and ONNX routes against the module, as fractions."""
    lat, cnt = row.get("latency_ms", {}), row.get("count", {})
    if "module" not in lat:
        return None, None
    others = [r for r in ("pt2", "onnx") if r in lat]
    if not others:
        return None, None
    base = {r: "folded" if r == "onnx" and "folded" in lat else "module" for r in others}
    return (
        max(abs(lat[r] / lat[base[r]] - 1) for r in others),
        max(abs(cnt[r] / cnt[base[r]] - 1) for r in others),
    )


def _fmt(row: dict) -> str:
    cnt, lat = row.get("count", {}), row.get("latency_ms", {})
    c = "/".join(str(cnt.get(r, "-")) for r in ("module", "pt2", "onnx"))
    if "folded" in cnt:
        c += f" (folded {cnt['folded']})"
    tr = row.get("trace", "-")
    trd = row.get("trace_dependent")
    if trd is not None and trd != tr:
        tr = f"{tr} ({trd})"
    la = "/".join(f"{lat[r]:.3f}" if r in lat else "-" for r in ("module", "pt2", "onnx"))
    if "folded" in lat:
        la += f" (folded {lat['folded']:.3f})"
    dl, dc = _diffs(row)
    if dl is None:
        verdict = "NO ROUTES"
    else:
        verdict = "PASS" if dl <= LAT_TOL and dc <= COUNT_TOL and not row["errors"] else "FAIL"
    ds = f"{dl:+.1%}" if dl is not None else "-"
    dcs = f"{dc:+.1%}" if dc is not None else "-"
    line = f"| {row['model']} | {c} | {tr} | {la} | {ds} | {dcs} | {verdict} |"
    if row["errors"]:
        line += " " + "; ".join(f"{r}: {m}" for r, m in row["errors"].items())
    if row.get("onnx_exporter") == "dynamo":
        line += " (ONNX: dynamo exporter)"
    return line


def _select(names: list[str], wanted_csv: str | None, what: str) -> list[str] | None:
    """`names` filtered to the comma-separated `wanted_csv` (all of them when it is empty), in `names`' order; None
    after a one-line error when it names one that is not there."""
    if not wanted_csv:
        return names
    wanted = wanted_csv.split(",")
    bad = sorted(set(wanted) - set(names))
    if bad:
        print(f"error: unknown {what}: {', '.join(bad)}", file=sys.stderr)
        return None
    return [n for n in names if n in wanted]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", help="comma-separated zoo family names (default: all)")
    ap.add_argument("--outside", help="comma-separated tests/outside_models.py builders (default: all)")
    ap.add_argument("--no-zoo", action="store_true")
    ap.add_argument("--no-outside", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("ROW " + json.dumps(_one(*a.one)))
        return 0
    import zoo

    jobs: list[tuple[str, str]] = []
    if not a.no_zoo:
        names = _select([f.name for f in zoo.list_families()], a.families, "zoo families")
        if names is None:
            return 2
        jobs += [("zoo", n) for n in names]
    if not a.no_outside:
        import outside_models

        names = _select(list(outside_models.BUILDERS), a.outside, "outside models")
        if names is None:
            return 2
        jobs += [("outside", n) for n in names]

    print(f"{DEVICE}, batch {BATCH}; PASS = latency within {LAT_TOL:.0%} and kernel count within {COUNT_TOL:.0%}")
    print("trace: the eager dispatch trace's kernels (input-dependent ones in brackets where fewer)\n")
    print("| model | kernels module/pt2/onnx | trace | latency ms module/pt2/onnx | max lat diff | max count diff | |")
    print("|---|---|---|---|---|---|---|")
    rows: list[dict] = []
    running: list[tuple[tuple[str, str], subprocess.Popen, float]] = []
    pending = list(jobs)
    while pending or running:
        while pending and len(running) < a.jobs:
            job = pending.pop(0)
            # the child's output goes to files, not pipes: a pipe the parent reads only at the end blocks the child
            # once it holds 64 KiB (the TorchScript exporter prints the whole TorchScript graph where it fails, 130
            # KB for Mistral-small, before the dynamo exporter takes over), and the model then "times out"
            out_f, err_f = (tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") for _ in range(2))
            proc = subprocess.Popen(
                [sys.executable, __file__, "--one", *job], stdout=out_f, stderr=err_f, start_new_session=True
            )
            running.append((job, proc, time.monotonic(), out_f, err_f))
        time.sleep(0.5)
        for item in list(running):
            job, proc, t0, out_f, err_f = item
            if proc.poll() is None and time.monotonic() - t0 < a.timeout:
                continue
            running.remove(item)
            timed_out = proc.poll() is None
            if timed_out:  # the child and the processes it started (the frontends' import processes)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            out_f.seek(0)
            err_f.seek(0)
            out, err = out_f.read(), err_f.read()
            out_f.close()
            err_f.close()
            if timed_out:
                row = {"model": job[1], "errors": {"all": _timed_out(a.timeout, out)}}
            else:
                line = next((ln for ln in out.splitlines() if ln.startswith("ROW ")), None)
                if line is None:
                    last = (err.strip().splitlines() or ["no output"])[-1][:120]
                    row = {"model": job[1], "errors": {"all": f"crashed (rc {proc.returncode}): {last}"}}
                else:
                    row = json.loads(line[4:])
            row["kind"], row["wall_s"] = job[0], round(time.monotonic() - t0, 1)
            rows.append(row)
            print(_fmt(row), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    fails = sum(1 for r in rows if "FAIL" in _fmt(r) or "NO ROUTES" in _fmt(r))
    print(f"\n{len(rows) - fails} of {len(rows)} models PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
