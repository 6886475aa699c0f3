"""Evaluation table: preflight's predictor against baselines, on a random and a leave-family-out split.

Rows per target (latency, energy, memory): MAPE, RMSE and the share of predictions within +-10%.
Models: preflight (GraphSAGE, data-flow edges, device + roofline inputs, quantile heads), an ablation
with chain edges, the DIPPM-style GraphSAGE (chain edges, 16-op vocabulary, five static features, sum
readout), an MLP and gradient-boosted trees on the static features, the roofline bound scaled by its
median ratio on the training set (GPUs only), and the training mean (the floor any model must beat).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .data import TARGETS, Sample, family_split, random_split
from .train import DIPPM, OURS, Prepared, TrainConfig, Trained, prepare, train


@dataclass
class Metrics:
    mape: float
    rmse: float
    within10: float
    n: int


def metrics(pred: np.ndarray, y: np.ndarray) -> Metrics:
    ok = ~np.isnan(y) & ~np.isnan(pred)
    if not ok.any():
        return Metrics(math.nan, math.nan, math.nan, 0)
    rel = np.abs(pred[ok] - y[ok]) / y[ok]
    return Metrics(
        float(rel.mean() * 100),
        float(np.sqrt(np.mean((pred[ok] - y[ok]) ** 2))),
        float((rel <= 0.10).mean() * 100),
        int(ok.sum()),
    )


def coverage(lo: np.ndarray, hi: np.ndarray, y: np.ndarray) -> float:
    ok = ~np.isnan(y)
    return float(((y[ok] >= lo[ok]) & (y[ok] <= hi[ok])).mean() * 100) if ok.any() else math.nan


def _ys(items: Sequence[Prepared]) -> np.ndarray:
    return np.stack([p.y for p in items])


def _gnn(variant, cfg) -> Callable:
    def run(train_items: list[Sample], test_items: list[Sample]):
        t = train(train_items, variant, cfg)
        pred = t.predict_prepared([prepare(s, variant) for s in test_items])
        mid = list(variant.quantiles).index(0.5)
        extra = {}
        if len(variant.quantiles) >= 3:
            extra = {"lo": pred[:, :, 0], "hi": pred[:, :, -1], "trained": t}
        return pred[:, :, mid], extra

    return run


def _static_model(kind: str, seed: int) -> Callable:
    def run(train_items: list[Sample], test_items: list[Sample]):
        from sklearn.ensemble import HistGradientBoostingRegressor
        from sklearn.neural_network import MLPRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        a = [prepare(s, OURS) for s in train_items]
        b = [prepare(s, OURS) for s in test_items]
        xa, xb, ya = np.stack([p.graph for p in a]), np.stack([p.graph for p in b]), _ys(a)
        out = np.full((len(b), len(TARGETS)), np.nan)
        for t in range(len(TARGETS)):
            ok = ~np.isnan(ya[:, t])
            if ok.sum() < 5:
                continue
            if kind == "gbt":
                reg = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.05, random_state=seed)
            else:
                mlp = MLPRegressor(hidden_layer_sizes=(128, 64), max_iter=3000, random_state=seed, alpha=1e-3)
                reg = make_pipeline(StandardScaler(), mlp)
            reg.fit(xa[ok], np.log(ya[ok, t]))
            out[:, t] = np.exp(reg.predict(xb))
        return out, {}

    return run


def _roofline_scaled(train_items: list[Sample], test_items: list[Sample]):
    a = [prepare(s, OURS) for s in train_items]
    b = [prepare(s, OURS) for s in test_items]
    out = np.full((len(b), len(TARGETS)), np.nan)
    ya = _ys(a)
    for t, attr in ((0, "roofline_ms"), (2, "roofline_mem_mib")):
        base_a = np.array([getattr(p, attr) for p in a])
        base_b = np.array([getattr(p, attr) for p in b])
        ok = ~np.isnan(ya[:, t]) & ~np.isnan(base_a)
        if ok.sum() and not np.isnan(base_b).all():
            out[:, t] = base_b * float(np.median(ya[ok, t] / base_a[ok]))
    return out, {}


def _mean(train_items: list[Sample], test_items: list[Sample]):
    ya = np.stack([s.y for s in train_items])
    means = np.exp(np.nanmean(np.log(ya), axis=0))
    return np.tile(means, (len(test_items), 1)), {}


def models(cfg: TrainConfig) -> dict[str, Callable]:
    return {
        "preflight GraphSAGE": _gnn(OURS, cfg),
        "  ablation: chain edges": _gnn(replace(OURS, name="chain", dataflow_edges=False), cfg),
        "DIPPM-style GraphSAGE": _gnn(DIPPM, cfg),
        "MLP on static features": _static_model("mlp", cfg.seed),
        "GBT on static features": _static_model("gbt", cfg.seed),
        "roofline x median ratio": _roofline_scaled,
        "training mean": _mean,
    }


def mig_metrics(samples: Sequence[Sample], memory_mb_high: np.ndarray) -> dict | None:
    """The MIG recommender (memory rule, no SLO) against the measured MIG fit of each configuration.

    Counts over the configurations whose record has `mig_fit` (GPU measurements): `unsafe` (the recommended
    profile did not fit: must be 0), `smallest` (it is the smallest profile that fit), `larger` (it fits but a
    smaller one also did), `none_but_fits` (nothing recommended although a profile fit), `none_correct`
    (nothing recommended and nothing fit). None when no record has MIG labels.
    """
    from .devices import get_device
    from .mig import recommend, smallest_first

    out = {"n": 0, "unsafe": 0, "smallest": 0, "larger": 0, "none_but_fits": 0, "none_correct": 0}
    for s, hi in zip(samples, memory_mb_high, strict=True):
        fit = (s.record or {}).get("mig_fit")
        if not fit or hi is None or math.isnan(hi):
            continue
        device = get_device(s.device)
        order = [p.name for p in smallest_first(device.mig) if p.name in fit]
        truth = next((name for name in order if fit[name]), None)
        chosen = recommend(device, float(hi)).profile
        out["n"] += 1
        if chosen is None:
            out["none_correct" if truth is None else "none_but_fits"] += 1
        elif not fit.get(chosen, False):
            out["unsafe"] += 1
        else:
            out["smallest" if chosen == truth else "larger"] += 1
    return out if out["n"] else None


def _roofline_memory_high(items: Sequence[Sample]) -> np.ndarray:
    """Upper end of the roofline fallback's memory interval (predictor.predict) for each sample."""
    from .devices import get_device
    from .predict import roofline_memory_mib

    out = []
    for s in items:
        t = s.totals or {}
        if "param_bytes" not in t or "peak_activation_bytes" not in t:
            out.append(math.nan)
            continue
        out.append(roofline_memory_mib(t["param_bytes"], t["peak_activation_bytes"], get_device(s.device))[2])
    return np.array(out, dtype=float)


