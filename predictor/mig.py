"""MIG recommendation (DESIGN.md): the smallest profile whose usable memory holds the upper end of the
predicted memory interval plus headroom, and, with a latency SLO, whose predicted latency on that
slice meets it. `None` when nothing fits, always with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from .devices import Device, MigProfile

HEADROOM = 0.05  # 5% of the predicted upper memory bound, for allocator fragmentation between runs


@dataclass(frozen=True)
class MigRecommendation:
    profile: str | None
    reason: str
    fits: dict[str, bool]  # per profile: memory fits (and the SLO, when given)
    latency_ms: dict[str, float] | None = None  # predicted latency per profile, when computed

    def to_json(self) -> dict:
        doc = {"profile": self.profile, "reason": self.reason, "fits": dict(self.fits)}
        if self.latency_ms is not None:
            doc["latency_ms"] = {k: float(f"{v:.5g}") for k, v in self.latency_ms.items()}  # 5 significant digits
        return doc


def smallest_first(profiles: tuple[MigProfile, ...]) -> list[MigProfile]:
    """Smallest first: by memory, then by SMs (1g.20gb before 2g.20gb)."""
    return sorted(profiles, key=lambda p: (p.memory_mib, p.sms))


def fits(memory_mib: float, memory_mb_high: float, latency_ms: float | None = None,
         latency_slo_ms: float | None = None, headroom: float = HEADROOM) -> bool:
    """The fit rule: `memory_mb_high` + headroom within `memory_mib` usable, and the latency within the SLO if any."""
    ok = memory_mb_high * (1 + headroom) <= memory_mib
    return ok and (latency_slo_ms is None or latency_ms <= latency_slo_ms)


def recommend(device: Device, memory_mb_high: float, *, latency_ms_by_profile: dict[str, float] | None = None,
              latency_slo_ms: float | None = None, headroom: float = HEADROOM) -> MigRecommendation:
    """Pick the smallest MIG profile of `device` for a model.

    Args:
        device: the GPU.
        memory_mb_high: upper end of the predicted memory interval, in MiB.
        latency_ms_by_profile: predicted latency on each profile (needed with `latency_slo_ms`).
        latency_slo_ms: the latency the slice must meet.
        headroom: fraction added to `memory_mb_high` before comparing with a profile's usable memory.
    """
    if not device.mig:
        return MigRecommendation(None, f"{device.key} does not support MIG", {})
    need = memory_mb_high * (1 + headroom)
    if latency_slo_ms is not None and latency_ms_by_profile is None:
        raise ValueError("a latency SLO needs the predicted latency per profile")
    per_profile: dict[str, bool] = {}
    chosen: MigProfile | None = None
    for p in smallest_first(device.mig):
        ok = fits(p.memory_mib, memory_mb_high, latency_ms_by_profile[p.name] if latency_slo_ms is not None else None,
                  latency_slo_ms, headroom)
        per_profile[p.name] = ok
        if ok and chosen is None:
            chosen = p
    derived = "" if chosen is None or chosen.measured else " (its usable memory is a derived lower bound)"
    if chosen is not None:
        reason = (f"{chosen.name} is the smallest profile whose usable {chosen.memory_mib:,.0f} MiB holds the "
                  f"predicted upper bound {memory_mb_high:,.0f} MiB + {headroom:.0%} headroom ({need:,.0f} MiB)")
        if latency_slo_ms is not None:
            reason += (f" and whose predicted latency {latency_ms_by_profile[chosen.name]:.3g} ms meets the "
                       f"{latency_slo_ms:g} ms SLO")
        return MigRecommendation(chosen.name, reason + derived, per_profile, latency_ms_by_profile)
    largest = smallest_first(device.mig)[-1]
    if largest.memory_mib < need:
        reason = (f"no profile fits: the largest, {largest.name}, has {largest.memory_mib:,.0f} MiB usable and the "
                  f"model needs {need:,.0f} MiB (upper bound + {headroom:.0%} headroom)")
    else:
        reason = f"no profile meets the {latency_slo_ms:g} ms latency SLO with enough memory"
    return MigRecommendation(None, reason, per_profile, latency_ms_by_profile)
