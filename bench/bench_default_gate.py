"""The default rule under a gate on the GraphSAGE's own interval, from the committed checkpoint's held-out rows.

`predictor/checkpoints/a100-80gb@1/eval.json` holds every leave-one-family-out row: the kernel model's estimate,
the GraphSAGE's held-out prediction with its calibrated 90% interval, and the answer with the OOD fallback. The
gate keeps the kernel model wherever that interval holds the kernel model's estimate (the correction is not
distinguishable from none at 90%) and beyond the OOD threshold, the GraphSAGE elsewhere. Per GPU: the rule's
two conditions (`predictor.public_train.default_decision`: median APE below the kernel model's over the GPU's
single-forward rows, no family more than `DEFAULT_TOLERANCE_PP` points worse), with and without the gate, and how
many rows keep the correction. No training: a few milliseconds.

Usage: python bench/bench_default_gate.py [EVAL_JSON]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.public_train import DEFAULT_TOLERANCE_PP, device_group  # noqa: E402

EVAL = ROOT / "predictor" / "checkpoints" / "a100-80gb@1" / "eval.json"


def gated_ms(row: dict) -> tuple[float, bool]:
    """(the gated answer in ms, whether it is the GraphSAGE's)."""
    if not row["in_distribution"] or row["graphsage_lo"] <= row["kernel_ms"] <= row["graphsage_hi"]:
        return row["kernel_ms"], False
    return row["graphsage_ms"], True


def median_ape(rows: list[dict], pick) -> float:
    return float(np.median([abs(pick(r) / r["measured_ms"] - 1) for r in rows]) * 100)


def main(path: Path) -> None:
    rows = [r for r in json.loads(path.read_text())["rows"] if r["single_forward"]]
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_gpu[device_group(r["device"])].append(r)
    answers = {"with the OOD fallback": lambda r: r["final_ms"], "gated": lambda r: gated_ms(r)[0]}
    print(f"{'GPU':6} {'answer':22} {'rows':>5} {'corrected':>9} {'km median':>9} {'median':>7}  families worse by > "
          f"{DEFAULT_TOLERANCE_PP:g} points")  # fmt: skip
    for gpu, rs in sorted(by_gpu.items()):
        families: dict[str, list[dict]] = defaultdict(list)
        for r in rs:
            families[r["family"]].append(r)
        km = median_ape(rs, lambda r: r["kernel_ms"])
        for name, pick in answers.items():
            corrected = sum(pick(r) != r["kernel_ms"] for r in rs)
            worse = [
                f"{f} ({median_ape(v, lambda r: r['kernel_ms']):.1f} -> {median_ape(v, pick):.1f})"
                for f, v in sorted(families.items())
                if median_ape(v, pick) > median_ape(v, lambda r: r["kernel_ms"]) + DEFAULT_TOLERANCE_PP
            ]
            print(f"{gpu:6} {name:22} {len(rs):5d} {corrected:9d} {km:9.1f} {median_ape(rs, pick):7.1f}  "
                  f"{', '.join(worse) or '-'}")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else EVAL)