@dataclass
class SplitResult:
    split: str
    n_train: int
    n_test: int
    held_out: list[str]
    rows: dict[str, list[Metrics]]  # model -> per target
    coverage: list[float]  # preflight's 90% interval, per target
    trained: Trained | None = None
    mig: dict[str, dict] = field(default_factory=dict)  # memory source -> mig_metrics, where MIG labels exist


def evaluate(
    samples: Sequence[Sample],
    cfg: TrainConfig | None = None,
    *,
    seed: int = 0,
    only: Sequence[str] | None = None,
    log=None,
) -> list[SplitResult]:
    """Train and test every model on the random and the leave-family-out split."""
    cfg = cfg or TrainConfig(seed=seed)
    samples = list(samples)
    tr_r, te_r = random_split(samples, 0.2, seed)
    tr_f, te_f, held = family_split(samples, 0.2, seed)
    results = []
    for name, (tr, te, fams) in {"random": (tr_r, te_r, []), "leave-family-out": (tr_f, te_f, held)}.items():
        a, b = [samples[i] for i in tr], [samples[i] for i in te]
        y = np.stack([s.y for s in b])
        rows, cov, trained, mig = {}, [math.nan] * len(TARGETS), None, {}
        for model_name, run in models(cfg).items():
            if only and model_name.strip() not in only:
                continue
            if log:
                log(f"{name}: {model_name.strip()} ({len(a)} train / {len(b)} test)")
            pred, extra = run(a, b)
            rows[model_name] = [metrics(pred[:, t], y[:, t]) for t in range(len(TARGETS))]
            if "lo" in extra and model_name == "preflight GraphSAGE":
                cov = [coverage(extra["lo"][:, t], extra["hi"][:, t], y[:, t]) for t in range(len(TARGETS))]
                trained = extra["trained"]
                mig["preflight GraphSAGE (upper memory quantile)"] = mig_metrics(b, extra["hi"][:, 2])
        mig["roofline memory estimate (upper end)"] = mig_metrics(b, _roofline_memory_high(b))
        results.append(
            SplitResult(name, len(a), len(b), fams, rows, cov, trained, {k: v for k, v in mig.items() if v is not None})
        )
    return results


