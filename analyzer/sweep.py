"""Batch-size sweep for pre-deployment reports: the model analysed and predicted at each batch size.

Every point is a real analysis of the model's graph at that batch (nothing is extrapolated), predicted on
each device with the same predictor `preflight predict` uses. A zoo model or an nn.Module is exported once
with its batch symbolic (`analyzer.symbolic`) and every point in the export's range is the concrete graph
evaluated from it (the same graph, op for op, as exporting at that batch: docs/symbolic.md); batch 1, a
model torch.export cannot keep symbolic and files are lowered again at each batch.

A point "fits" a MIG profile by the MIG rule of docs/design.md (upper end of the memory interval + headroom
within the profile's usable memory, and the slice's predicted latency within the SLO when one is given); the
largest fitting batch is the largest *swept* batch that fits.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from numbers import Integral

from predictor.devices import get_device
from predictor.mig import HEADROOM, fits
from predictor.predict import Prediction
from predictor.predict import predict as run_predictor

from .errors import PreflightError, UsageError
from .frontends import load, module_examples, with_batch
from .frontends.specs import MAX_DIM
from .options import half_of
from .pipeline import analyze_loaded
from .symbolic import analyze_at, load_symbolic, require_values, solve_largest_batch, takes_file

DEFAULT_MAX_BATCH = 32
MAX_SWEEP_POINTS = 64


def batch_points(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to `max_batch`, and `max_batch` itself."""
    if not isinstance(max_batch, int) or not 1 <= max_batch <= MAX_DIM:
        raise UsageError(f"the sweep's largest batch must be an integer from 1 to {MAX_DIM} (got {max_batch!r})")
    points, b = [], 1
    while b < max_batch:
        points.append(b)
        b *= 2
    return [*points, max_batch]


def check_batches(values) -> list[int]:
    """The sweep's batch sizes, sorted and unique; each an integer from 1 to MAX_DIM, at most MAX_SWEEP_POINTS."""

    values = list(values)
    if not all(isinstance(v, Integral) and not isinstance(v, bool) and 1 <= v <= MAX_DIM for v in values):
        raise UsageError(f"batch sizes must be integers from 1 to {MAX_DIM} (got {values!r})")
    out = sorted({int(v) for v in values})
    if len(out) > MAX_SWEEP_POINTS:
        raise UsageError(f"at most {MAX_SWEEP_POINTS} batch sizes in a sweep")
    return out


def parse_batches(text: str) -> list[int]:
    """'1,2,8' -> [1, 2, 8] (sorted, unique)."""
    parts = [v for v in text.replace(" ", "").split(",") if v]
    if not parts or not all(v.isdigit() for v in parts):
        raise UsageError(f"--batches takes comma-separated positive integers, e.g. 1,2,4,8 (got {text!r})")
    return check_batches(int(v) for v in parts)


def _with_batch(example_inputs: Sequence | None, batch: int):
    """Example tensors with dimension 0 set to `batch` (`frontends.with_batch`); none stays none."""
    return with_batch(module_examples(example_inputs), batch) if example_inputs is not None else None


def point(batch: int, p: Prediction, latency_slo_ms: float | None) -> dict:
    """One sweep point (JSON) from a prediction at that batch."""
    lat, (lo, hi) = p.latency_ms, p.latency_ms_interval
    mem_hi = p.fit_mib  # the MIG rule's figure (the upper bound, segments given back where memory is short)

    def per_s(ms: float) -> float | None:  # a graph with no work has no throughput to speak of
        return 1e3 * batch / ms if ms > 0 else None

    return {
        "batch": batch,
        "latency_ms": lat,
        "latency_ms_interval": [lo, hi],
        "throughput_per_s": per_s(lat),
        "throughput_per_s_interval": [per_s(hi), per_s(lo)],
        "energy_j": p.energy_j,
        "energy_j_per_sample": p.energy_j / batch,
        "memory_mib": p.memory_mib,
        "memory_mib_interval": list(p.memory_mib_interval),
        "memory_mb": p.memory_mib,  # deprecated name of memory_mib (the same MiB), kept through preflight.report/1
        "memory_mb_interval": list(p.memory_mib_interval),
        "memory_fit_mib": mem_hi,
        "fits": dict(p.mig.fits),
        "slice_latency_ms": p.mig.to_json().get("latency_ms", {}),
        "fits_full_gpu": fits(get_device(p.device).memory_mib, mem_hi, lat, latency_slo_ms),
        "basis": dict(p.basis),
    }


