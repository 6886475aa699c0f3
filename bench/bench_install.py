"""Install size and cold-start benchmark (issue: a light install, a faster cold predict); prints one table.

1. Install size: a fresh virtualenv with the light install (`pip install -c constraints.txt -e .`) and, with
   --full, the README's full install (`.[all,dev]`), measured with `du`; which heavy packages each pulls (Ray,
   torch_geometric, TensorFlow, Paddle).
2. Cold start, each in a fresh process of this interpreter (median of --repeat runs): `preflight --help`,
   `preflight analyze` of a missing file (an error before TVM and torch are imported), and a cold `predict` of
   zoo:resnet50, with the modules it imported (torch_geometric and ray are not, unless a trained artifact or
   analyze-many needs them).

Usage: python bench/bench_install.py [--repeat 3] [--full] [--skip-install]
"""

from __future__ import annotations

import argparse
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


def cold(args: list[str], repeat: int) -> tuple[float, str]:
    """Median wall seconds of `python -m analyzer.cli ARGS` in a fresh process, and which heavy modules it
    imported (read from the process itself at exit)."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('MODULES', sorted(m for m in ('tvm', 'torch', 'torch_geometric', 'ray') "
        "if m in sys.modules), file=sys.stderr))\n"
        f"sys.argv = ['preflight', *{args!r}]\n"
        "from analyzer.cli import main\n"
        "main()\n"
    )
    times, modules = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        modules = next((line[8:] for line in proc.stderr.splitlines() if line.startswith("MODULES ")), "?")
    return statistics.median(times), modules


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also measure the README's full install")
    ap.add_argument("--skip-install", action="store_true")
    args = ap.parse_args()
    if not args.skip_install:
        print("| install | MiB on disk | heavy packages | seconds |\n|---|---|---|---|")
        for label, extras in (("light: -e .", ""), *((("full: -e .[all,dev]", "[all,dev]"),) if args.full else ())):
            mib, heavy, sec = install_size(extras)
            print(f"| {label} | {mib:,} | {', '.join(heavy)} | {sec:.0f} |")
        print()
    print("| command (fresh process) | median s | heavy modules imported |\n|---|---|---|")
    for label, argv in (
        ("preflight --help", ["--help"]),
        ("analyze of a missing file", ["analyze", "/no/such/model.onnx"]),
        ("predict zoo:resnet50", ["predict", "zoo:resnet50", "--top", "0"]),
    ):
        sec, modules = cold(argv, args.repeat)
        print(f"| {label} | {sec:.2f} | {modules} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
