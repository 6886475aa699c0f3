"""MIG recommendation (docs/design.md): the smallest profile whose usable memory holds the upper end of the
predicted memory interval plus headroom, and, with a latency SLO, whose predicted latency on that
slice meets it. `None` when nothing fits, always with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from .devices import Device, MigProfile
from .fmt import g3

HEADROOM = 0.05  # 5% of the predicted upper memory bound, for allocator fragmentation between runs


def _g5(v: float) -> float:
    return float(f"{v:.5g}")  # 5 significant digits


@dataclass(frozen=True)
class SliceChoice:
    """A MIG profile with its predicted latency and slowdown against the whole GPU."""

    profile: str
    latency_ms: float
    slowdown: float  # latency on the slice / latency on the whole GPU

    def to_json(self) -> dict:
        return {"profile": self.profile, "latency_ms": _g5(self.latency_ms), "slowdown": _g5(self.slowdown)}


@dataclass(frozen=True)
class SloBatch:
    """The largest batch that both fits (`LargestBatch`) and is predicted within a latency SLO on each MIG profile
    (and the whole GPU): `per_profile[name]` / `full_gpu` is the largest batch up to the one that fits whose
    predicted latency on that profile is at most `latency_slo_ms` (ms), each batch tried the model's symbolic graph
    evaluated there and predicted as `preflight predict` would at that batch (the kernel view re-decided); None when
    not even the lowest batch meets it. Latency is not proven to grow with the batch: an answer below the memory cap
    meets the SLO and the next batch does not; one at the cap meets it and the next batch does not fit.
    `evaluations`: the batches predicted, all profiles together (the check at the model's own batch included)."""

    latency_slo_ms: float
    per_profile: dict[str, int | None]
    full_gpu: int | None
    evaluations: int
    method: str

    def to_json(self) -> dict:
        return {
            "latency_slo_ms": self.latency_slo_ms,
            "per_profile": dict(self.per_profile),
            "full_gpu": self.full_gpu,
            "evaluations": self.evaluations,
            "method": self.method,
        }


@dataclass(frozen=True)
class LargestBatch:
    """The largest batch whose predicted memory fits each MIG profile (and the whole GPU), solved over a symbolic
    analysis (docs/symbolic.md): `per_profile[name]` / `full_gpu` is the largest batch in `lo..hi` whose upper
    memory bound + headroom is within the usable memory (`fits`, memory only; `slo`: within a latency SLO too), None
    when not even `lo` fits. `peak` is the liveness peak of the activations as a formula of the batch (bytes);
    `monotone`: the peak is proven never to shrink as the batch grows (else each answer fits and the next batch does
    not, but a larger batch might fit again). The caching allocator's replayed reserve, which the memory also holds,
    is not proven to grow with the peak (bert_tiny's upper bound on the H100 drops 7.5 MiB from batch 16 to 17): an
    answer fits and the next batch does not either way. `evaluations`: how many batches were evaluated in all."""

    per_profile: dict[str, int | None]
    full_gpu: int | None
    lo: int
    hi: int
    peak: str | None
    monotone: bool
    evaluations: int
    method: str
    whole_gpu: bool = True  # False for a MIG slice as the target: `full_gpu` is None, not asked
    slo: SloBatch | None = None  # with a latency SLO (`predict --largest-batch --latency-slo MS`)

    def to_json(self) -> dict:
        out = {
            "per_profile": dict(self.per_profile),
            "full_gpu": self.full_gpu,
            "range": [self.lo, self.hi],
            "peak_activation_bytes": self.peak,
            "monotone": self.monotone,
            "evaluations": self.evaluations,
            "method": self.method,
        }
        if self.slo is not None:
            out["within_latency_slo"] = self.slo.to_json()
        return out

    def line(self, profile: str) -> str:
        """'largest batch that fits 3g.40gb: 212' ('none' below `lo`; '212+' at the top of the range)."""
        return f"largest batch that fits {profile}: {self._n(self.per_profile.get(profile))}"

    def _n(self, b: int | None) -> str:
        if b is None:
            return f"none from {self.lo}"
        return f"{b:,}+" if b >= self.hi else f"{b:,}"

    def summary(self, recommended: str | None = None) -> str:
        """One line: the recommended profile's answer first, then every profile's and the whole GPU's."""
        rest = [f"{n} {self._n(b)}" for n, b in self.per_profile.items() if n != recommended]
        if self.whole_gpu:
            rest.append(f"whole GPU {self._n(self.full_gpu)}")
        if recommended in self.per_profile:
            head = self.line(recommended)
        elif self.per_profile:
            head = "largest batch that fits " + rest.pop(0).replace(" ", ": ", 1)
        else:  # a GPU without MIG
            head, rest = f"largest batch that fits the whole GPU: {self._n(self.full_gpu)}", []
        tail = "" if self.monotone else " (memory not proven to grow with the batch: each is a boundary found)"
        return head + (f" ({', '.join(rest)})" if rest else "") + tail + self._slo_summary(recommended)

    def _slo_summary(self, recommended: str | None) -> str:
        """'; within 50 ms: 3g.40gb 128 (1g.10gb 16, ..., whole GPU 512)', or '' without an SLO."""
        if self.slo is None:
            return ""
        s = self.slo
        items = [(n, b) for n, b in s.per_profile.items()] + ([("whole GPU", s.full_gpu)] if self.whole_gpu else [])
        items.sort(key=lambda nb: nb[0] != recommended)  # the recommended profile first
        # none: not even the lowest batch tried (the model's own below the symbolic range) meets the SLO
        text = ", ".join(f"{n} {'none' if b is None else self._n(b)}" for n, b in items)
        if len(items) > 1:
            first, _, others = text.partition(", ")
            text = f"{first} ({others})"
        return (
            f"; within {s.latency_slo_ms:g} ms: {text} (latency not proven to grow with the batch: each is a "
            "boundary found)"
        )


def largest_fitting_batch(
    need_mib: Callable[[int], float], usable_mib: float, lo: int, hi: int, headroom: float = HEADROOM
) -> tuple[int | None, int]:
    """(the largest batch b in lo..hi whose `need_mib(b)` fits `usable_mib` by `fits`, the batches evaluated);
    None when `lo` does not fit. Exponential search from `lo` (doubling) to bracket the boundary, then bisection:
    O(log b) evaluations. Exact when `need_mib` never decreases with the batch; otherwise the answer still fits
    and the next batch was evaluated and does not."""
    return largest_batch_where(lambda b: fits(usable_mib, need_mib(b), headroom=headroom), lo, hi)


def largest_batch_where(test: Callable[[int], bool], lo: int, hi: int) -> tuple[int | None, int]:
    """(the largest batch b in lo..hi for which `test(b)` holds, the batches tested); None when `test(lo)` does not
    hold. Exponential search from `lo` (doubling) to bracket the boundary, then bisection: O(log b) tests, each batch
    tested once. Exact when `test` holds up to a batch and not beyond; otherwise the answer passes and the next batch
    was tested and does not."""
    seen: dict[int, bool] = {}

    def ok(b: int) -> bool:
        if b not in seen:
            seen[b] = test(b)
        return seen[b]

    if not ok(lo):
        return None, len(seen)
    good, bad = lo, None
    while bad is None:
        nxt = min(2 * good, hi)
        if nxt == good:  # good == hi
            return good, len(seen)
        if ok(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:  # good fits, bad does not
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good, len(seen)


@dataclass(frozen=True)
class MigRecommendation:
    """The recommended MIG profile (None: nothing fits), why, and what it costs in latency.

    `profile` is the smallest profile that fits (memory, and the SLO when one is given). `within_slowdown`,
    asked for with `max_slowdown`, is the smallest fitting profile whose predicted latency is at most
    `max_slowdown` times the whole GPU's.
    """

    profile: str | None
    reason: str
    fits: dict[str, bool]  # per profile: memory fits (and the SLO, when given)
    latency_ms: dict[str, float] | None = None  # predicted latency per profile, when computed
    full_gpu_latency_ms: float | None = None
    max_slowdown: float | None = None
    within_slowdown: SliceChoice | None = None
    largest_batch: LargestBatch | None = None  # solved over a symbolic analysis, when asked for

    def choice(self, name: str | None) -> SliceChoice | None:
        """`name`'s predicted latency and slowdown, when both latencies are known."""
        if name is None or not self.latency_ms or self.full_gpu_latency_ms is None:
            return None
        lat, full = self.latency_ms[name], self.full_gpu_latency_ms
        return SliceChoice(name, lat, lat / full if full > 0 else 1.0)  # a graph with no work is not slowed

    @property
    def chosen(self) -> SliceChoice | None:
        """The recommended profile's latency and slowdown."""
        return self.choice(self.profile)

    def to_json(self) -> dict:
        doc = {"profile": self.profile, "reason": self.reason, "fits": dict(self.fits)}
        if self.latency_ms is not None:
            doc["latency_ms"] = {k: _g5(v) for k, v in self.latency_ms.items()}
        if self.chosen is not None:
            doc["profile_latency_ms"] = _g5(self.chosen.latency_ms)
            doc["slowdown"] = _g5(self.chosen.slowdown)
        if self.max_slowdown is not None:
            doc["max_slowdown"] = self.max_slowdown
            doc["within_slowdown"] = self.within_slowdown.to_json() if self.within_slowdown else None
        if self.largest_batch is not None:
            doc["largest_batch"] = self.largest_batch.to_json()
        return doc

    def summary(self) -> str:
        """One line for people: the profile, its latency and slowdown, and the alternative within the slowdown."""
        if self.profile is None:
            return f"none: {self.reason}"
        c = self.chosen
        text = self.profile if c is None else f"{self.profile} ({g3(c.latency_ms)} ms, {c.slowdown:.2g}x the whole GPU)"
        if self.max_slowdown is not None:
            w = self.within_slowdown
            alt = "none" if w is None else f"{w.profile} ({g3(w.latency_ms)} ms, {w.slowdown:.2g}x)"
            text += f"; smallest within {self.max_slowdown:g}x slowdown: {alt}"
        return text


def queued_s(execution_s: np.ndarray, issue_s: np.ndarray) -> float:
    """Latency, in seconds, of kernels run in launch order by a host that issues them asynchronously.

    The host spends `issue_s[i]` issuing kernel i and runs ahead of the GPU; kernel i starts once the host has
    issued every kernel before it (at `issue_s[0] + ... + issue_s[i-1]`) and the GPU has finished kernel i-1. The
    GPU so finishes at max over k of (issue_s[0] + ... + issue_s[k-1]) + (execution_s[k] + ... + execution_s[N-1]),
    and the run ends no earlier than the host's last issue (the sum of `issue_s`): the host's sum on short
    kernels, the GPU's on long ones, and between them at most the per-kernel max(execution, issue) of
    `KernelTimes.eager_s` (equal for one kernel), because a long kernel lets the host get ahead and queue the
    short ones after it.

    A row that stands for c identical launches (`KernelArrays.count`, its times the sums of the c) gives the same
    result as c rows of 1/c each: the terms of the c launches are linear in the launch, so their max is at the
    row's first launch or the next row's.

    Args:
        execution_s: (N,) seconds each kernel executes (`max(compute_s, memory_s)` of `KernelTimes`).
        issue_s: (N,) seconds the host spends issuing each kernel (`KernelTimes.launch_s`; 0 for a kernel that
            a library call launches on the device).
    """
    e, d = np.asarray(execution_s, dtype=np.float64), np.asarray(issue_s, dtype=np.float64)
    if e.size == 0:
        return 0.0
    before = np.concatenate(([0.0], np.cumsum(d)[:-1]))  # issued before kernel k
    after = np.cumsum(e[::-1])[::-1]  # executions of kernel k and every later one
    return float(max(d.sum(), (before + after).max()))


def slice_latencies(
    full_ms: float, whole, slices: dict, *, host_scale: float = 1.0, exec_scale: float = 1.0
) -> dict[str, float]:
    """Predicted latency (ms) on each MIG slice: the whole GPU's predicted latency `full_ms` plus the extra time the
    asynchronously issued kernels (`queued_s`) take on the slice, 1000 x (queued(slice) - queued(whole)).

    The difference, not the ratio: the part of `full_ms` above the whole GPU's queued time (the per-kernel sum's
    launch floors, or a trained predictor's own excess) is host time a slice does not slow down, so it is carried
    over unscaled; a ratio would scale it and could put a slice above the kernel model's own per-kernel sum on
    that slice (docs/devices.md, "MIG slice latency").

    `whole` and each `slices[name]` are the kernel model's `KernelTimes` of one graph (a slice's costed on its
    share of SMs and memory bandwidth, `kernel_latency_arrays(arrays, device, profile)`); the host's issue time
    per kernel is `launch_s` times `host_scale` on both (host work a slice does not slow down; `host_scale` > 1
    models a host that dispatches slower than the kernel model's floor); each kernel's execution,
    max(`compute_s`, `memory_s`), is times `exec_scale` on both (`exec_scale` > 1 models a software stack whose
    kernels run slower than the kernel model's fitted efficiencies: it stretches GPU time and leaves host time
    alone). preflight predicts at 1 and 1 with the user's host already in `launch_s` (`--host-overhead X`:
    `predictor.predict.host_times`, the same as `host_scale` X here); the bench fits both to the public measuring
    machine (docs/devices.md).
    A graph with no kernels takes `full_ms` on every slice. Measured against public per-slice rows:
    `python bench/bench_mig_latency.py`.
    """

    def queued(t) -> float:
        return queued_s(np.maximum(t.compute_s, t.memory_s) * exec_scale, t.launch_s * host_scale)

    base = queued(whole)
    return {name: full_ms + 1e3 * (queued(t) - base) for name, t in slices.items()}


def smallest_first(profiles: tuple[MigProfile, ...]) -> list[MigProfile]:
    """Smallest first: by memory, then by SMs (1g.20gb before 2g.20gb)."""
    return sorted(profiles, key=lambda p: (p.memory_mib, p.sms))


def fits(
    memory_mib: float,
    memory_mb_high: float,
    latency_ms: float | None = None,
    latency_slo_ms: float | None = None,
    headroom: float = HEADROOM,
) -> bool:
    """The fit rule: `memory_mb_high` + headroom within `memory_mib` usable, and the latency within the SLO if any."""
    ok = memory_mb_high * (1 + headroom) <= memory_mib
    return ok and (latency_slo_ms is None or latency_ms <= latency_slo_ms)


def recommend(
    device: Device,
    memory_mb_high: float,
    *,
    latency_ms_by_profile: dict[str, float] | None = None,
    latency_slo_ms: float | None = None,
    headroom: float = HEADROOM,
    full_gpu_latency_ms: float | None = None,
    max_slowdown: float | None = None,
    bound: str = "predicted upper bound",
) -> MigRecommendation:
    """Pick the smallest MIG profile of `device` for a model.

    Args:
        device: the GPU.
        memory_mb_high: upper end of the predicted memory interval, in MiB.
        latency_ms_by_profile: predicted latency on each profile (needed with `latency_slo_ms` or `max_slowdown`).
        latency_slo_ms: the latency the slice must meet.
        headroom: fraction added to `memory_mb_high` before comparing with a profile's usable memory.
        full_gpu_latency_ms: the predicted latency on the whole GPU (gives each slice's slowdown).
        max_slowdown: also find the smallest fitting profile at most this many times slower than the whole GPU.
        bound: what `memory_mb_high` is, as the reason names it.
    """
    if not device.mig:
        return MigRecommendation(None, f"{device.key} does not support MIG", {})
    need = memory_mb_high * (1 + headroom)
    if (latency_slo_ms is not None or max_slowdown is not None) and latency_ms_by_profile is None:
        raise ValueError("a latency SLO or a maximum slowdown needs the predicted latency per profile")
    if max_slowdown is not None and full_gpu_latency_ms is None:
        raise ValueError("a maximum slowdown needs the whole GPU's predicted latency")
    per_profile: dict[str, bool] = {}

    def done(profile: str | None, reason: str) -> MigRecommendation:
        rec = MigRecommendation(
            profile, reason, per_profile, latency_ms_by_profile, full_gpu_latency_ms, max_slowdown, None
        )
        if max_slowdown is not None:
            within = next(
                (
                    c
                    for q in smallest_first(device.mig)
                    if per_profile[q.name] and (c := rec.choice(q.name)).slowdown <= max_slowdown
                ),
                None,
            )
            rec = replace(rec, within_slowdown=within)
        return rec

    chosen: MigProfile | None = None
    for p in smallest_first(device.mig):
        ok = fits(
            p.memory_mib,
            memory_mb_high,
            latency_ms_by_profile[p.name] if latency_slo_ms is not None else None,
            latency_slo_ms,
            headroom,
        )
        per_profile[p.name] = ok
        if ok and chosen is None:
            chosen = p
    derived = "" if chosen is None or chosen.measured else " (its usable memory is a derived lower bound)"
    if chosen is not None:
        # one profile to choose from: the slice the user asked for (`--device GPU:PROFILE`), not the smallest of several
        lead = f"{chosen.name} is the smallest profile whose" if len(device.mig) > 1 else f"{chosen.name}: its"
        reason = (
            f"{lead} usable {chosen.memory_mib:,.0f} MiB holds the "
            f"{bound} {memory_mb_high:,.0f} MiB + {headroom:.0%} headroom ({need:,.0f} MiB)" + derived
        )
        if latency_slo_ms is not None:
            reason += (
                f" and whose predicted latency {g3(latency_ms_by_profile[chosen.name])} ms meets the "
                f"{latency_slo_ms:g} ms SLO"
            )
        if latency_ms_by_profile is not None and full_gpu_latency_ms:
            lat = latency_ms_by_profile[chosen.name]
            reason += (
                f"; predicted latency on it {g3(lat)} ms, {lat / full_gpu_latency_ms:.2g}x the whole GPU's "
                f"{g3(full_gpu_latency_ms)} ms"
            )
        return done(chosen.name, reason)
    largest = smallest_first(device.mig)[-1]
    if largest.memory_mib < need and len(device.mig) == 1:  # the slice asked for (`--device GPU:PROFILE`)
        reason = (
            f"the model does not fit {largest.name}: its usable {largest.memory_mib:,.0f} MiB is less than the "
            f"{need:,.0f} MiB the model needs (upper bound + {headroom:.0%} headroom)"
        )
    elif largest.memory_mib < need:
        reason = (
            f"no profile fits: the largest, {largest.name}, has {largest.memory_mib:,.0f} MiB usable and the "
            f"model needs {need:,.0f} MiB (upper bound + {headroom:.0%} headroom)"
        )
        reason += (  # a whole GPU (not one slice asked for): does the GPU itself hold it?
            f"; the whole GPU's {device.memory_mib:,.0f} MiB holds it (full GPU only)"
            if need <= device.memory_mib
            else f", more than the whole GPU's {device.memory_mib:,.0f} MiB"
        )
    else:
        reason = f"no profile meets the {latency_slo_ms:g} ms latency SLO with enough memory"
    return done(None, reason)