def largest(points: list[dict]) -> tuple[dict[str, int | None], int | None]:
    """Largest swept batch fitting each MIG profile, and the whole GPU (None: not even the smallest)."""
    names = list(points[0]["fits"]) if points else []
    per_profile = {n: max((p["batch"] for p in points if p["fits"][n]), default=None) for n in names}
    full = max((p["batch"] for p in points if p["fits_full_gpu"]), default=None)
    return per_profile, full


SOLVE_MAX = 2**24  # the largest batch the solve for the largest fitting batch looks at


def solve_largest(fits_at: Callable[[int], bool], need_at: Callable[[int], float], lo: int, hi: int) -> int:
    """The largest batch in [lo, hi) that fits, given that `lo` fits and `hi` does not, for a fit that holds up
    to some batch and not beyond (as memory, growing with the batch, does).

    A safeguarded root search on integers: a guess interpolates `need_at` (how far past the limit a batch is:
    negative while it fits by memory) between the bracket's ends, clamped strictly inside it; a guess that does
    not halve the bracket is followed by a halving step. Every step evaluates `fits_at` once and shrinks the
    bracket, so the result is exact: it fits, and the next batch was evaluated and does not.
    """
    bisect = False
    while hi - lo > 1:
        width = hi - lo
        if bisect:
            guess = (lo + hi) // 2
        else:
            a, b = need_at(lo), need_at(hi)
            guess = lo + int(-a * (hi - lo) / (b - a)) if b > a else (lo + hi) // 2
            guess = min(max(guess, lo + 1), hi - 1)
        if fits_at(guess):
            lo = guess
        else:
            hi = guess
        bisect = not bisect and hi - lo > width // 2
    return lo


def _solve_device(
    sm,
    device: str,
    points: list[dict],
    analysis_at,
    latency_slo_ms,
    matmul_precision: str = "highest",
    host_overhead: float = 1.0,
) -> tuple[dict, int | None]:
    """(largest fitting batch per MIG profile, and on the whole GPU) of one device, solved over the symbolic
    export's range lo..min(its highest, SOLVE_MAX) with `solve_largest`, starting from the swept points; batch 1
    (below that range) answers from the sweep's own point when the range's lowest batch does not fit."""
    lo_range, hi_range = sm.batch_range
    top = min(hi_range or SOLVE_MAX, SOLVE_MAX)
    cache: dict[int, dict] = {p["batch"]: p for p in points}

    def at(b: int) -> dict:
        if b not in cache:
            p, _ = run_predictor(
                analysis_at(b),
                device,
                latency_slo_ms=latency_slo_ms,
                matmul_precision=matmul_precision,
                host_overhead=host_overhead,
            )
            cache[b] = point(b, p, latency_slo_ms)
        return cache[b]

    def fits_at(b: int, name: str | None) -> bool:
        p = at(b)
        return p["fits_full_gpu"] if name is None else p["fits"][name]

    dev = get_device(device)
    if dev.parent is not None:  # a slice as the target: its profile (as its points have it), and the slice itself
        limits: dict[str | None, float] = {dev.slice_profile: dev.memory_mib}
    else:
        limits = {p.name: p.memory_mib for p in dev.mig}
    limits[None] = dev.memory_mib  # the whole GPU (or the slice)
    answers: dict[str | None, int | None] = {}
    for name, limit in limits.items():
        if not fits_at(lo_range, name):
            one = 1 in cache and lo_range == 2 and fits_at(1, name)
            answers[name] = 1 if one else None
            continue
        lo = max(b for b in list(cache) if lo_range <= b <= top and fits_at(b, name))
        hi = min((b for b in list(cache) if lo < b <= top and not fits_at(b, name)), default=None)
        while hi is None:  # double past the largest batch known to fit
            b = min(2 * lo, top)
            if not fits_at(b, name):
                hi = b
            elif b == top:
                break
            else:
                lo = b
        if hi is None:
            answers[name] = top
            continue

        def need(b: int, limit: float = limit) -> float:
            return at(b)["memory_fit_mib"] * (1 + HEADROOM) - limit

        answers[name] = solve_largest(lambda b, name=name: fits_at(b, name), need, lo, hi)
    full = answers.pop(None)
    return answers, full


