"""analyze-many benchmarks (issue 14); prints one Markdown table per goal.

1. Throughput in models per minute with 1 and 2 workers on a local Ray (goal: 2 workers >= 1.7x of 1 worker), 2
   workers both with jobs handed out in list order (before issue 27) and by family affinity (`batch.job_affinity`).
2. Per-model overhead of the engine (1 worker) vs. `analyzer.predict` in a loop in one process (goal <= 10%).
3. A two-node Ray cluster on this host (`ray start --head`, then `ray start --address` as a second node, each
   with its own custom resource): which node ran each model, and the rows equal the single-process results.
4. What a worker costs: starting Ray, starting a worker (it imports TVM and torch), its peak memory.

The workload is the first N models of `MODELS` (zoo models at batch 1, predicted on one device). Other processes
may share this machine: the runs to compare go back to back in rounds, each with the 1-minute load average
before it.

`--repeat K` runs the list K times over (the same rows again): a job of 16 models is short enough that each
worker's first model, which warms torch up, weighs on the throughput; repeats measure the steady state.

5. (`--shared`) rows that share a model: each row exported on its own vs. one symbolic export per model.

Usage: python bench/bench_analyze_many.py [--models 16] [--repeat 1] [--rounds 2] [--skip-cluster] [--port 6399]
       [--skip-local] [--shared]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer import batch  # noqa: E402 - after the path insert (the driver side: no TVM)

DEVICE = "h100-80gb"
MODELS = [
    "zoo:alexnet_x0_25",
    "zoo:bert_tiny",
    "zoo:resnet18",
    "zoo:gpt2_tiny",
    "zoo:mobilenet_v2_x0_5",
    "zoo:distilbert_tiny",
    "zoo:squeezenet1_1",
    "zoo:roberta_tiny",
    "zoo:shufflenet_v2_x0_5",
    "zoo:opt_tiny",
    "zoo:mnasnet0_5",
    "zoo:t5_encoder_tiny",
    "zoo:googlenet_x0_5",
    "zoo:vit_tiny",
    "zoo:regnet_x_400mf",
    "zoo:deit_tiny",
    "zoo:convnext_atto",
    "zoo:efficientnet_b0",
    "zoo:mobilenet_v3_small",
    "zoo:levit_128s",
]

# The single-process baseline, in a fresh process: import once, then analyse and predict each model in a loop
# (the same work as a worker's `analyze_task`). One thread, as Ray gives a worker that holds one CPU.
LOOP = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
import analyzer
from analyzer import pipeline  # TVM, torch
t1 = time.perf_counter()
rows, times, cpu = {}, [], 0.0
for m in json.loads(sys.argv[1]):
    t, c = time.perf_counter(), time.process_time()
    doc = analyzer.predict(m, device=sys.argv[2]).to_json()
    times.append(time.perf_counter() - t)
    cpu += time.process_time() - c
    rows[m] = {"totals": doc["totals"], "predictions": doc["predictions"]}
out = {"import_s": t1 - t0, "loop_s": time.perf_counter() - t1, "cpu_s": cpu, "times": times, "rows": rows}
print(json.dumps(out))
"""


# Rows that share a model (issue 27 item 3): every model at every batch of SHARED_BATCHES, analysed in one fresh
# process one row at a time, either each row exported on its own ("alone") or the rows of a model evaluated from
# one symbolic export (`batch.mark_shared`, as `analyze-many` does).
SHARED_MODELS = ["zoo:resnet18", "zoo:bert_tiny", "zoo:gpt2_tiny"]
SHARED_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
SHARED = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
from analyzer import batch, pipeline  # TVM, torch
models, device, batches, how = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
jobs = [batch.Job(m, m, batch=b, devices=(device,)) for m in models for b in batches]
if how == "shared":
    jobs = batch.mark_shared(jobs)
