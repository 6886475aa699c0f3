"""Symbolic batch benchmark: an 8-point batch sweep from one symbolic export against the sweep that exports the
model again at every batch, beside one analysis of the same model; prints one table.

In one warm process (imports and first-call costs paid by a warm-up run of each path first), for each model:
  one analysis   `analyze_model(zoo:NAME, batch=1)` + one prediction (what `preflight predict` does)
  sweep, before  `run_sweep(..., symbolic=False)`: batches 1, 2, 4, ..., 128, each exported and imported again
  sweep, after   `run_sweep(..., solve=False)`: batch 1 exported on its own, 2..128 evaluated from one symbolic
                 export
  + solve        `run_sweep(...)`: the same, and the largest batch fitting each MIG profile solved exactly
  formulas       `formulas(load_symbolic(...))`: the export and the fits of every per-op count (8 sample points)
and where the sweep's time goes (a second table):
  export b=1     the concrete export + import at batch 1 (`load(zoo:NAME, batch=1)`)
  symbolic       the symbolic export + import + extraction (`load_symbolic`)
  per point      one point from the symbolic graph: `analyze_at` + `predict` (mean over batches 2..128)
Each timing is the best of --repeat runs (wall clock, `time.perf_counter`); each repeat runs every case of a model
in turn, so the columns see the same load. The two sweeps' points are compared and must be identical.

`--llm zoo:NAME` adds the `preflight llm` context table: `llm(NAME, prompt 512, generate 128, batch 4)` with the 5
contexts 512, 1024, 2048, 3072, 4096 against the same call with the one context 640 (= prompt + generate: the
request's own prefill + decode analysis, which every call makes), and the 5 contexts with each point bound in TVM
and extracted again (`StepGraph.evaluate = False`, the way before), side by side, best of --repeat.

`--file pt2` (or `onnx`) runs every case on a file instead of the zoo model: the model exported once before timing,
as a user brings it, with its batch dynamic (`torch.export.Dim` on dimension 0 and `torch.export.save`; or the
TorchScript ONNX exporter with `dynamic_axes`); "export" is then the file's import at batch 1, "symbolic" its import
with the batch left symbolic (no export: the file's own dynamic dim). `--file paddle` saves `paddle.vision.models`'
NAME (random weights, `paddle.jit.save` with a `None` batch at 224 x 224; `--models` then names those, default
resnet18,resnet50,mobilenet_v2): "export" is its conversion (paddle2onnx, in preflight's child) and import at batch 1,
"symbolic" the same with the batch symbolic.

`--cold` adds, per model, two fresh `preflight -q report zoo:NAME` processes side by side (imports and first-call
costs included, as a user runs it): `--no-sweep` and `--batches 1,2,...,128`, best of --repeat.

Usage: python bench/bench_symbolic_sweep.py [--models resnet18,resnet50,bert_base] [--repeat 3] [--cold]
       [--llm zoo:llama_7b] [--file pt2|onnx|paddle]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
DEVICES = ["h100-80gb"]


def best(fn, repeat: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models",
        default=None,
        help="zoo names, comma-separated (default resnet18,resnet50,bert_base; with --file paddle, names of "
        "paddle.vision.models, default resnet18,resnet50,mobilenet_v2)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="also time fresh `preflight report` processes")
    ap.add_argument("--llm", default=None, metavar="MODEL", help="also time `preflight llm`'s context table")
    ap.add_argument("--file", choices=FORMATS, help="time a file of each model (dynamic batch) instead")
    args = ap.parse_args()
    if args.models is None:
        args.models = "resnet18,resnet50,mobilenet_v2" if args.file == "paddle" else "resnet18,resnet50,bert_base"
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from analyzer.frontends import load
    from analyzer.pipeline import analyze_model
    from analyzer.sweep import run_sweep
    from analyzer.symbolic import analyze_at, formulas, load_symbolic
    from predictor.predict import predict

    def one(model):
        rep = analyze_model(model, batch=1)
        return predict(rep.analysis, DEVICES[0])

    def sweep(model, symbolic, solve=False):
        return run_sweep(
            model, None, inputs=None, batches=BATCHES, devices=DEVICES, latency_slo_ms=None, strict=False,
            symbolic=symbolic, solve=solve,
        )  # fmt: skip

    def points(sm):
        for b in BATCHES[1:]:
            predict(analyze_at(sm, b).analysis, DEVICES[0])

    rows, parts, cold = [], [], []
    scratch = tempfile.TemporaryDirectory()
    for name in filter(None, args.models.split(",")):
        model = model_file(name, Path(scratch.name), args.file) if args.file else f"zoo:{name}"
        one(model), sweep(model, True), sweep(model, False)  # warm-up: imports, first-call costs
        sm = load_symbolic(model)
        cases = {
            "one": lambda: one(model),  # noqa: B023
            "old": lambda: sweep(model, False),  # noqa: B023
            "new": lambda: sweep(model, True),  # noqa: B023
            "solve": lambda: sweep(model, True, True),  # noqa: B023
            "fit": lambda: formulas(load_symbolic(model)),  # noqa: B023
            "export": lambda: load(model, inputs=None, batch=1),  # noqa: B023
            "symbolic": lambda: load_symbolic(model),  # noqa: B023
            "points": lambda: points(sm),  # noqa: B023
        }
        t, out = {}, {}
        for _ in range(args.repeat):  # every case in turn in each repeat: they see the same load
            for key, fn in cases.items():
                dt, out[key] = best(fn, 1)
                t[key] = min(t.get(key, dt), dt)
        same = (
            out["old"][0]["devices"] == out["new"][0]["devices"]
            and out["old"][0]["batches"] == out["new"][0]["batches"]
        )
        rows.append((name, t["one"], t["old"], t["new"], t["solve"], t["fit"], same))
        parts.append((name, t["one"], t["export"], t["symbolic"], t["points"] / (len(BATCHES) - 1)))
        if args.cold:
            cold.append((name, *cold_pair(model, args.repeat)))

    print(f"{len(BATCHES)}-point batch sweep ({', '.join(map(str, BATCHES))}), one device; best of {args.repeat}")
    head = ("model", "one analysis s", "sweep before s", "x one", "sweep after s", "x one", "+ solve s", "x one")
    print(" | ".join((*head, "formulas s", "same points")))
    for name, t_one, t_old, t_new, t_solve, t_fit, same in rows:
        print(
            f"{name} | {t_one:.2f} | {t_old:.2f} | {t_old / t_one:.1f}x | {t_new:.2f} | {t_new / t_one:.1f}x | "
            f"{t_solve:.2f} | {t_solve / t_one:.1f}x | {t_fit:.2f} | {'yes' if same else 'NO'}"
        )
    print("\nwhere the sweep's time goes (s; x = share of one analysis)")
    print("model | one analysis s | export b=1 s | symbolic export s | x one | per point s | x one")
    for name, t_one, t_c, t_s, t_p in parts:
        print(f"{name} | {t_one:.3f} | {t_c:.3f} | {t_s:.3f} | {t_s / t_one:.2f}x | {t_p:.4f} | {t_p / t_one:.3f}x")
    if cold:
        print(f"\ncold `preflight -q report` processes, best of {args.repeat}")
        print("model | --no-sweep s | --batches (8 points) s | x")
        for name, t_a, t_b in cold:
            print(f"{name} | {t_a:.1f} | {t_b:.1f} | {t_b / t_a:.2f}x")

    if args.llm:
        llm_row(args.llm, args.repeat)


FORMATS = ("pt2", "onnx", "paddle")


def model_file(name: str, folder: Path, fmt: str) -> str:
    """`zoo:name` built at batch 2 and saved as `folder/name.<fmt>` with its batch (dimension 0 of every input)
    dynamic: a `torch.export.Dim` and `torch.export.save` (pt2), or the TorchScript exporter's `dynamic_axes` (onnx);
    paddle: `paddle.vision.models.<name>()` saved by `paddle.jit.save` in `folder/name/` with a `None` batch."""
    if fmt == "paddle":
        import paddle

        layer = getattr(paddle.vision.models, name)()
        layer.eval()
        spec = [paddle.static.InputSpec([None, 3, 224, 224], "float32", name="x")]
        paddle.jit.save(layer, str(folder / name / "model"), input_spec=spec)
        return str(folder / name)
    import torch

    import zoo

    built = zoo.build(name, batch=2)
    module, inputs = built.module.eval(), tuple(built.example_inputs)
    path = folder / f"{name}.{fmt}"
    if fmt == "pt2":
        batch = torch.export.Dim("batch")
        dynamic = tuple({0: batch} if getattr(t, "ndim", 0) >= 1 else None for t in inputs)
        torch.export.save(torch.export.export(module, inputs, dynamic_shapes=dynamic), path)
    else:
        names = [f"x{i}" if i else "x" for i in range(len(inputs))]
        axes = {n: {0: "batch"} for n, t in zip(names, inputs, strict=True) if getattr(t, "ndim", 0) >= 1}
        torch.onnx.export(
            module, inputs, str(path), dynamo=False, opset_version=17, input_names=names, dynamic_axes=axes
        )
    return str(path)


LLM_CONTEXTS = [512, 1024, 2048, 3072, 4096]


def llm_row(model: str, repeat: int) -> None:
    """Print the llm context-table row: one prefill + decode analysis, 5 contexts evaluated, 5 contexts bound (run
    in turn in each repeat, so the three see the same load), and the seconds of each spent exporting."""
    from analyzer import llm as L

    export, formulas = L.StepGraph._export, L.context_formulas
    spent = [0.0]
    fitting = [0.0]

    def timed_formulas(step):
        t = time.perf_counter()
        try:
            return formulas(step)
        finally:
            fitting[0] += time.perf_counter() - t

    def timed_export(self, *a, **k):
        t = time.perf_counter()
        try:
            return export(self, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    def run(contexts, evaluate=True):
        L.StepGraph.evaluate, L.StepGraph._export, L.context_formulas = evaluate, timed_export, timed_formulas
        spent[0] = fitting[0] = 0.0
        try:
            t = time.perf_counter()
            doc = L.llm(model, prompt=512, generate=128, batch=4, contexts=contexts).llm.to_json()
            doc.pop("formulas", None)  # the bound path has no symbolic graph to fit them on
            return time.perf_counter() - t, spent[0], doc, fitting[0]
        finally:
            L.StepGraph.evaluate, L.StepGraph._export, L.context_formulas = True, export, formulas

    cases = {"one": ([640], True), "five": (LLM_CONTEXTS, True), "bound": (LLM_CONTEXTS, False)}
    for contexts, evaluate in cases.values():  # warm-up
        run(contexts, evaluate)
    best_of: dict[str, tuple] = {}
    for _ in range(repeat):
        for key, (contexts, evaluate) in cases.items():
            out = run(contexts, evaluate)
            if key not in best_of or out[0] < best_of[key][0]:
                best_of[key] = out
    (t1, e1, _, f1), (t5, e5, five, f5), (tb, eb, bound, fb) = (best_of[k] for k in ("one", "five", "bound"))
    print(f"\n`llm {model}` context table (prompt 512, generate 128, batch 4; one device); best of {repeat}, in turn")
    print("case | wall s | x one | of which exporting s | of which context formulas s | the rest s")
    for name, t, e, f in (("one prefill+decode (contexts 640)", t1, e1, f1), ("5 contexts, evaluated", t5, e5, f5),
                          ("5 contexts, bound (before)", tb, eb, fb)):  # fmt: skip
        print(f"{name} | {t:.2f} | {t / t1:.2f}x | {e:.2f} | {f:.2f} | {t - e - f:.2f}")
    print(f"same llm block, evaluated and bound: {'yes' if five == bound else 'NO'}")


def cold_pair(model: str, repeat: int) -> tuple[float, float]:
    """(best wall s of `preflight -q report MODEL --no-sweep`, of the same with the 8-point --batches), run
    alternately in fresh processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    base = [sys.executable, "-m", "analyzer.cli", "-q", "report", model, "--device", DEVICES[0]]
    runs = {"no": [], "sweep": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            for key, extra in (("no", ["--no-sweep"]), ("sweep", ["--batches", ",".join(map(str, BATCHES))])):
                t = time.perf_counter()
                subprocess.run([*base, *extra, "-o", f"{tmp}/r.json"], env=env, cwd=ROOT, check=True)
                runs[key].append(time.perf_counter() - t)
    return min(runs["no"]), min(runs["sweep"])


if __name__ == "__main__":
    main()