def summary(results: Sequence[SplitResult], model: str = "preflight GraphSAGE") -> dict:
    """Per split and target: MAPE, share within 10% and interval coverage of `model` (stored with an artifact)."""
    out = {}
    for r in results:
        if model not in r.rows:
            continue
        num = lambda v: None if v is None or math.isnan(v) else round(float(v), 3)  # noqa: E731 - strict JSON
        out[r.split] = {
            t: {"mape": num(m.mape), "within10": num(m.within10), "coverage90": num(c), "n": m.n}
            for t, m, c in zip(TARGETS, r.rows[model], r.coverage, strict=True)
        }
    return out


def _fmt(v: float, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def table_markdown(results: Sequence[SplitResult], title: str) -> str:
    """The evaluation table committed beside a predictor."""
    units = {"latency_ms": "ms", "energy_j": "J", "memory_mb": "MiB"}
    lines = [f"# {title}", ""]
    for r in results:
        held = f"; held-out families: {', '.join(r.held_out)}" if r.held_out else ""
        lines += [f"## {r.split} split ({r.n_train} train / {r.n_test} test configurations{held})", ""]
        header = "| model | " + " | ".join(f"{t} MAPE % | RMSE ({units[t]}) | within 10 %" for t in TARGETS) + " |"
        lines += [header, "|---|" + "---:|" * (3 * len(TARGETS))]
        for model_name, ms in r.rows.items():
            cells = []
            for m in ms:
                cells += [_fmt(m.mape), _fmt(m.rmse, 3), _fmt(m.within10)]
            lines.append(f"| {model_name.strip()} | " + " | ".join(cells) + " |")
        cov = ", ".join(f"{t} {_fmt(c)}%" for t, c in zip(TARGETS, r.coverage, strict=True))
        lines += ["", f"preflight's 90% interval covers: {cov} of the test labels.", ""]
        if r.mig:
            lines += [
                "MIG recommendation against the measured MIG fit of the test configurations:",
                "",
                "| memory from | configs | would not fit | smallest fitting | larger than needed "
                "| none, but one fit | none, correctly |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for source, m in r.mig.items():
                pct = lambda k: f"{m[k]} ({100 * m[k] / m['n']:.0f}%)"  # noqa: E731, B023
                lines.append(
                    f"| {source} | {m['n']} | {pct('unsafe')} | {pct('smallest')} | {pct('larger')} | "
                    f"{pct('none_but_fits')} | {pct('none_correct')} |"
                )
            lines.append("")
        else:
            lines += ["No MIG fit labels in these measurements (they come from GPU runs of the harness).", ""]
    return "\n".join(lines)