def _solve_by_formula(sm, reuse: dict, index: int, points: list[dict], latency_slo_ms, dtype) -> tuple | None:
    """`_solve_device`'s answer from the peak formula (`analyzer.symbolic.solve_largest_batch`: no analysis per
    probe) when memory alone decides the fit: no latency SLO, the memory model's prediction (not a trained
    predictor's), a peak proven to grow with the batch, and a report of the model to check it against (`reuse`);
    else None (probe with full predictions). Batch 1, below the export's range, answers from its swept point."""
    if latency_slo_ms is not None or not reuse:
        return None
    batch, rep = next(iter(reuse.items()))
    try:
        lb = solve_largest_batch(sm, rep.predictions[index], rep.analysis, batch=batch, dtype=dtype)
    except PreflightError:
        return None
    if not lb.monotone:
        return None
    one = next((p for p in points if p["batch"] == 1), None)
    per_profile = {n: b if b is not None or one is None or not one["fits"][n] else 1 for n, b in lb.per_profile.items()}
    if not lb.whole_gpu:  # a slice as the target: the sweep's "full GPU" is the slice itself (`_solve_device`)
        return per_profile, next(iter(per_profile.values()))
    full = lb.full_gpu if lb.full_gpu is not None or one is None or not one["fits_full_gpu"] else 1
    return per_profile, full


def _symbolic(model, example_inputs, inputs, batches: list[int], solve: bool = False, dtype: str | None = None):
    """(SymbolicModel or None, why not): one symbolic export (a `.pt2`, ONNX or Paddle file: one import with its own
    dynamic dims) for the sweep when it pays (a zoo model, an nn.Module or such a file, at least two batches to
    analyse, or `solve`: the largest batch that fits is solved from it whatever the sweep analyses); else None and
    the reason (None when none was tried: other files, `inputs` with a zoo model or an nn.Module, or fewer than two
    batches and no solve). `dtype`: the sweep's (`--dtype`: a half dtype's own float32 casts, `frontends.load`)."""
    if (inputs and not takes_file(model)) or (not solve and len([b for b in batches if b >= 2]) < 2):
        return None, None
    torch = sys.modules.get("torch")
    is_module = torch is not None and isinstance(model, torch.nn.Module)
    if not (is_module or takes_file(model) or (isinstance(model, str) and model.startswith("zoo:"))):
        return None, None
    try:
        sm = load_symbolic(model, example_inputs, inputs=inputs, half_casts=half_of(dtype))
        require_values(sm)
        return sm, None
    except PreflightError as exc:
        return None, str(exc)


