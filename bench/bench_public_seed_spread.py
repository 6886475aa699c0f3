"""Seed spread of the GraphSAGE's held-out family medians (docs/predictor-training.md, "Seed variance").

For each family given, the leave-one-family-out fold is trained once per seed (the residual GraphSAGE only, the
shipped `FitConfig` otherwise; `--ensemble K` trains a K-member ensemble per seed instead) and the held-out
family's median APE with the OOD fallback over its single-forward rows is printed per seed, with the kernel
model's median and the range over the seeds. The OOD threshold of a family is the full evaluation's
(`evaluate_lofo`'s: the other families' held-out distances over all folds; no training needed for it).

`--members` (with `--ensemble K`): also each member's own median (the members share the calibration split, so
their spread is that of the initial weights and shuffling alone).

Usage: python bench/bench_public_seed_spread.py --families tft,ssd300 --seeds 0,1,2,3,4 [--ensemble K [--members]]
[--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="tft,ssd300")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--ensemble", type=int, default=1)
    ap.add_argument("--members", action="store_true", help="also print each ensemble member's median")
    ap.add_argument("--out", type=Path, default=None, help="also write every row's figures as JSON here")
    args = ap.parse_args()
    import torch

    from predictor import public_train as pt

    torch.set_num_threads(1)
    graphs = pt.load_graphs()
    exs = pt.examples(pt.training_rows(), graphs, kinds=("residual",))
    dist = pt.fold_distances(exs, graphs)
    thresholds = pt.ood_thresholds(dist)
    seeds = [int(s) for s in args.seeds.split(",")]
    fams = args.families.split(",")
    print(f"{'family':<12}{'seed':>6}{'rows':>6}{'kernel':>9}{'GraphSAGE':>11}{'seconds':>9}   (median APE %)")
    doc: dict = {}
    for fam in fams:
        train = [e for e in exs if e.row.family != fam and pt.trainable(e.row)]
        test = [e for e in exs if e.row.family == fam and e.row.single_forward]
        pt.check_split(train, test)
        items = pt.train_items(train, "residual")
        ref, m, s = pt.ood_reference(train, graphs)
        inside = [pt._nn_distance(ref, m, s, pt.static_vector(graphs[e.gid].static)) <= thresholds[fam] for e in test]
        meas = np.array([e.row.latency_ms for e in test])
        kern = np.array([e.view.estimate_ms for e in test])
        km = float(np.median(np.abs(kern - meas) / meas * 100))
        meds = []
        for seed in seeds:
            t0 = time.perf_counter()
            fitted = pt.fit(items, "residual", pt.FitConfig(seed=seed, ensemble=args.ensemble))
            p = fitted.predict_ms([e.items["residual"] for e in test])[:, 1]
            final = np.where(inside, p, kern)
            med = float(np.median(np.abs(final - meas) / meas * 100))
            meds.append(med)
            doc.setdefault(fam, {})[seed] = {"median_ape": med, "kernel_median_ape": km, "pred_ms": final.tolist()}
            print(f"{fam:<12}{seed:>6}{len(test):>6}{km:>9.1f}{med:>11.1f}{time.perf_counter() - t0:>9.1f}", flush=True)
            if args.members and len(fitted.networks) > 1:
                own = []
                for net in fitted.networks:
                    q = replace(fitted, model=net, members=[]).predict_ms([e.items["residual"] for e in test])[:, 1]
                    own.append(float(np.median(np.abs(np.where(inside, q, kern) - meas) / meas * 100)))
                doc[fam][seed]["member_median_ape"] = own
                print(f"{'':<12}{'':>6}{'':>6}{'':>9}  members: " + ", ".join(f"{v:.1f}" for v in own), flush=True)
        sd = np.std(meds, ddof=1) if len(meds) > 1 else 0.0
        print(
            f"{fam:<12}{'range':>6}{'':>6}{'':>9}{min(meds):>5.1f}-{max(meds):<5.1f}"
            f"  spread {max(meds) - min(meds):.1f} pp, mean {np.mean(meds):.1f}, sd {sd:.1f}",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