t = time.perf_counter()
rows = [batch.analyze_task(j) for j in jobs]
print(json.dumps({"s": time.perf_counter() - t, "rows": rows}))
"""


def bench_shared(rounds: int) -> None:
    n = len(SHARED_MODELS) * len(SHARED_BATCHES)
    print(f"\n## 5. Rows that share a model: {', '.join(SHARED_MODELS)} at batches {SHARED_BATCHES} ({n} rows), "
          "one process each, the two ways alternately")  # fmt: skip
    print("\n| round | rows | load before | s | rows/min |\n|---:|---|---:|---:|---:|")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    args = [json.dumps(SHARED_MODELS), DEVICE, json.dumps(SHARED_BATCHES)]
    ratios, equal = [], True
    for i in range(1, rounds + 1):
        got = {}
        for how in ("alone", "shared"):
            before = load()
            out = subprocess.run(
                [sys.executable, "-c", SHARED, *args, how], env=env, capture_output=True, text=True, check=True
            )
            got[how] = json.loads(out.stdout.splitlines()[-1])
            print(f"| {i} | {how} | {before} | {got[how]['s']:.1f} | {n / got[how]['s'] * 60:.1f} |")
        ratios.append(got["alone"]["s"] / got["shared"]["s"])
        equal = equal and got["alone"]["rows"] == got["shared"]["rows"]
    print(f"\nShared / alone throughput per round: {', '.join(f'{x:.2f}x' for x in ratios)}; "
          f"rows equal, field by field: {equal}")  # fmt: skip


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def single_process(models: list[str]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", LOOP, json.dumps(models), DEVICE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def engine(models: list[str], workers: int, affinity: bool = True) -> dict:
    """The engine on an embedded Ray: timings (Ray start, first worker ready, last result) and the rows.
    `affinity`: jobs handed out by family (`batch.job_affinity`, as `analyze-many` does); else in list order."""
    jobs = [batch.Job(m, m, devices=(DEVICE,)) for m in models]
    rows: dict[str, dict] = {}  # model -> its row (a repeated model's rows are equal)
    every: list[dict] = []  # every row, repeats included
    t: dict[str, float] = {"start": time.perf_counter()}

    def on_start() -> None:
        t["ready"] = time.perf_counter()

    def on_result(job: batch.Job, out: batch.Outcome) -> None:
        rows[job.model] = batch.make_row(job, out)
        every.append(rows[job.model])

    with batch.ray_cluster(workers) as n:
        assert n == workers
        t["ray"] = time.perf_counter()
        batch.run_jobs(
            jobs,
            batch.analyze_task,
            on_result,
            workers=workers,
            on_start=on_start,
            affinity=batch.job_affinity if affinity else None,
        )
        t["end"] = time.perf_counter()
    return {
        "ray_start_s": t["ray"] - t["start"],
        "worker_start_s": t["ready"] - t["ray"],
        "job_s": t["end"] - t["ready"],  # first worker ready -> last result
        "total_s": t["end"] - t["start"],
        "rows": rows,
        "every": every,
    }


def same(rows: dict[str, dict], oracle: dict[str, dict]) -> bool:
    """Row for row, the totals and predictions of the engine equal the single-process results."""
    return set(rows) == set(oracle) and all(
        rows[m]["status"] == "ok"
        and rows[m]["totals"] == oracle[m]["totals"]
        and rows[m]["predictions"] == oracle[m]["predictions"]
        for m in oracle
    )


RUNS = ((1, True), (2, False), (2, True))  # (workers, affinity) per round, after the loop


def bench_local(models: list[str], rounds: int) -> dict:
    """Rounds of (loop, engine with 1 worker, 2 workers in list order, 2 workers by family affinity), back to
    back, so that each round's runs see about the same load from the machine's other processes."""
    n, cores = len(models), batch.local_cores()
    print(f"\n## 1-2. {n} zoo models (batch 1, predicted on {DEVICE}) on this machine, {cores} cores")
    print("\n| round | run | load before | Ray start s | first worker ready s | job s | models/min | "
          "CPU share | task CPU s | engine's own s per model |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs: list[tuple[dict, dict, dict]] = []
    for i in range(1, rounds + 1):
        before = load()
        loop = single_process(models)
        share = loop["cpu_s"] / loop["loop_s"]
        print(f"| {i} | single process: import, then a loop | {before} | | {loop['import_s']:.1f} (import) | "
              f"{loop['loop_s']:.1f} | {n / loop['loop_s'] * 60:.1f} | {share:.0%} | "
              f"{loop['cpu_s']:.1f} | |")  # fmt: skip
        engines = []
        for w, affinity in RUNS:
            before = load()
            r = engine(models, w, affinity)
            # the engine's own cost: job time not spent inside a task, per model (1 worker: tasks run one by one)
            own = (r["job_s"] - sum(row["seconds"] for row in r["every"])) / n if w == 1 else None
            # CPU time the workers got over their tasks' wall time: 100% = each worker had a core to itself
            share = sum(x["cpu_seconds"] for x in r["every"]) / sum(x["seconds"] for x in r["every"])
            how = "" if w == 1 else (", by family" if affinity else ", in list order")
            print(f"| {i} | engine, {w} worker{'s' if w > 1 else ''}{how} | {before} | {r['ray_start_s']:.1f} | "
                  f"{r['worker_start_s']:.1f} | {r['job_s']:.1f} | {n / r['job_s'] * 60:.1f} | {share:.0%} | "
                  f"{sum(x['cpu_seconds'] for x in r['every']):.1f} | "
                  f"{'' if own is None else f'{own:.3f}'} |")  # fmt: skip
            engines.append(r)
        runs.append((loop, *engines))
    print(f"\nLoad average (1 min) at the end: {load()}. 'job s': first worker ready -> last result. 'CPU share': "
          "CPU time of the analysing process(es) over their wall time per model (100%: a core to itself). "
          "'task CPU s': CPU time of all the tasks (the loop's models) together.")  # fmt: skip
    ordered = [one["job_s"] / two["job_s"] for _, one, two, _ in runs]
    speedups = [one["job_s"] / two["job_s"] for _, one, _, two in runs]
    totals = [one["total_s"] / two["total_s"] for _, one, _, two in runs]
    overheads = [one["job_s"] / loop["loop_s"] - 1 for loop, one, _, _ in runs]
    own = [(one["job_s"] - sum(r["seconds"] for r in one["every"])) / n for _, one, _, _ in runs]
    print(f"\nThroughput, 2 workers by family / 1 worker, per round (goal >= 1.7): "
          f"{', '.join(f'{x:.2f}x' for x in speedups)}; counting Ray's and the workers' start too: "
          f"{', '.join(f'{x:.2f}x' for x in totals)}; 2 workers in list order (before) / 1 worker: "
          f"{', '.join(f'{x:.2f}x' for x in ordered)}")  # fmt: skip
    print(f"Per-model time, engine with 1 worker / the loop - 1, per round (goal <= 10%): "
          f"{', '.join(f'{x * 100:+.1f}%' for x in overheads)}; the engine's own time per model (dispatch and "
          f"result transfer): {', '.join(f'{x * 1000:.0f} ms' for x in own)}")  # fmt: skip
    cpu = [[sum(x["cpu_seconds"] for x in e["every"]) for e in es] for _, *es in runs]
    print("Task CPU seconds (all workers' tasks together), 2 workers / 1 worker, per round: in list order "
          f"{', '.join(f'{c[1] / c[0]:.2f}' for c in cpu)}, by family {', '.join(f'{c[2] / c[0]:.2f}' for c in cpu)} "
          "(1.00: no work done twice; what a second worker pays again for the families it meets)")  # fmt: skip
    ok = all(same(e["rows"], loop["rows"]) for loop, *es in runs for e in es)
    print(f"Rows of every engine run equal the single-process results, row for row: {ok}")
    rss: dict[int, float] = {}
    for _, *es in runs:
        for e in es:
            for r in e["every"]:
                w = r["worker"]
                rss[w["pid"]] = max(rss.get(w["pid"], 0), w.get("max_rss_mib") or 0)
    times = sorted(t for loop, *_ in runs for t in loop["times"])
    starts = [e["worker_start_s"] for _, *es in runs for e in es]
    ray_starts = [e["ray_start_s"] for _, *es in runs for e in es]
    print(
        f"\n## 4. Per worker: peak RSS {min(rss.values()):,.0f} to {max(rss.values()):,.0f} MiB after its models; "
        f"Ray start {min(ray_starts):.1f} to {max(ray_starts):.1f} s; worker start (TVM + torch import) "
        f"{min(starts):.1f} to {max(starts):.1f} s; per model {times[0]:.1f} to {times[-1]:.1f} s "
        f"(median {times[len(times) // 2]:.1f} s) in the loop"
    )
    return runs[0][0]["rows"]


def _ray_start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    ray = str(Path(sys.executable).with_name("ray"))
    return subprocess.Popen(
        [ray, "start", "--block", "--disable-usage-stats", *args],
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(p: subprocess.Popen) -> None:
    """`ray start --block` stops the node's processes when it gets SIGTERM."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def bench_cluster(models: list[str], oracle: dict[str, dict], port: int) -> None:
    import ray

    print("\n## 3. A two-node Ray cluster on this host (ray start --head; ray start --address), CLI --address")
    # Ray >= 2.59 turns token authentication on for a cluster started with `ray start --head`: every process
    # that joins it (the second node, the driver) needs RAY_AUTH_MODE=token and the token (~/.ray/auth_token)
    env = dict(os.environ, RAY_AUTH_MODE="token", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    address = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        head = _ray_start(
            ["--head", "--port", str(port), "--num-cpus", "1", "--resources", '{"bench_head": 1}',
             "--include-dashboard=false"], env, d / "head.log",
        )  # fmt: skip
        nodes = []
        try:
            time.sleep(5)
            second = _ray_start(
                ["--address", address, "--num-cpus", "1", "--resources", '{"bench_second": 1}'], env, d / "node.log"
            )
            nodes.append(second)
            manifest, out = d / "models.txt", d / "results.jsonl"
            manifest.write_text("\n".join(models) + "\n")
            os.environ["RAY_AUTH_MODE"] = "token"
            deadline = time.monotonic() + 120
            while True:  # wait for both nodes
                try:
                    with batch.ray_cluster(address=address):
                        alive = [n for n in ray.nodes() if n["Alive"]]
                        names = {n["NodeID"]: [k for k in n["Resources"] if k.startswith("bench_")][0] for n in alive}
                except Exception:  # noqa: BLE001 - the head is still starting
                    alive, names = [], {}
                if len(alive) == 2 or time.monotonic() > deadline:
                    break
                time.sleep(2)
            before = load()
            t = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-m", "analyzer.cli", "analyze-many", str(manifest), "-o", str(out),
                 "--address", address, "--device", DEVICE],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            wall = time.perf_counter() - t
            rows = {r["model"]: r for r in map(json.loads, out.read_text().splitlines())} if out.exists() else {}
        finally:
            for p in [*nodes, head]:
                _stop(p)
    print(f"\nLoad average (1 min) before {before}, after {load()}. Exit code {res.returncode}; wall {wall:.1f} s "
          f"(including joining the cluster and starting its 2 workers).\n")  # fmt: skip
    if res.returncode != 0:
        print("```\n" + res.stderr[-2000:] + "\n```")
    per_node: dict[str, list[str]] = {}
    for m, r in rows.items():
        per_node.setdefault(names.get(r["worker"]["node"], "?"), []).append(m)
    print("| node (its resource) | models | e.g. |\n|---|---:|---|")
    for node, ms in sorted(per_node.items()):
        print(f"| {node} | {len(ms)} | {', '.join(ms[:3])} |")
    print(f"\nRows equal the single-process results, row for row: {same(rows, oracle)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=16, help=f"how many of the {len(MODELS)} models")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (loop, 1 worker, 2 workers)")
    ap.add_argument("--repeat", type=int, default=1, help="run the model list this many times over per run")
    ap.add_argument("--skip-cluster", action="store_true")
    ap.add_argument("--skip-local", action="store_true", help="skip 1-2 and 4 (the worker runs)")
    ap.add_argument("--shared", action="store_true", help="also 5: rows that share a model")
    ap.add_argument("--port", type=int, default=6399, help="the two-node cluster's head port")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    models = MODELS[: args.models] * max(1, args.repeat)
    print(f"python {sys.version.split()[0]}, {batch.local_cores()} cores, load average {os.getloadavg()}")
    if args.shared:
        bench_shared(args.rounds)
    if not args.skip_local:
        oracle = bench_local(models, args.rounds)
        if not args.skip_cluster:
            bench_cluster(models, oracle, args.port)


if __name__ == "__main__":
    main()