def run_sweep(
    model,
    example_inputs,
    *,
    inputs,
    batches: Sequence[int],
    devices: Sequence[str],
    latency_slo_ms: float | None,
    strict: bool,
    dtype: str | None = None,
    reuse: dict | None = None,
    progress: Callable[[int], None] | None = None,
    matmul_precision: str = "highest",
    symbolic: bool = True,
    solve: bool = True,
    host_overhead: float = 1.0,
) -> tuple[dict, list[str]]:
    """The `sweep` block of the report and the warnings it raised; `batches` as `check_batches` returns them.

    `reuse` maps a batch already analysed and predicted (the report's own) to its `Report`, whose `predictions`
    are for `devices`, in order; `progress(n)` is called after each batch; `matmul_precision` and `host_overhead` as
    for `predictor.predict.predict`. `symbolic=False` lowers the model
    again at every batch (the way before `analyzer.symbolic`; bench/bench_symbolic_sweep.py compares the two).
    With a symbolic export and `solve`, each device's entry also has `largest_batch_solved` (per MIG profile)
    and `largest_batch_full_gpu_solved`: the largest batch that fits over the whole range (up to
    `symbolic.solve_max`), not only among the swept ones (`solve_largest`).
    """
    reuse = reuse or {}
    per_device: dict[str, list[dict]] = {d: [] for d in devices}
    predictors: dict[str, str] = {}
    skipped, warnings = [], []
    todo = [b for b in batches if b not in reuse]
    sm, why_not = _symbolic(model, example_inputs, inputs, todo, solve, dtype) if symbolic else (None, None)
    from_symbolic: list[int] = []
    for b in batches:
        try:
            if b in reuse:  # its warnings are in the report already
                predicted = [(p, []) for p in reuse[b].predictions]
            else:
                if sm is not None and sm.covers(b):
                    analysis = analyze_at(sm, b, strict=strict, dtype=dtype).analysis
                    from_symbolic.append(b)
                else:
                    loaded = load(
                        model,
                        inputs=inputs,
                        batch=None if example_inputs else b,
                        example_inputs=_with_batch(example_inputs, b),
                        half_casts=half_of(dtype),
                    )
                    analysis = analyze_loaded(loaded, strict=strict, dtype=dtype).analysis
                predicted = [
                    run_predictor(
                        analysis,
                        d,
                        latency_slo_ms=latency_slo_ms,
                        matmul_precision=matmul_precision,
                        host_overhead=host_overhead,
                    )
                    for d in devices
                ]
            for d, (p, w) in zip(devices, predicted, strict=True):
                predictors[d] = p.predictor
                per_device[d].append(point(b, p, latency_slo_ms))
                warnings += [x for x in w if x not in warnings]
        except PreflightError as exc:
            skipped.append({"batch": b, "reason": str(exc)})
        finally:
            if progress:
                progress(1)
    reasons: dict[str, list[str]] = {}
    for s in skipped:  # one warning per reason: "--batch 2" and "--batch 4" say the same thing
        reason = s["reason"].replace(f"--batch {s['batch']} ", "--batch N ")
        reasons.setdefault(reason, []).append(str(s["batch"]))
    for reason, bs in reasons.items():
        warnings.append(f"batch sweep: batch{'es' if len(bs) > 1 else ''} {', '.join(bs)} skipped: {reason}")
    doc = {
        "batches": [b for b in batches if b not in {s["batch"] for s in skipped}],
        "latency_slo_ms": latency_slo_ms,
        "headroom": HEADROOM,
        "devices": [],
        "skipped": skipped,
        "symbolic": {"batches": from_symbolic, "reason": why_not},
    }
    solved = {}
    if sm is not None and solve and all(per_device.values()):
        analyses: dict[int, object] = {}

        def analysis_at(b: int):
            if b not in analyses:  # one analysis per batch, shared by the devices
                analyses[b] = analyze_at(sm, b, strict=strict, dtype=dtype).analysis
            return analyses[b]

        try:
            solved = {
                d: _solve_by_formula(sm, reuse, i, per_device[d], latency_slo_ms, dtype)
                or _solve_device(sm, d, per_device[d], analysis_at, latency_slo_ms, matmul_precision, host_overhead)
                for i, d in enumerate(devices)
            }
            doc["symbolic"]["solve_max"] = min(sm.batch_range[1] or SOLVE_MAX, SOLVE_MAX)
        except PreflightError as exc:
            warnings.append(f"batch sweep: the largest fitting batch was not solved: {exc}")
    for d, points in per_device.items():
        per_profile, full = largest(points)
        entry = {
            "device": d,
            "predictor": predictors.get(d),
            "points": points,
            "largest_batch": per_profile,
            "largest_batch_full_gpu": full,
        }
        if d in solved:
            entry["largest_batch_solved"], entry["largest_batch_full_gpu_solved"] = solved[d]
        doc["devices"].append(entry)
    return doc, warnings
