"""TF32 matmuls against published TF32 measurements: the kernel-model estimate of DLE A100 rows that ran float32
on TF32 tensor cores (NVIDIA's containers set `torch.backends.cuda.matmul.allow_tf32`), with float32 matmuls on
FP32 CUDA cores (`--matmul-precision highest`, torch's default) and on TF32 (`high`).

Each configuration is analysed once (`analyzer.api.analyze`, the row's zoo spec and batch) and predicted both
ways (`predictor.predict.predict`). Rows: `predictor.public_data` (data/public-models/dle-a100.jsonl), TF32 only,
the specs named on the command line (default: an MLP-heavy, a transformer and a convolutional family).

Usage: python bench/bench_tf32_public_rows.py [SPEC ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.api import analyze  # noqa: E402
from predictor.predict import predict  # noqa: E402
from predictor.public_data import MappedRow, load_rows, map_rows  # noqa: E402

DEFAULT_SPECS = ("dlrm_criteo_1tb", "wav2vec2_base", "ssd300_resnet50")


def main(specs: tuple[str, ...]) -> None:
    rows = [
        r
        for r in map_rows(load_rows())
        if isinstance(r, MappedRow) and r.precision == "tf32" and r.spec.split("?")[0] in specs
    ]
    seen: dict[tuple[str, int, str], dict] = {}
    print(f"{'zoo spec':<22} {'batch':>6} {'device':<10} {'grade':<5} {'measured':>9} {'highest':>9} {'high':>9}"
          f" {'bound hi':>9} {'bound tf':>9}   (ms; analysis s)")  # fmt: skip
    for r in sorted(rows, key=lambda r: (r.spec, r.batch, r.device, r.latency_ms)):
        key = (r.spec, r.batch, r.device)
        if key not in seen:
            t = time.perf_counter()
            report = analyze(f"zoo:{r.spec}", batch=r.batch, dtype=r.dtype)
            took = time.perf_counter() - t
            seen[key] = {mp: predict(report.analysis, r.device, matmul_precision=mp)[0] for mp in ("highest", "high")}
            seen[key]["took"] = took
        p = seen[key]
        print(
            f"{r.spec:<22} {r.batch:>6} {r.device:<10} {r.comparability:<5} {r.latency_ms:>9.2f} "
            f"{p['highest'].latency_ms:>9.2f} {p['high'].latency_ms:>9.2f} {p['highest'].roofline_latency_ms:>9.2f} "
            f"{p['high'].roofline_latency_ms:>9.2f}   {p['took']:.0f}"
        )


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or DEFAULT_SPECS)
