"""Install size and cold-start benchmark (issue: a light install, a faster cold predict); prints one table.

1. Install size: a fresh virtualenv with the light install (`pip install -c constraints.txt -e .`) and, with
   --full, the README's full install (`.[all,dev]`), measured with `du`; which heavy packages each pulls (Ray,
   torch_geometric, TensorFlow, Paddle).
2. Cold start, each in a fresh process of this interpreter (median of --repeat runs; wall seconds and the CPU
   seconds, user + system, of that process): `preflight --help`, `preflight analyze` of a missing file (an error
   before TVM and torch are imported), a cold `analyze zoo:resnet50 --batch 1` and a cold `predict` of
   zoo:resnet50, with the heavy modules each imported (torch_geometric and ray are not, unless a trained artifact
   or analyze-many needs them). CPU seconds are the figure to compare on a shared machine: other jobs stretch the
   wall time, not the CPU time.
3. Where a cold `analyze zoo:resnet50 --batch 1` spends it: one fresh process pauses the collector as the program
   does (`passes._gc.cold_start`), imports torch, starts the thread
   that primes TVM's native backtraces (`passes.tvm_boot`, where the tree has it), imports sympy (with torch's
   symbolic shapes), torch.export's tracer (which imports torch._dynamo), TVM (through `passes.tvm_ir`) and
   preflight one after the other, then runs the command; CPU seconds of the process and of its main thread, and
   wall seconds, of each stage (median of --repeat processes).

Usage: python bench/bench_install.py [--repeat 3] [--full] [--skip-install] [--skip-stages] [--root CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("ray", "torch-geometric", "tensorflow-cpu", "paddlepaddle", "torch", "apache-tvm")


def install_size(extras: str) -> tuple[float, list[str], float]:
    """(MiB on disk, heavy packages present, seconds) of a fresh venv with `pip install -e .{extras}`."""
    venv = Path(tempfile.mkdtemp(prefix="preflight-install-")) / "venv"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = venv / "bin" / "pip"
    target = f"{ROOT}{extras}"
    subprocess.run(
        [str(pip), "install", "-q", "-c", str(ROOT / "constraints.txt"), "-e", target],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - start
    mib = int(subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True).stdout.split()[0])
    listed = subprocess.run([str(pip), "list", "--format=freeze"], capture_output=True, text=True).stdout.lower()
    names = {line.split("==")[0].replace("_", "-") for line in listed.splitlines()}
    shutil.rmtree(venv.parent, ignore_errors=True)
    return mib, [h for h in HEAVY if h in names], seconds


HEAVY_MODULES = ("tvm", "torch", "torch._dynamo", "sympy", "torch_geometric", "ray", "transformers", "onnx")


def cold(args: list[str], repeat: int, root: Path = ROOT) -> tuple[float, float, str]:
    """Median wall seconds and median CPU seconds (user + system) of `python -m analyzer.cli ARGS` (as the
    `preflight` program runs: it leaves without the interpreter's teardown) in a fresh process, and which heavy
    modules it imported (read at exit from one more process that calls `main` and keeps the usual exit)."""
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('MODULES', sorted(m for m in {HEAVY_MODULES!r} "
        "if m in sys.modules), file=sys.stderr))\n"
        f"sys.argv = ['preflight', *{args!r}]\n"
        "from analyzer.cli import main\n"
        "main()\n"
    )
    times, cpus, modules = [], [], ""
    for _ in range(repeat):
        before = os.times()
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "analyzer.cli", *args], capture_output=True, cwd=root)
        times.append(time.perf_counter() - start)
        after = os.times()
        cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    modules = next((line[8:] for line in proc.stderr.splitlines() if line.startswith("MODULES ")), "?")
    return statistics.median(times), statistics.median(cpus), modules


# One process, the cold analyze's imports one at a time, then the command itself; prints
# `STAGE label cpu main_thread_cpu wall`. As the command does (where the tree has them): the collector paused until
# TVM is imported (passes._gc.cold_start), TVM's first native backtrace primed on a thread once torch is imported
# (passes.tvm_boot), and TVM imported through passes.tvm_ir without its device backends (tvm_boot.as_the_program).
# Unlike the command, TVM is imported before the export, so the export runs with the collector back on.
STAGES = """
import contextlib, io, sys, time
marks = [(time.process_time(), time.thread_time(), time.perf_counter())]
def mark(label):
    marks.append((time.process_time(), time.thread_time(), time.perf_counter()))
    print("STAGE", label, *(marks[-1][i] - marks[-2][i] for i in range(3)), sep="\t")
try:
    from passes._gc import cold_start
except ImportError:  # a tree before the program's cold start paused the collector
    cold_start = contextlib.nullcontext
cold = cold_start()  # kept: a dropped generator would run its `finally` and turn the collector back on
cold.__enter__()  # as the program's analysis commands: collector paused until TVM is imported
try:
    from passes.tvm_boot import as_the_program
    as_the_program()  # and TVM imported without its device backends' hooks
except ImportError:
    pass
import torch; mark("import torch")
try:
    from passes.tvm_boot import prime_backtraces
except ImportError:  # a tree before passes.tvm_boot
    prime_backtraces = lambda: None
prime_backtraces(); mark("start the backtrace thread (imports tvm_ffi and the tracer's C extensions)")
import torch.fx.experimental.symbolic_shapes; mark("import sympy + torch's symbolic shapes")
import torch.export._trace; mark("import torch.export's tracer (torch._dynamo)")
import passes.tvm_ir; mark("import tvm (through passes.tvm_ir)")
import analyzer.api, analyzer.cli, zoo; mark("import preflight (analyzer, passes, predictor, zoo)")
sys.argv = ["preflight", "analyze", "zoo:resnet50", "--batch", "1"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        analyzer.cli.main()
    except SystemExit:
        pass
mark("build, export, import to Relax, analyse, render")
"""


def stages(repeat: int, root: Path = ROOT) -> list[tuple[str, float, float, float]]:
    """(stage, median CPU seconds of the process, of its main thread, median wall seconds) of a cold
    `analyze zoo:resnet50 --batch 1`, stage by stage, over `repeat` fresh processes. The main thread's CPU is the
    critical path on an idle machine with a core to spare for the backtrace thread."""
    runs: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", STAGES], capture_output=True, text=True, cwd=root).stdout
        for line in out.splitlines():
            if line.startswith("STAGE\t"):
                _, label, cpu, main_cpu, wall = line.split("\t")
                runs.setdefault(label, []).append((float(cpu), float(main_cpu), float(wall)))
    return [(label, *(statistics.median(v[i] for v in vals) for i in range(3))) for label, vals in runs.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also measure the README's full install")
    ap.add_argument("--skip-install", action="store_true")
    ap.add_argument(
        "--root", type=Path, default=ROOT, help="the preflight checkout the cold runs import (to compare two trees)"
    )
    ap.add_argument("--skip-stages", action="store_true", help="skip the stage-by-stage cold analyze")
    args = ap.parse_args()
    if not args.skip_install:
        print("| install | MiB on disk | heavy packages | seconds |\n|---|---|---|---|")
        for label, extras in (("light: -e .", ""), *((("full: -e .[all,dev]", "[all,dev]"),) if args.full else ())):
            mib, heavy, sec = install_size(extras)
            print(f"| {label} | {mib:,} | {', '.join(heavy)} | {sec:.0f} |")
        print()
    print("| command (fresh process) | median wall s | median CPU s | heavy modules imported |\n|---|---|---|---|")
    for label, argv in (
        ("preflight --help", ["--help"]),
        ("analyze of a missing file", ["analyze", "/no/such/model.onnx"]),
        ("analyze zoo:resnet50 --batch 1", ["analyze", "zoo:resnet50", "--batch", "1"]),
        ("predict zoo:resnet50", ["predict", "zoo:resnet50", "--top", "0"]),
    ):
        sec, cpu, modules = cold(argv, args.repeat, args.root)
        print(f"| {label} | {sec:.2f} | {cpu:.2f} | {modules} |")
    if not args.skip_stages:
        rows = stages(args.repeat, args.root)
        print(
            "\n| cold analyze zoo:resnet50 --batch 1, stage by stage (one process) "
            "| CPU s | main-thread CPU s | wall s |\n|---|---|---|---|"
        )
        for label, cpu, main_cpu, wall in rows:
            print(f"| {label} | {cpu:.2f} | {main_cpu:.2f} | {wall:.2f} |")
        print("| total | " + " | ".join(f"{sum(r[i] for r in rows):.2f}" for i in (1, 2, 3)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
