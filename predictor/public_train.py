"""Train the GraphSAGE on public A100 and own H100 whole-model measurements: rows, graphs, harness terms (no TVM).

Rows (`training_rows`): the NVIDIA DeepLearningExamples rows `predictor.public_data` maps to zoo configurations
(`data/public-models/dle-a100.jsonl`), the MIGProfiler encoder rows (`data/public-models/mig-a100-40gb.jsonl`,
float32 eager with TF32 matmuls on every MIG slice of an A100-40GB, `MIG_PRECISION`) and the project's own H100
rows (`data/h100-80gb/models/*.jsonl`, eager forwards timed with CUDA events, `h100_rows`). Each row becomes a
`TrainRow`: the family (the unit of the leave-one-family-out split), the zoo spec, batch and the dtype to analyse
the graph in (autocast rows as "amp-float16" / "amp-bfloat16"), the precision it ran in, the device key (a MIG
slice as `a100-40gb:3g.20gb`), the measured milliseconds, what the timed loop holds (`harness`) and whether it
counts as a single-forward row (`single_forward`, with the reason when not).

Graphs: `python -m analyzer.public_dataset` featurises every configuration once and packs them into
`GRAPHS_PATH` (committed), which `load_graphs` reads back; training needs only that file and the JSON lines.

The harness terms (docs/predictor-training.md): the loop's host-to-device copy of the input batch where the row's
notes say the loop holds it (TFT, SSD300), at the PCIe 4.0 x16 rate (`PCIE_GBS`); Triton, CUDA graphs and
TorchScript are inputs of the model (`HARNESS_FLAGS`), not terms; QuartzNet's rows (host-dominated, the printed
stage unknown) and every grade-C row are left out of the single-forward evaluation and counted.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .data import DIPPM_STATIC, STATIC_NAMES
from .public_data import DEFAULT_PATH as DLE_PATH
from .public_data import MappedRow, load_rows, map_rows

ROOT = Path(__file__).resolve().parents[1]
MIG_PATH = ROOT / "data" / "public-models" / "mig-a100-40gb.jsonl"
#: The project's own whole-model measurements on an H100 (`predictor.measure`: eager torch, CUDA events around each
#: forward, back to back; one JSON line per zoo configuration, `status` "ok" or why not).
H100_DIR = ROOT / "data" / "h100-80gb" / "models"
GRAPHS_PATH = ROOT / "data" / "public-models" / "public-graphs.npz"

#: Host-to-device rate of an A100 SXM4's host link, bytes/s: PCIe 4.0 x16, 16 GT/s x 16 lanes x 128/130 / 8
#: = 31.5 GB/s per direction (PCI-SIG PCIe 4.0 specification; the A100 datasheet lists "PCIe Gen4: 64 GB/s",
#: both directions). An upper bound: pageable copies run slower.
PCIE_GBS = 31.5
#: Runtime properties of a row's timed loop that the model takes as inputs (0 for a user's eager forward).
HARNESS_FLAGS = ("triton", "cuda_graphs", "torchscript")
#: The precisions of the rows, in the one-hot order of the model's input.
PRECISIONS = ("tf32", "fp32", "amp-fp16", "amp-bf16", "fp16")
_ANALYSIS_DTYPE = {
    "tf32": "float32",
    "fp32": "float32",
    "amp-fp16": "amp-float16",
    "amp-bf16": "amp-bfloat16",
    "fp16": "float16",
}
_FAMILY = {  # zoo spec prefix -> family
    "dlrm": "dlrm",
    "ssd300": "ssd300",
    "nnunet": "nnunet",
    "quartznet": "quartznet",
    "tft": "tft",
    "fastpitch": "fastpitch",
    "wav2vec2": "wav2vec2",
}
#: The MIGProfiler encoders as zoo specs (bench/mig_encoders.py) and their family. A family is an architecture (the
#: zoo builder), whatever the checkpoint and the device: MiniLM-L12 is a BERT, mpnet-base-v2 an XLM-R (RoBERTa),
#: distiluse v1 and v2 one DistilBERT; the H100 rows of `bert_base`, `roberta_base`, `distilbert_base` are the same
#: three families, so a leave-one-family-out split holds each out on both devices at once (two names for one
#: architecture would put near-identical graphs on both sides of a split).
MIG_ENCODERS = {
    "paraphrase-multilingual-MiniLM-L12-v2": (
        "bert?vocab=250037&hidden=384&layers=12&heads=12&intermediate=1536&max_pos=512&attn=eager",
        "bert",
    ),
    "paraphrase-multilingual-mpnet-base-v2": (
        "roberta?vocab=250002&hidden=768&layers=12&heads=12&intermediate=3072&max_pos=514&attn=eager",
        "roberta",
    ),
    "distiluse-base-multilingual-cased-v1": (
        "distilbert?vocab=119547&hidden=768&layers=6&heads=12&intermediate=3072&max_pos=512&attn=eager",
        "distilbert",
    ),
    "distiluse-base-multilingual-cased-v2": (
        "distilbert?vocab=119547&hidden=768&layers=6&heads=12&intermediate=3072&max_pos=512&attn=eager",
        "distilbert",
    ),
}
#: How the MIGProfiler rows ran (the script that wrote them: `A100-infer_test.py` at the repository's first commit
#: a801b5d3ff, runs of 2022-07-01/02, the CSV timestamps): `padding(test_data[:batch], seq_length)` truncates or
#: zero-pads every review to exactly `seq_length` tokens, so the sequence column is the exact length (not a cap; the
#: padded-to-longest loader came later), and `AutoModel` is timed with CUDA events on input_ids already on the GPU.
#: Precision: TF32 matmuls. FP32 CUDA cores cannot have run them: distiluse (6 x 768, FFN 3072) is 2 x 6 x
#: (4 x 768^2 + 2 x 768 x 3072) = 84.9 MFLOP per token of linear layers alone; at batch 256 x 64 tokens on 1g.5gb
#: (14 SMs x 64 FP32 lanes x 2 x 1.41 GHz = 2.53 TFLOP/s FP32) that is >= 550 ms, measured 199.7 ms (7.0 TFLOP/s);
#: on 7g.40gb (98 SMs, 17.7 TFLOP/s FP32) >= 78.7 ms, measured 26.5 ms. The run's torch is not recorded (the
#: requirements naming 1.12.0, whose default is no TF32, were committed a month later; earlier torch and NGC
#: containers default to TF32).
MIG_PRECISION = "tf32"


#: Precision of an own H100 row from its dtype: float32 ran with `tf32_matmul` off (every record's `env` says so;
#: `h100_rows` refuses one that does not), float16 as the model in half (`predictor.measure` casts the module).
H100_PRECISION = {"float32": "fp32", "float16": "fp16"}


class PublicTrainError(ValueError):
    """The training data or an artifact cannot be used (one line)."""


@dataclass(frozen=True)
class TrainRow:
    """One measured row to train or evaluate on.

    Attributes:
        source: "dle:<line>", "mig:<line>" (0-based line of the JSON-lines file) or "h100:<file>:<line>".
        family: the leave-one-family-out unit, an architecture on every device ("dlrm", "nnunet", "bert", ...).
        spec: zoo spec without the "zoo:" prefix.
        batch: batch size.
        analysis_dtype: dtype to analyse the graph in ("float32", "float16", "amp-float16", "amp-bfloat16").
        precision: one of `PRECISIONS`.
        device: device key, e.g. "a100-80gb" or "a100-40gb:1g.5gb".
        latency_ms: measured milliseconds per batch.
        comparability: "B" or "C" (MIG rows: "B"; own H100 rows: "A", a plain eager forward timed with CUDA events).
        harness: {flag: 0/1} for `HARNESS_FLAGS`, and "h2d": 1 when the loop copies the input batch to the GPU.
        single_forward: whether the row is in the single-forward evaluation (module docstring).
        reason: why not ("" when it is).
    """

    source: str
    family: str
    spec: str
    batch: int
    analysis_dtype: str
    precision: str
    device: str
    latency_ms: float
    comparability: str
    harness: dict = field(default_factory=dict)
    single_forward: bool = True
    reason: str = ""

    @property
    def config(self) -> tuple[str, int, str]:
        return self.spec, self.batch, self.analysis_dtype


def _dle_row(m: MappedRow) -> TrainRow:
    family = _FAMILY[next(p for p in _FAMILY if m.spec.startswith(p))]
    timed = m.timed
    harness = {
        "triton": int("Triton" in timed),
        "cuda_graphs": int("CUDA graphs on" in timed),
        "torchscript": int("TorchScript" in timed or "scripted" in timed),
        "h2d": int("H2D copy" in timed),
    }
    reason = ""
    if family == "quartznet":
        reason = "host-dominated: 33-42 ms flat over batch and duration, the printed stage is not known"
    elif m.comparability != "B":
        reason = "grade C: " + ("Triton client end to end" if harness["triton"] else "CUDA graphs or TorchScript")
    return TrainRow(
        source=f"dle:{m.index}",
        family=family,
        spec=m.spec,
        batch=m.batch,
        analysis_dtype=_ANALYSIS_DTYPE[m.precision],
        precision=m.precision,
        device=m.device,
        latency_ms=m.latency_ms,
        comparability=m.comparability,
        harness=harness,
        single_forward=not reason,
        reason=reason,
    )


def mig_rows(path: str | Path = MIG_PATH) -> tuple[list[TrainRow], dict[str, int]]:
    """The MIGProfiler rows (every row: the sequence is exact, `MIG_PRECISION`), and the count left out per reason
    (none today; kept for the evaluation table's left-out list)."""
    used, left = [], {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            r = json.loads(line)
            if r["model"] not in MIG_ENCODERS:
                raise PublicTrainError(f"{path}:{n + 1}: unknown encoder {r['model']!r}")
            spec, family = MIG_ENCODERS[r["model"]]
            used.append(
                TrainRow(
                    source=f"mig:{n}",
                    family=family,
                    spec=f"{spec}&seq_len={int(r['seq_len'])}",
                    batch=int(r["batch"]),
                    analysis_dtype="float32",
                    precision=MIG_PRECISION,
                    device=f"a100-40gb:{r['mig_profile']}",
                    latency_ms=float(r["latency_ms"]),
                    comparability="B",
                    harness=dict.fromkeys((*HARNESS_FLAGS, "h2d"), 0),
                )
            )
    return used, left


def h100_rows(directory: str | Path = H100_DIR) -> tuple[list[TrainRow], dict[str, int]]:
    """The project's own H100 whole-model rows (every `status` "ok" record of `directory`/*.jsonl: the zoo spec,
    batch, dtype as measured, the median of the CUDA-event times) and the count of records left out per reason.

    Family: the record's zoo family (`bert`, `resnet`, ...), the unit of the split like the public families. Every
    row is a single eager forward (no harness term)."""
    used, left = [], {}
    for path in sorted(Path(directory).glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh):
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("status") != "ok":
                    key = f"own H100: status {r.get('status')!r} (no latency)"
                    left[key] = left.get(key, 0) + 1
                    continue
                if r["dtype"] not in H100_PRECISION or (r.get("env") or {}).get("tf32_matmul"):
                    raise PublicTrainError(f"{path.name}:{n + 1}: dtype {r['dtype']!r} / TF32 matmuls not mapped")
                used.append(
                    TrainRow(
                        source=f"h100:{path.name}:{n}",
                        family=str(r["family"]),
                        spec=str(r["zoo"]),
                        batch=int(r["batch"]),
                        analysis_dtype=r["dtype"],
                        precision=H100_PRECISION[r["dtype"]],
                        device=str(r["device"]),
                        latency_ms=float(r["latency_ms"]["median"]),
                        comparability="A",
                        harness=dict.fromkeys((*HARNESS_FLAGS, "h2d"), 0),
                    )
                )
    return used, left


#: Mapped rows not used at all, and why: TFT's Triton rows (grade C, float16, batch 1-1024: 22 graphs) would take
#: 2 minutes each to analyse on the shared 2-core machine (the TFT graph has 4,231 ops), for rows that are not in
#: the single-forward evaluation anyway.
NOT_USED = {("tft", "C"): "TFT on Triton (grade C, float16): not featurised (2 min per graph here)"}


def training_rows(
    dle: str | Path = DLE_PATH, mig: str | Path = MIG_PATH, h100: str | Path | None = H100_DIR
) -> list[TrainRow]:
    """Every row preflight trains on (module docstring): DLE rows first, then MIGProfiler, then the own H100 rows
    (`h100=None`: the public A100 rows only), each in file order."""
    rows = [_dle_row(m) for m in map_rows(load_rows(dle)) if isinstance(m, MappedRow)]
    own = h100_rows(h100)[0] if h100 is not None else []
    return [r for r in rows if (r.family, r.comparability) not in NOT_USED] + mig_rows(mig)[0] + own


def not_used_counts(dle: str | Path = DLE_PATH) -> dict[str, int]:
    """Mapped DLE rows left out of `training_rows` (`NOT_USED`), per reason."""
    out: dict[str, int] = {}
    for m in map_rows(load_rows(dle)):
        if isinstance(m, MappedRow):
            r = _dle_row(m)
            if (r.family, r.comparability) in NOT_USED:
                out[NOT_USED[(r.family, r.comparability)]] = out.get(NOT_USED[(r.family, r.comparability)], 0) + 1
    return out


def graph_id(spec: str, batch: int, dtype: str) -> str:
    """A configuration's key in the graph file: 16 hex digits over (spec, batch, analysis dtype)."""
    return hashlib.sha256(json.dumps([spec, int(batch), dtype]).encode()).hexdigest()[:16]


def data_digest(rows: list[TrainRow], graphs_path: str | Path = GRAPHS_PATH) -> str:
    """A digest of the training data: the rows' keys and labels and the graph file's bytes (16 hex digits)."""
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: r.source):
        h.update(json.dumps([r.source, r.family, r.config, r.precision, r.device, r.latency_ms]).encode())
    h.update(Path(graphs_path).read_bytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# The graph file: every configuration's arrays, concatenated, with offsets
# --------------------------------------------------------------------------------------------------

_RAGGED = ("x", "edge_index", "static", "op_flops", "op_bytes", "op_category", "op_dtype", "op_folded")
#: One array per field of `predictor.kernel_model.KernelArrays` (`k_<field>`, one entry per kernel: every input of
#: the kernel model, so `kernel_times` on the file equals the kernel model on the live analysis) and the kernel -> op
#: map (`k_op_ptr` (K+1,), `k_op_idx`).
_KERNEL = (
    "k_kind", "k_dtype", "k_flops", "k_nbytes", "k_b", "k_m", "k_n", "k_k",
    "k_count", "k_inside", "k_bias", "k_transposed", "k_grouped", "k_strided", "k_rows", "k_row_numel",
    "k_op_ptr", "k_op_idx",
)  # fmt: skip
#: Kernel arrays a graph file written before they existed lacks, and their value then: one launch per kernel; none
#: inside a library call (the kernel view then had no library calls); no fused bias, transposed or grouped
#: convolution, strided copy, no rows reduced one per thread block (what the kernel model costed such a file with:
#: the skew `missing_kernel_columns` names)
_KERNEL_DEFAULTS = {
    "k_count": lambda k: np.ones(k, dtype=np.float64),
    **{f"k_{f}": (lambda k: np.zeros(k, dtype=np.float64)) for f in ("rows", "row_numel")},
    **{f"k_{f}": (lambda k: np.zeros(k, dtype=bool)) for f in ("inside", "bias", "transposed", "grouped", "strided")},
}


def _with_defaults(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` of one graph with every `_KERNEL_DEFAULTS` array it lacks filled in (one entry per kernel)."""
    k = len(arrays["k_kind"])
    return {**{n: f(k) for n, f in _KERNEL_DEFAULTS.items() if n not in arrays}, **arrays}


def missing_kernel_columns(path: str | Path) -> list[str]:
    """The `_KERNEL` arrays a packed graph file does not hold (read back as `_KERNEL_DEFAULTS`, so its graphs are
    costed without what those columns carry): [] for a file written by this preflight."""
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
    except (OSError, ValueError) as exc:
        raise PublicTrainError(f"cannot read the graph file {path}: {exc}") from None
    return [n for n in _KERNEL if n not in files]


def pack_graphs(graphs: dict[str, dict[str, np.ndarray]], path: str | Path) -> None:
    """Write {graph id: arrays of `analyzer.public_dataset.featurize_public`} as one compressed .npz.

    Each per-graph array is concatenated along its first axis (edge_index along axis 1) with `<name>__ptr`
    offsets (G+1,); the ids, configs, static names and input bytes are kept per graph.
    """
    graphs = {i: _with_defaults(g) for i, g in graphs.items()}
    ids = sorted(graphs)
    out: dict[str, np.ndarray] = {"ids": np.array(ids), "configs": np.array([str(graphs[i]["config"]) for i in ids])}
    names = {tuple(map(str, graphs[i]["static_names"])) for i in ids}
    if len(names) != 1:
        raise PublicTrainError("graphs with different static feature names: rebuild the cache")
    out["static_names"] = np.array(next(iter(names)))
    out["input_bytes"] = np.array([int(graphs[i]["input_bytes"]) for i in ids], dtype=np.int64)
    out["feature_version"] = np.array(str(graphs[ids[0]]["feature_version"]))
    for name in (*_RAGGED, *_KERNEL):
        parts = [np.asarray(graphs[i][name]) for i in ids]
        axis = 1 if name == "edge_index" else 0
        sizes = [p.shape[axis] for p in parts]
        out[f"{name}__ptr"] = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        out[name] = np.concatenate(parts, axis=axis)
    if out["x"].dtype != np.float32:
        out["x"] = out["x"].astype(np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **out)
    Path(path).write_bytes(buf.getvalue())


def unpack_graphs(path: str | Path = GRAPHS_PATH) -> dict[str, dict[str, np.ndarray]]:
    """The inverse of `pack_graphs`: {graph id: the arrays `analyzer.public_dataset.featurize_public` returned, and
    "config"}, so that a rebuild featurises only the configurations the file does not hold yet."""
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise PublicTrainError(f"cannot read the graph file {path}: {exc}") from None
    out = {}
    for g, gid in enumerate(map(str, a["ids"])):
        arrays: dict[str, np.ndarray] = {
            "static_names": a["static_names"],
            "input_bytes": np.array(a["input_bytes"][g], dtype=np.int64),
            "feature_version": a["feature_version"],
            "config": np.array(str(a["configs"][g])),
        }
        for name in (*_RAGGED, *_KERNEL):
            if f"{name}__ptr" not in a and name in _KERNEL_DEFAULTS:
                continue  # a file from before the array existed (`_with_defaults`)
            lo, hi = a[f"{name}__ptr"][g], a[f"{name}__ptr"][g + 1]
            arrays[name] = a[name][:, lo:hi] if name == "edge_index" else a[name][lo:hi]
        out[gid] = _with_defaults(arrays)
    return out


@dataclass
class Graph:
    """One configuration's arrays (see `analyzer.public_dataset`)."""

    config: tuple[str, int, str]
    x: np.ndarray  # (|V|, F) float32
    edge_index: np.ndarray  # (2, |E|) int64
    static: dict[str, float]
    ops: dict[str, np.ndarray]  # op_flops, op_bytes, op_category, op_dtype, op_folded
    kernels: dict[str, np.ndarray]  # k_* arrays
    input_bytes: int
    kept: np.ndarray = field(default=None)  # the ops of the kernel graph (`kernel_graph`), (V',)
    kernel_edges: np.ndarray = field(default=None)  # (2, E') between them

    def __post_init__(self) -> None:
        if self.kept is None:
            self.kept, self.kernel_edges = kernel_graph(self.x, self.edge_index)


def load_graphs(path: str | Path = GRAPHS_PATH) -> dict[str, Graph]:
    """Read the graph file: {graph id: Graph}."""
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise PublicTrainError(f"cannot read the graph file {path}: {exc}") from None
    from passes.features import FEATURE_VERSION

    if str(a["feature_version"]) != FEATURE_VERSION:
        raise PublicTrainError(
            f"{path} holds features {a['feature_version']}, this preflight computes {FEATURE_VERSION}: "
            "rebuild it (python -m analyzer.public_dataset)"
        )
    names = [str(n) for n in a["static_names"]]
    out = {}
    for g, gid in enumerate(map(str, a["ids"])):

        def part(name: str, g: int = g) -> np.ndarray:
            if f"{name}__ptr" not in a and name in _KERNEL_DEFAULTS:  # a file from before the array existed
                return _KERNEL_DEFAULTS[name](int(np.diff(a["k_kind__ptr"][g : g + 2])[0]))
            lo, hi = a[f"{name}__ptr"][g], a[f"{name}__ptr"][g + 1]
            return a[name][:, lo:hi] if name == "edge_index" else a[name][lo:hi]

        cfg = json.loads(str(a["configs"][g]))
        out[gid] = Graph(
            config=(cfg[0], int(cfg[1]), cfg[2]),
            x=part("x"),
            edge_index=part("edge_index"),
            static=dict(zip(names, map(float, part("static")), strict=True)),
            ops={k: part(k) for k in ("op_flops", "op_bytes", "op_category", "op_dtype", "op_folded")},
            kernels={k: part(k) for k in _KERNEL},
            input_bytes=int(a["input_bytes"][g]),
        )
    return out


# --------------------------------------------------------------------------------------------------
# Kernel-model view of a row: the estimate, the roofline bound, each node's kernel time
# --------------------------------------------------------------------------------------------------


def kernel_times(arrays, device, tf32: bool):
    """`kernel_latency_arrays` of `arrays` on `device`, float32 matmuls on TF32 tensor cores when `tf32` and the
    kernel model supports it (`tf32_matmul=`); without that support they are costed on FP32 CUDA cores."""
    import inspect

    from .kernel_model import kernel_latency_arrays

    if tf32 and "tf32_matmul" in inspect.signature(kernel_latency_arrays).parameters:
        return kernel_latency_arrays(arrays, device, tf32_matmul=True)
    return kernel_latency_arrays(arrays, device)


def tf32_supported() -> bool:
    """Whether the kernel model can cost float32 matmuls on TF32 tensor cores."""
    import inspect

    from .kernel_model import kernel_latency_arrays

    return "tf32_matmul" in inspect.signature(kernel_latency_arrays).parameters


def graph_kernel_arrays(g: Graph):
    """The `KernelArrays` of a graph of the file, as `kernel_arrays` makes them from the live kernel view: every
    field from its `k_<field>` array (`_KERNEL`), a per-kernel flag None where no kernel has it, `count` None where
    every kernel launches once."""
    from .kernel_model import KernelArrays

    k = g.kernels
    count = np.asarray(k["k_count"], dtype=np.float64)
    flags = {f: np.asarray(k[f"k_{f}"], dtype=bool) for f in ("inside", "bias", "transposed", "grouped", "strided")}
    rows = {f: np.asarray(k[f"k_{f}"], dtype=np.float64) for f in ("rows", "row_numel")}
    return KernelArrays(
        k["k_kind"], k["k_dtype"], k["k_flops"], k["k_nbytes"], k["k_b"], k["k_m"], k["k_n"], k["k_k"],
        count=None if (count == 1).all() else count,
        **{f: (v if v.any() else None) for f, v in flags.items()},
        **({} if not rows["rows"].any() else rows),
    )  # fmt: skip


def node_kernel_ms(
    eager_s: np.ndarray, ptr: np.ndarray, idx: np.ndarray, n_nodes: int, keep: np.ndarray | None = None
) -> np.ndarray:
    """(|V|,) milliseconds of the kernel model's time per node: each kernel's `eager_s` split evenly over the ops it
    covers (CSR `ptr` (K+1,), `idx`), over those of them in `keep` (a (|V|,) bool mask) when any is."""
    k = len(ptr) - 1
    seg = np.repeat(np.arange(k), np.diff(ptr))
    weight = np.ones(len(idx)) if keep is None else keep[idx].astype(float)
    kept = np.bincount(seg, weights=weight, minlength=k)
    weight = np.where(kept[seg] > 0, weight, 1.0)  # a kernel with no kept op: spread over all its ops
    total = np.bincount(seg, weights=weight, minlength=k)
    share = eager_s[seg] * weight / np.maximum(total[seg], 1e-12)
    out = np.bincount(idx, weights=share, minlength=n_nodes)
    return out * 1e3


def kernel_graph(x: np.ndarray, edge_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The graph of the ops that launch a kernel (node feature `launches` = 1): (kept op indices (V',), edges
    (2, E') between them), a kept op linked to its nearest kept ancestors through the ops left out (views, ops
    fused into another's kernel, folded constants). Ops are in execution order (every edge runs forward).
    A graph with no launching op keeps every op."""
    from passes.features import FEATURE_COLUMNS

    n = x.shape[0]
    keep = x[:, FEATURE_COLUMNS.index("launches")] > 0 if n else np.zeros(0, bool)
    if not keep.any():
        return np.arange(n), edge_index
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in edge_index.T.tolist():
        preds[b].append(a)
    anc: list[frozenset] = [frozenset()] * n
    pairs = set()
    for v in range(n):
        reach = set()
        for p in preds[v]:
            reach |= anc[p]
        if keep[v]:
            pairs.update((a, v) for a in reach)
            anc[v] = frozenset((v,))
        else:
            anc[v] = frozenset(reach)
    kept = np.flatnonzero(keep)
    new = -np.ones(n, dtype=np.int64)
    new[kept] = np.arange(len(kept))
    e = np.array(sorted(pairs), dtype=np.int64).T.reshape(2, -1)
    return kept, new[e]


@dataclass
class View:
    """What the kernel model says of one (graph, device, precision, harness): the inputs of the predictors."""

    estimate_ms: float  # kernel-model eager latency + the modelled harness terms
    bound_ms: float  # roofline bound (efficiency 1, no launch)
    floor_ms: float  # part of the eager latency at the launch floor
    h2d_ms: float  # the host-to-device copy term (0 when the loop holds none)
    node_ms: np.ndarray  # (|V|,) kernel-model ms per node


def kernel_view_of(g: Graph, device_key: str, precision: str, h2d: bool) -> View:
    from .devices import get_device

    times = kernel_times(graph_kernel_arrays(g), get_device(device_key), precision == "tf32")
    return view_of_times(g, times, g.input_bytes / (PCIE_GBS * 1e9) * 1e3 if h2d else 0.0)


def view_of_times(g: Graph, times, h2d_ms: float = 0.0) -> View:
    """A `View` from the kernel model's `KernelTimes` of the graph (node times on `g.kept` nodes)."""
    keep = np.zeros(g.x.shape[0], bool)
    keep[g.kept] = True
    node = node_kernel_ms(times.eager_s, g.kernels["k_op_ptr"], g.kernels["k_op_idx"], g.x.shape[0], keep)
    return View(times.eager_ms + h2d_ms, times.bound_ms + h2d_ms, times.floor_ms, h2d_ms, node[g.kept])


# --------------------------------------------------------------------------------------------------
# Model inputs
# --------------------------------------------------------------------------------------------------

SCHEMA = "preflight.public_residual/1"
DEVICE_NAMES = ("log_fp32_tflops", "log_tensor_tflops", "log_bandwidth_gbs", "log_sms")
KERNEL_NAMES = ("log_estimate_ms", "log_bound_ms", "floor_share", "h2d_share")


def feature_schema(kind: str) -> dict:
    """The input layout of a predictor kind ("residual": ours; "dippm": the ablation), stored in its artifact."""
    from passes.features import FEATURE_COLUMNS, NUMERIC_COLUMNS

    if kind == "residual":
        nodes = [*FEATURE_COLUMNS, "log_kernel_us"]
        graph = [*STATIC_NAMES, *DEVICE_NAMES, *(f"precision={p}" for p in PRECISIONS), *HARNESS_FLAGS, *KERNEL_NAMES]
        return {"nodes": nodes, "graph": graph, "edges": "dataflow", "target": "log(measured / kernel estimate)"}
    nodes = [f"dippm_op={i}" for i in range(16)] + list(NUMERIC_COLUMNS)
    graph = [*DIPPM_STATIC, *DEVICE_NAMES, *(f"precision={p}" for p in PRECISIONS), *HARNESS_FLAGS]
    return {"nodes": nodes, "graph": graph, "edges": "chain", "target": "log(measured ms)"}


def device_features(device_key: str, precision: str) -> list[float]:
    """log10 FP32 TFLOP/s, log10 of the tensor-core rate the precision uses, log10 GB/s, log10 SMs of a device
    (a MIG slice: its share)."""
    import math

    from .devices import get_device

    d = get_device(device_key)
    tensor = d.peak_flops.get("tf32" if precision == "tf32" else "fp16" if "16" in precision else "fp32")
    return [
        math.log10(d.peak_flops["fp32"] / 1e12),
        math.log10((tensor or d.peak_flops["fp32"]) / 1e12),
        math.log10(d.bandwidth / 1e9),
        math.log10(d.sms),
    ]


def static_vector(static: dict, names=STATIC_NAMES) -> np.ndarray:
    """log1p of the graph's static features, (len(names),) float32: the space of the OOD distance too."""
    return np.array([np.log1p(max(float(static.get(k, 0.0)), 0.0)) for k in names], dtype=np.float32)


@dataclass
class Item:
    """Model inputs of one row for one predictor kind."""

    nodes: np.ndarray  # (|V|, F)
    edge_index: np.ndarray  # (2, |E|)
    graph: np.ndarray  # (G,)
    target: float  # log(measured / estimate) or log(measured); NaN when unknown
    estimate_ms: float
    bound_ms: float
    weight: float = 1.0  # of the row in the training loss (`train_items`, `FitConfig.family_balanced`)


def make_item(
    kind: str, g: Graph, view: View, device_key: str, precision: str, harness: dict, measured_ms: float
) -> Item:
    """The inputs of `kind` ("residual" or "dippm") for a graph on a device, in a precision, under a harness."""
    import math

    flags = [float(harness.get(f, 0)) for f in HARNESS_FLAGS]
    onehot = [float(precision == p) for p in PRECISIONS]
    dev = device_features(device_key, precision)
    if kind == "residual":
        nodes = np.concatenate([g.x[g.kept], np.log10(1.0 + view.node_ms[:, None] * 1e3).astype(np.float32)], axis=1)
        est = max(view.estimate_ms, 1e-6)
        kern = [math.log10(est), math.log10(max(view.bound_ms, 1e-9)), view.floor_ms / est, view.h2d_ms / est]
        graph = np.concatenate([static_vector(g.static), dev, onehot, flags, kern]).astype(np.float32)
        target = math.log(measured_ms / est) if measured_ms > 0 else math.nan
        return Item(nodes, g.kernel_edges, graph, target, view.estimate_ms, view.bound_ms)
    from .train import DIPPM, edges, node_matrix

    nodes = node_matrix(g.x[g.kept], DIPPM)
    graph = np.concatenate([static_vector(g.static, DIPPM_STATIC), dev, onehot, flags]).astype(np.float32)
    target = math.log(measured_ms) if measured_ms > 0 else math.nan
    return Item(nodes, edges(g.edge_index, nodes.shape[0], DIPPM), graph, target, view.estimate_ms, view.bound_ms)


# --------------------------------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------------------------------

QUANTILES = (0.05, 0.5, 0.95)
CLIP = 5.0  # standardised inputs are clipped to +-CLIP


@dataclass
class FitConfig:
    """Training settings (the defaults train the whole set in minutes on 2 CPU cores: bench/bench_public_train.py)."""

    epochs: int = 30
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 1e-4
    hidden: int = 48
    seed: int = 0
    calibration_fraction: float = 0.15
    #: weigh every (family, GPU) cell equally in the training loss (`train_items`) instead of every row: the
    #: evaluation and the default rule are per family and GPU, and the rows are not (3 per H100 family, 24-112 per
    #: A100 family)
    family_balanced: bool = False
    #: networks in the ensemble (`fit`): K > 1 trains K networks with seeds seed .. seed + K - 1 on the same items
    #: (one shared calibration split) and predicts the mean of their quantiles in target space; 1 is one network.
    #: The shipped checkpoint is an ensemble of 5: one network's seed moved a held-out family's median APE by 7 to
    #: 21 points, five by 2.5 to 8.4 (docs/predictor-training.md, "Seed variance and an ensemble over seeds")
    ensemble: int = 5


@dataclass
class Fitted:
    """A trained predictor of one kind: network(s), input standardisation, interval calibration, OOD reference.

    An ensemble (`FitConfig.ensemble` K > 1) holds its K networks in `members` (`model` is the first); they share
    the standardisation, and `predict_target` averages their quantiles."""

    kind: str
    model: object  # predictor.model.CostPredictor (an ensemble's first member)
    node_mean: np.ndarray
    node_std: np.ndarray
    graph_mean: np.ndarray
    graph_std: np.ndarray
    y_mean: float
    y_std: float
    calibration: float = 1.0
    #: OOD reference: the training graphs' `static_vector`s (N, S), their mean and std, and the distance threshold
    ood_graphs: np.ndarray | None = None
    ood_mean: np.ndarray | None = None
    ood_std: np.ndarray | None = None
    ood_threshold: float = float("inf")
    losses: list = field(default_factory=list)
    info: dict = field(default_factory=dict)  # from the artifact: training_data, families, n_rows
    members: list = field(default_factory=list)  # every network of an ensemble ([] for a single network)

    @property
    def networks(self) -> list:
        """The networks whose predictions are averaged: the ensemble's members, or [model]."""
        return list(self.members) if self.members else [self.model]

    def _data(self, items: list[Item]):
        import torch
        from torch_geometric.data import Data

        out = []
        for it in items:
            # standardised inputs clipped to +-CLIP: a feature (almost) constant over the training rows must not
            # blow a new family's value up to thousands of standard deviations
            x = torch.from_numpy(np.clip((it.nodes - self.node_mean) / self.node_std, -CLIP, CLIP).astype(np.float32))
            z = np.clip((it.graph - self.graph_mean) / self.graph_std, -CLIP, CLIP).astype(np.float32)
            gv = torch.from_numpy(z).unsqueeze(0)
            z = (it.target - self.y_mean) / self.y_std
            y = torch.tensor([[z, float("nan"), float("nan")]], dtype=torch.float32)
            w = torch.tensor([it.weight], dtype=torch.float32)
            edges = torch.from_numpy(np.ascontiguousarray(it.edge_index))
            out.append(Data(x=x, edge_index=edges, static=gv, y=y, w=w))
        return out

    def member_z(self, items: list[Item]) -> np.ndarray:
        """(K, N, 3): each network's 5%, 50%, 95% quantiles of the standardised target, sorted, not calibrated."""
        import torch
        from torch_geometric.loader import DataLoader

        nets = self.networks
        if not items:
            return np.zeros((len(nets), 0, 3))
        data = self._data(items)
        out = []
        with torch.no_grad():
            for net in nets:
                net.eval()
                batches = DataLoader(data, batch_size=64)
                outs = [net(b.x, b.edge_index, b.batch, b.static)[:, 0, :].numpy() for b in batches]
                out.append(np.sort(np.concatenate(outs), axis=1))
        return np.stack(out)

    def predict_target(self, items: list[Item]) -> np.ndarray:
        """(N, 3): the 5%, 50%, 95% quantiles of the target (interval calibrated); an ensemble's are the mean of its
        members' (the median: the mean of their log(measured / estimate) medians)."""
        z = self.member_z(items).mean(axis=0)
        mid = z[:, 1:2]
        z = mid + (z - mid) * self.calibration
        return z * self.y_std + self.y_mean

    def predict_ms(self, items: list[Item]) -> np.ndarray:
        """(N, 3) latency quantiles in ms."""
        t = self.predict_target(items)
        if self.kind == "residual":
            return np.exp(t) * np.array([it.estimate_ms for it in items])[:, None]
        return np.exp(t)

    def distance(self, static: dict) -> float:
        """Euclidean distance, in the training graphs' standardised `static_vector` space, to the nearest one."""
        if self.ood_graphs is None or not len(self.ood_graphs):
            return 0.0
        v = (static_vector(static) - self.ood_mean) / self.ood_std
        ref = (self.ood_graphs - self.ood_mean) / self.ood_std
        return float(np.sqrt(((ref - v) ** 2).sum(axis=1)).min())


def _weighted_pinball(pred, y, w):
    """Pinball loss of the first target (pred (B, T, Q), y (B, T): the only measured column), each row weighted by
    w (B,): sum(w x mean over quantiles) / sum(w)."""
    import torch

    q = torch.tensor(QUANTILES, dtype=pred.dtype).view(1, -1)
    diff = y[:, :1] - pred[:, 0, :]
    per_row = torch.maximum(q * diff, (q - 1) * diff).mean(dim=1)
    return (w * per_row).sum() / w.sum()


def _std(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = a.mean(axis=0)
    s = a.std(axis=0)
    return m.astype(np.float32), np.where(s < 1e-6, 1.0, s).astype(np.float32)


def fit(items: list[Item], kind: str, cfg: FitConfig | None = None, log=None) -> Fitted:
    """Train one predictor on `items` (a random `calibration_fraction`, drawn with `cfg.seed`, is held out to
    calibrate the 90% interval by split conformal scaling).

    `cfg.ensemble` K > 1: K networks on the same training items and standardisation, network i seeded with
    `cfg.seed + i` (initial weights, shuffling), none trained on the calibration items; the interval of their mean
    quantiles is calibrated on those items. K = 1 is the single network, as before the option existed."""
    import math

    import torch

    from .model import CostPredictor, fit_epochs, pinball_loss

    cfg = cfg or FitConfig()
    if cfg.ensemble < 1:
        raise PublicTrainError(f"ensemble of {cfg.ensemble} networks: give 1 or more")
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(items))
    n_cal = int(round(cfg.calibration_fraction * len(items))) if len(items) >= 20 else 0
    cal, tr = [items[i] for i in order[:n_cal]], [items[i] for i in order[n_cal:]]
    nm, ns = _std(np.concatenate([it.nodes for it in tr]))
    gm, gs = _std(np.stack([it.graph for it in tr]))
    ys = np.array([it.target for it in tr])
    fitted = Fitted(kind, None, nm, ns, gm, gs, float(ys.mean()), float(max(ys.std(), 1e-6)))
    data = fitted._data(tr)

    def loss_of(pred, b):
        return _weighted_pinball(pred, b.y, b.w) if cfg.family_balanced else pinball_loss(pred, b.y, QUANTILES)

    nets, losses = [], []
    for i in range(cfg.ensemble):
        seed = cfg.seed + i
        torch.manual_seed(seed)
        model = CostPredictor(
            tr[0].nodes.shape[1],
            tr[0].graph.shape[0],
            hidden=cfg.hidden,
            readout="mean+max+sum" if kind == "residual" else "sum",
            quantiles=QUANTILES,
        )

        def on_epoch(epoch: int, loss: float, i: int = i, seed: int = seed) -> None:
            if log and (epoch % 20 == 0 or epoch == cfg.epochs - 1):
                member = f" (member {i + 1} of {cfg.ensemble}, seed {seed})" if cfg.ensemble > 1 else ""
                log(f"{kind} epoch {epoch}{member}: loss {loss:.4f}")

        kw = {"batch_size": cfg.batch_size, "lr": cfg.lr, "weight_decay": cfg.weight_decay}
        losses.append(fit_epochs(model, data, loss_of, epochs=cfg.epochs, seed=seed, on_epoch=on_epoch, **kw))
        nets.append(model)
    fitted.model = nets[0]
    fitted.members = nets if cfg.ensemble > 1 else []
    fitted.losses = [float(np.mean(v)) for v in zip(*losses, strict=True)]  # per epoch, mean over the members
    if cal:
        t = fitted.predict_target(cal)
        y = np.array([it.target for it in cal])
        lower = np.maximum(t[:, 1] - t[:, 0], 1e-6)
        upper = np.maximum(t[:, 2] - t[:, 1], 1e-6)
        need = np.where(y >= t[:, 1], (y - t[:, 1]) / upper, (t[:, 1] - y) / lower)
        k = min(math.ceil((len(need) + 1) * 0.9) / len(need), 1.0)
        fitted.calibration = float(np.quantile(need, k))
    return fitted


# --------------------------------------------------------------------------------------------------
# The data set, the splits, the evaluation
# --------------------------------------------------------------------------------------------------


@dataclass
class Example:
    """One row with its graph id, kernel view and the inputs of both predictor kinds."""

    row: TrainRow
    gid: str
    view: View
    items: dict  # kind -> Item


def examples(rows: list[TrainRow], graphs: dict[str, Graph], kinds=("residual", "dippm")) -> list[Example]:
    """Every row with its inputs; a row whose graph is missing from the graph file is an error."""
    views: dict[tuple, View] = {}
    out = []
    for r in rows:
        gid = graph_id(*r.config)
        if gid not in graphs:
            raise PublicTrainError(
                f"no graph for {r.config} in the graph file: rebuild it (python -m analyzer.public_dataset)"
            )
        g = graphs[gid]
        key = (gid, r.device, r.precision == "tf32", bool(r.harness.get("h2d")))
        if key not in views:
            views[key] = kernel_view_of(g, r.device, r.precision, bool(r.harness.get("h2d")))
        v = views[key]
        items = {k: make_item(k, g, v, r.device, r.precision, r.harness, r.latency_ms) for k in kinds}
        out.append(Example(r, gid, v, items))
    return out


class LeakError(AssertionError):
    """A split puts one family, or one graph, on both sides."""


def train_items(exs: list[Example], kind: str) -> list[Item]:
    """The training inputs of `kind`: rows of one (graph, device, precision, harness) merged into one item whose
    target is the mean of their targets (the log of the geometric mean latency): repeated publications of one
    measurement weigh once. Each item's `weight` is n / (cells x items of its cell), a cell being one (family,
    `device_group`): under `FitConfig.family_balanced` every cell weighs the same in the loss (the weights average
    1); otherwise they are not used."""
    from collections import Counter
    from dataclasses import replace

    groups: dict[tuple, list[Example]] = {}
    for e in exs:
        key = (e.gid, e.row.device, e.row.precision, tuple(sorted(e.row.harness.items())))
        groups.setdefault(key, []).append(e)
    cell = {k: (g[0].row.family, device_group(g[0].row.device)) for k, g in groups.items()}
    count = Counter(cell.values())
    n = len(groups)
    return [
        replace(
            g[0].items[kind],
            target=float(np.mean([e.items[kind].target for e in g])),
            weight=n / (len(count) * count[cell[k]]),
        )
        for k, g in groups.items()
    ]


def check_split(train: list[Example], test: list[Example]) -> None:
    """Raise `LeakError` if a family or a graph configuration is on both sides of a split."""
    fams = {e.row.family for e in train} & {e.row.family for e in test}
    if fams:
        raise LeakError(f"families on both sides of the split: {sorted(fams)}")
    same = {e.gid for e in train} & {e.gid for e in test}
    if same:
        raise LeakError(f"{len(same)} graphs on both sides of the split (e.g. {same.pop()})")


def lofo_splits(exs: list[Example], families=None):
    """Leave-one-family-out: (family, train examples, test examples) for each family (checked by `check_split`)."""
    for fam in families or sorted({e.row.family for e in exs}):
        train = [e for e in exs if e.row.family != fam]
        test = [e for e in exs if e.row.family == fam]
        check_split(train, test)
        yield fam, train, test


def ood_reference(train: list[Example], graphs: dict[str, Graph]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(training graphs' static vectors (N, S), their mean, std) for the OOD distance."""
    ref = np.stack([static_vector(graphs[g].static) for g in sorted({e.gid for e in train})])
    m, s = _std(ref)
    return ref, m, s


def _nn_distance(ref: np.ndarray, m: np.ndarray, s: np.ndarray, v: np.ndarray) -> float:
    return float(np.sqrt((((ref - m) / s - (v - m) / s) ** 2).sum(axis=1)).min())


_FORK_STATE: dict = {}


def _fold(fam: str) -> tuple[str, list[dict], list[tuple[str, float]]]:
    """One leave-one-family-out fold (state in `_FORK_STATE`, shared with forked workers)."""
    from dataclasses import replace

    import torch

    torch.set_num_threads(1)
    exs, graphs, cfg, log = (_FORK_STATE[k] for k in ("exs", "graphs", "cfg", "log"))
    train = [e for e in exs if e.row.family != fam and trainable(e.row)]
    test = [e for e in exs if e.row.family == fam]
    check_split(train, test)
    if log:
        log(f"fold {fam}: {len(train)} train / {len(test)} test rows")
    ours = fit(train_items(train, "residual"), "residual", cfg)
    abl = fit(train_items(train, "dippm"), "dippm", replace(cfg, ensemble=1))  # the ablation: one network
    p = ours.predict_ms([e.items["residual"] for e in test])
    a = abl.predict_ms([e.items["dippm"] for e in test])[:, 1]
    ref, m, s = ood_reference(train, graphs)
    d = [_nn_distance(ref, m, s, static_vector(graphs[e.gid].static)) for e in test]
    rows = []
    for e, pi, ai, di in zip(test, p, a, d, strict=True):
        rows.append(
            {
                "source": e.row.source,
                "family": fam,
                "precision": e.row.precision,
                "device": e.row.device,
                "single_forward": e.row.single_forward,
                "measured_ms": e.row.latency_ms,
                "roofline_ms": e.view.bound_ms,
                "kernel_ms": e.view.estimate_ms,
                "graphsage_ms": float(pi[1]),
                "graphsage_lo": float(pi[0]),
                "graphsage_hi": float(pi[2]),
                "ablation_ms": float(ai),
                "distance": di,
            }
        )
    if log:
        log(f"fold {fam} done")
    return fam, rows, sorted({(e.gid, di) for e, di in zip(test, d, strict=True)})


OOD_PERCENTILE = 90.0  # the threshold: this percentile of the held-out graphs' distances over the LOFO folds


def fold_distances(exs: list[Example], graphs: dict[str, Graph]) -> dict[str, list[tuple[str, float]]]:
    """{family: sorted (graph id, OOD distance) of its held-out graphs} over every leave-one-family-out fold: the
    distance of each graph of the family to the nearest trainable graph of the other families (`ood_reference`).
    No training: a subset evaluation (`evaluate_lofo(families=...)`) takes its thresholds from every fold."""
    out = {}
    for fam in sorted({e.row.family for e in exs}):
        train = [e for e in exs if e.row.family != fam and trainable(e.row)]
        test = [e for e in exs if e.row.family == fam]
        ref, m, s = ood_reference(train, graphs)
        gids = sorted({e.gid for e in test})
        out[fam] = [(g, _nn_distance(ref, m, s, static_vector(graphs[g].static))) for g in gids]
    return out


def ood_thresholds(dist: dict[str, list[tuple[str, float]]]) -> dict[str, float]:
    """{family: its OOD threshold}: `OOD_PERCENTILE` of the other families' held-out distances (one per graph)."""
    out = {}
    for fam in dist:
        others = [d for f, v in dist.items() if f != fam for _, d in v]
        out[fam] = float(np.percentile(others, OOD_PERCENTILE)) if others else float("inf")
    return out


def evaluate_lofo(
    exs: list[Example], graphs: dict[str, Graph], cfg: FitConfig | None = None, families=None, log=None, jobs: int = 1
) -> dict:
    """Leave-one-family-out over `families` (default all): per row the measured ms, roofline bound, kernel model,
    kernel model + GraphSAGE (with its 90% interval and OOD distance) and the DIPPM-style ablation.

    Returns {"rows": [...], "thresholds": {family: threshold used for it}, "distances": {family: [...]}}.
    """
    cfg = cfg or FitConfig()
    folds = list(lofo_splits(exs, families))
    _FORK_STATE.update(exs=exs, graphs=graphs, cfg=cfg, log=log)
    if jobs > 1 and len(folds) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(jobs, len(folds)), mp_context=mp.get_context("fork")) as pool:
            results = list(pool.map(_fold, [f for f, _, _ in folds]))
    else:
        results = [_fold(f) for f, _, _ in folds]
    out_rows, evaluated = [], []
    for fam, rows_f, _ in results:
        out_rows += rows_f
        evaluated.append(fam)
    # each family's threshold from the other families' held-out distances (one value per distinct graph), over every
    # fold of `exs` even when only some are evaluated (the distances need no training)
    dist = fold_distances(exs, graphs)
    thresholds = ood_thresholds(dist)
    # the interval, widened by family (split conformal over families), from the rows before any widening
    factors, family_factor = family_factors(out_rows)
    for r in out_rows:
        inside = r["distance"] <= thresholds[r["family"]]
        r["in_distribution"] = bool(inside)
        r["final_ms"] = r["graphsage_ms"] if inside else r["kernel_ms"]
        f = factors[r["family"]]
        r["interval_factor"] = f  # the family conformal factor the interval below was widened by
        mid = math.log(r["graphsage_ms"])
        r["graphsage_lo"] = math.exp(mid - (mid - math.log(r["graphsage_lo"])) * f)
        r["graphsage_hi"] = math.exp(mid + (math.log(r["graphsage_hi"]) - mid) * f)
    return {
        "rows": out_rows,
        "thresholds": {f: thresholds[f] for f in evaluated},
        "distances": {f: [d for _, d in dist[f]] for f in evaluated},
        "all_distances": {f: [d for _, d in v] for f, v in dist.items()},
        "family_factor": family_factor,
    }


def family_factors(rows: list[dict]) -> tuple[dict[str, float], float]:
    """Split conformal over families, on held-out rows whose intervals are not widened yet: ({family: the factor
    that makes 90% of the *other* families' rows fall inside their interval}, the factor over all rows: what the
    shipped checkpoint's interval is widened by, for a family none of them is)."""
    fams = sorted({r["family"] for r in rows})
    per = {f: conformal_factor([interval_need(r) for r in rows if r["family"] != f]) for f in fams}
    return per, conformal_factor([interval_need(r) for r in rows])


def interval_need(r: dict) -> float:
    """The factor a held-out row's 5%..95% half-width (log scale) needs to cover its measurement."""
    mid, y = math.log(r["graphsage_ms"]), math.log(r["measured_ms"])
    if y >= mid:
        return (y - mid) / max(math.log(r["graphsage_hi"]) - mid, 1e-6)
    return (mid - y) / max(mid - math.log(r["graphsage_lo"]), 1e-6)


def conformal_factor(needs: list[float], coverage: float = 0.9) -> float:
    """Split-conformal factor: the ceil((n+1) coverage)/n quantile of the needs (1 when there are none)."""
    if not needs:
        return 1.0
    k = min(math.ceil((len(needs) + 1) * coverage) / len(needs), 1.0)
    return max(float(np.quantile(needs, k)), 1.0)


MODELS = (
    ("roofline bound", "roofline_ms"),
    ("kernel model", "kernel_ms"),
    ("kernel model + GraphSAGE", "graphsage_ms"),
    ("+ OOD fallback", "final_ms"),
    ("ablation: DIPPM-style", "ablation_ms"),
)


def _ape(rows: list[dict], key: str) -> np.ndarray:
    return np.array([abs(r[key] - r["measured_ms"]) / r["measured_ms"] * 100 for r in rows])


def device_group(device_key: str) -> str:
    """The GPU a row ran on, for the tables: "A100" for an A100 of any memory size and its MIG slices, "H100"."""
    return device_key.split(":")[0].split("-")[0].upper()


#: When `preflight predict` may answer with the GraphSAGE by default (`default_decision`), fixed before the table was
#: made: held out, over the single-forward rows of a GPU, the GraphSAGE with the OOD fallback has a lower median APE
#: than the kernel model, and on no family of that GPU is its median APE more than this many percentage points
#: above the kernel model's.
DEFAULT_TOLERANCE_PP = 5.0


def default_decision(per_family_device: dict, per_device: dict, tolerance_pp: float = DEFAULT_TOLERANCE_PP) -> dict:
    """{GPU: {"on": bool, "kernel": median APE %, "graphsage": median APE % (+ OOD fallback), "blocking": [family,
    ...]}} of the rule `DEFAULT_TOLERANCE_PP` states, from `summarise`'s single-forward blocks."""
    out = {}
    for dev, b in per_device.items():
        km, ours = b["kernel model"]["median_ape"], b["+ OOD fallback"]["median_ape"]
        blocking = []
        for key, fb in per_family_device.items():
            fam, fdev = key.rsplit(" / ", 1)
            if fdev != dev:
                continue
            k, o = fb["kernel model"]["median_ape"], fb["+ OOD fallback"]["median_ape"]
            if o > k + tolerance_pp:
                blocking.append(f"{fam} ({k:.1f}% -> {o:.1f}%)")
        out[dev] = {"on": ours < km and not blocking, "kernel": km, "graphsage": ours, "blocking": blocking}
    return out


def summarise(rows: list[dict]) -> dict:
    """Per (family, GPU, precision) and per family: n, MAPE and median APE of each model, coverage of the interval;
    and over the single-forward rows, per family, per (family, GPU) and per GPU: the done-when figures and the
    default rule (`default_decision`)."""

    def block(rs: list[dict]) -> dict:
        doc = {"n": len(rs)}
        for name, key in MODELS:
            ape = _ape(rs, key)
            doc[name] = {"mape": float(ape.mean()), "median_ape": float(np.median(ape))}
        cov = [r["graphsage_lo"] <= r["measured_ms"] <= r["graphsage_hi"] for r in rs]
        doc["coverage90"] = float(np.mean(cov) * 100)
        doc["in_distribution"] = float(np.mean([r["in_distribution"] for r in rs]) * 100)
        return doc

    def better(blocks: dict, name: str) -> list[str]:
        return [k for k, b in blocks.items() if b[name]["median_ape"] < b["kernel model"]["median_ape"]]

    def grouped(rs: list[dict], key) -> dict:
        groups: dict[tuple, list] = {}
        for r in rs:
            groups.setdefault(key(r), []).append(r)
        return {" / ".join(k): block(v) for k, v in sorted(groups.items())}

    per_fp = grouped(rows, lambda r: (r["family"], device_group(r["device"]), r["precision"]))
    per_family = grouped(rows, lambda r: (r["family"],))
    single = [r for r in rows if r["single_forward"]]
    sf_family = grouped(single, lambda r: (r["family"],))
    sf_fd = grouped(single, lambda r: (r["family"], device_group(r["device"])))
    sf_dev = grouped(single, lambda r: (device_group(r["device"]),))
    return {
        "per_family_precision": per_fp,
        "per_family": per_family,
        "single_forward": {
            "all": block(single) if single else None,
            "per_device": sf_dev,
            "per_family": sf_family,
            "per_family_device": sf_fd,
            "families": len(sf_family),
            "beats_kernel_model": better(sf_family, "+ OOD fallback"),
            "graphsage_beats_kernel_model": better(sf_family, "kernel model + GraphSAGE"),
            "family_device_beats_kernel_model": better(sf_fd, "+ OOD fallback"),
            "default": default_decision(sf_fd, sf_dev),
        },
    }


def _cell(b: dict, name: str) -> str:
    return f"{b[name]['mape']:.1f} / {b[name]['median_ape']:.1f}"


def table_markdown(summary: dict, meta: dict) -> str:
    """EVAL.md: the leave-one-family-out table."""
    names = [n for n, _ in MODELS]
    head = "| family / GPU | rows | " + " | ".join(names) + " | 90% interval covers | in distribution |"
    sep = "|---|---:|" + "---:|" * (len(names) + 2)

    def line(key: str, b: dict) -> str:
        return (
            f"| {key} | {b['n']} | "
            + " | ".join(_cell(b, n) for n in names)
            + f" | {b['coverage90']:.0f}% | {b['in_distribution']:.0f}% |"
        )

    sf = summary["single_forward"]
    lines = [
        f"# {meta['name']}: leave-one-family-out on {meta['training_data']}",
        "",
        f"Made by `python -m predictor.public_train evaluate` ({meta['created']}): {meta['n_rows']} rows, "
        f"{len(meta['families'])} families ({', '.join(meta['families'])}), data digest {meta['data_digest']}, "
        f"kernel model TF32 matmuls: {'yes' if meta['tf32_matmul'] else 'no (FP32 CUDA cores)'}. Each family is "
        "predicted by models trained on the other families only (a family measured on both GPUs is held out on both "
        "at once). Cells: MAPE % / median APE %. `+ OOD fallback` is what `preflight predict` answers: the GraphSAGE "
        "inside the distance threshold, the kernel model beyond it (docs/predictor-training.md).",
        "",
        "## Single-forward rows (the done-when set), per family and GPU",
        "",
        head,
        sep,
        *(line(k, b) for k, b in sf["per_family_device"].items()),
        *(line(f"**all {k}**", b) for k, b in sf.get("per_device", {}).items()),
        *([line("**all**", sf["all"])] if sf["all"] else []),
        "",
        "Families where kernel model + GraphSAGE (with the OOD fallback) has a lower median APE than the kernel "
        "model: "
        f"{len(sf['beats_kernel_model'])} of {sf['families']} ({', '.join(sf['beats_kernel_model']) or 'none'}); "
        f"the GraphSAGE alone: {len(sf['graphsage_beats_kernel_model'])} "
        f"({', '.join(sf['graphsage_beats_kernel_model']) or 'none'}). Per family and GPU: "
        f"{len(sf.get('family_device_beats_kernel_model', []))} of {len(sf.get('per_family_device', {}))}.",
        "",
        f"Default rule (`DEFAULT_TOLERANCE_PP` = {DEFAULT_TOLERANCE_PP:g}): the GraphSAGE answers by default on a GPU "
        "where, held out, its median APE with the OOD fallback is below the kernel model's over the GPU's "
        f"single-forward rows and no family of the GPU is more than {DEFAULT_TOLERANCE_PP:g} percentage points worse "
        "than the kernel model:",
        "",
    ]
    for dev, d in sf.get("default", {}).items():
        lines.append(
            f"- {dev}: {'**on**' if d['on'] else '**off**'} (median APE kernel model {d['kernel']:.1f}%, "
            f"+ GraphSAGE {d['graphsage']:.1f}%)"
            + (f"; blocked by {len(d['blocking'])}: {', '.join(d['blocking'])}" if d["blocking"] else "")
        )
    lines += ["", "## Every row, per family, GPU and precision", "", head.replace("GPU", "GPU / precision"), sep]
    lines += [line(k, b) for k, b in summary["per_family_precision"].items()]
    lines += ["", "## Left out of the single-forward rows", ""]
    for reason, n in meta.get("left_out", {}).items():
        lines.append(f"- {n} rows: {reason}")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Artifacts and the command line
# --------------------------------------------------------------------------------------------------

CHECKPOINT_NAME = "a100-80gb@1"
#: The GPUs the training rows ran on (a MIG slice of an A100-40GB counts as its GPU): the checkpoint answers on these
#: (`meta.json` "devices"), and is not transferred to others.
MEASURED_DEVICES = ("a100-40gb", "a100-80gb", "h100-80gb")
#: How `training_data` names the rows of each GPU (`describe_training`).
SOURCES = {
    "A100": "public A100 measurements (NVIDIA DeepLearningExamples, MIGProfiler)",
    "H100": "own H100 measurements (predictor.measure, eager)",
}


def describe_training(rows: list[TrainRow]) -> str:
    """What a predictor trained on `rows` rests on, per GPU: "public A100 measurements (...), 9 families; own H100
    measurements (...), 34 families" (a family measured on both GPUs counts on each)."""
    by_gpu: dict[str, set] = {}
    for r in rows:
        by_gpu.setdefault(device_group(r.device), set()).add(r.family)
    return "; ".join(f"{SOURCES.get(g, g + ' measurements')}, {len(f)} families" for g, f in sorted(by_gpu.items()))


def trainable(row: TrainRow) -> bool:
    """Rows the predictor trains on: all but the host-dominated ones (QuartzNet: the printed stage is unknown)."""
    return not row.reason.startswith("host-dominated")


def save_artifact(fitted: Fitted, directory: str | Path, meta: dict) -> None:
    """`model.pt` (tensors only: a single network's state dict, or an ensemble's {"0": state dict, ..., "K-1": ...})
    and `meta.json` (schema, inputs, normalisation, OOD reference; "ensemble": K for K > 1)."""
    import torch

    from passes.features import FEATURE_VERSION

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    nets = fitted.networks
    if len(nets) == 1:
        torch.save(nets[0].state_dict(), directory / "model.pt")
    else:
        torch.save({str(i): n.state_dict() for i, n in enumerate(nets)}, directory / "model.pt")
    doc = {
        "schema": SCHEMA,
        "feature_version": FEATURE_VERSION,
        "feature_schema": feature_schema(fitted.kind),
        "kind": fitted.kind,
        **meta,
        **({"ensemble": len(nets)} if len(nets) > 1 else {}),
        "model": fitted.model.config,
        "normaliser": {
            "node_mean": fitted.node_mean.tolist(),
            "node_std": fitted.node_std.tolist(),
            "graph_mean": fitted.graph_mean.tolist(),
            "graph_std": fitted.graph_std.tolist(),
            "y_mean": fitted.y_mean,
            "y_std": fitted.y_std,
        },
        "calibration": fitted.calibration,
        "ood": {
            "space": "log1p of the static features " + ", ".join(STATIC_NAMES) + ", standardised",
            "graphs": np.round(fitted.ood_graphs, 5).tolist(),
            "mean": fitted.ood_mean.tolist(),
            "std": fitted.ood_std.tolist(),
            "threshold": fitted.ood_threshold,
        },
    }
    (directory / "meta.json").write_text(json.dumps(doc, indent=1) + "\n")


def load_artifact(directory: str | Path, meta: dict | None = None) -> tuple[Fitted, dict]:
    """Load an artifact of `save_artifact`; one made for another schema or input layout is refused with
    `predictor.train.ArtifactError` (one line)."""
    import pickle

    import torch

    from .model import restore
    from .train import ArtifactError

    directory = Path(directory)
    if meta is None:
        try:
            meta = json.loads((directory / "meta.json").read_text())
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"cannot load the predictor in {directory}: {exc}") from None
    retrain = "retrain it (python -m predictor.public_train train)"
    if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
        got = meta.get("schema") if isinstance(meta, dict) else None
        raise ArtifactError(
            f"predictor {directory.name} has schema {got!r}, this preflight reads {SCHEMA!r}: {retrain}"
        )
    from passes.features import FEATURE_VERSION

    if meta.get("feature_version") != FEATURE_VERSION:
        raise ArtifactError(
            f"predictor {directory.name} was trained on features {meta.get('feature_version')}, "
            f"this preflight computes {FEATURE_VERSION}: {retrain}"
        )
    kind = meta.get("kind")
    if kind not in ("residual", "dippm") or meta.get("feature_schema") != feature_schema(kind):
        raise ArtifactError(
            f"predictor {directory.name} was trained on another input layout than this preflight computes: {retrain}"
        )
    k = meta.get("ensemble", 1)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ArtifactError(f"predictor {directory.name} has ensemble {k!r} in meta.json (a count >= 1): {retrain}")
    try:
        state = torch.load(directory / "model.pt", weights_only=True, map_location="cpu")
        m, nz, ood = meta["model"], meta["normaliser"], meta["ood"]
        if k > 1:
            # the count first: a meta.json naming 10**12 networks must not build 10**12 names
            if not isinstance(state, dict) or len(state) != k or set(state) != {str(i) for i in range(k)}:
                raise ArtifactError(
                    f"predictor {directory.name}: model.pt does not hold the {k} networks meta.json names: {retrain}"
                )
            members = [restore(m, state[str(i)]) for i in range(k)]
        else:
            members = [restore(m, state)]
        model = members[0]
        arr = lambda v: np.asarray(v, dtype=np.float32)  # noqa: E731
        fitted = Fitted(
            kind,
            model,
            arr(nz["node_mean"]),
            arr(nz["node_std"]),
            arr(nz["graph_mean"]),
            arr(nz["graph_std"]),
            float(nz["y_mean"]),
            float(nz["y_std"]),
            float(meta["calibration"]),
            arr(ood["graphs"]),
            arr(ood["mean"]),
            arr(ood["std"]),
            float(ood["threshold"]),
            members=members if k > 1 else [],
        )
    except ArtifactError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise ArtifactError(f"cannot load the predictor in {directory}: {type(exc).__name__}: {exc}") from None
    fitted.info = {k: meta.get(k) for k in ("training_data", "families", "n_rows", "devices")}
    return fitted, meta


def left_out_counts(rows: list[TrainRow]) -> dict[str, int]:
    """Rows not in the single-forward evaluation, per reason (mapped rows, and the MIG rows not used)."""
    out: dict[str, int] = {}
    for r in rows:
        if not r.single_forward:
            out[r.reason] = out.get(r.reason, 0) + 1
    for reason, n in mig_rows()[1].items():
        out[f"MIGProfiler: {reason} (not used at all)"] = n
    for reason, n in h100_rows()[1].items():
        out[f"{reason} (not used at all)"] = n
    for reason, n in not_used_counts().items():
        out[f"{reason} (not used at all)"] = n
    from .public_data import LeftOut

    dle_left = sum(isinstance(m, LeftOut) for m in map_rows(load_rows()))
    out["DLE rows not mapped to a zoo configuration (docs/public-data.md: pipelines, generation, unbuilt)"] = dle_left
    return out


def train_final(exs: list[Example], graphs: dict[str, Graph], thresholds: list[float] | None, cfg: FitConfig, log=None):
    """The shipped predictor: trained on every trainable row, OOD reference on all their graphs."""
    train = [e for e in exs if trainable(e.row)]
    fitted = fit(train_items(train, "residual"), "residual", cfg, log=log)
    ref, m, s = ood_reference(train, graphs)
    fitted.ood_graphs, fitted.ood_mean, fitted.ood_std = ref, m, s
    if thresholds:
        fitted.ood_threshold = float(np.percentile(thresholds, OOD_PERCENTILE))
    return fitted, train


def _count(text: str) -> int:
    """An argparse type: an integer >= 1 (else argparse's usage line and exit code 2)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of 1 or more")
    return n


def main(argv: list[str] | None = None) -> None:
    """python -m predictor.public_train {train,evaluate} [--out DIR] [--families F,...] [--epochs N]"""
    import argparse
    import sys
    import time
    from datetime import date

    ap = argparse.ArgumentParser(description="Train / evaluate the GraphSAGE on public A100 and own H100 measurements.")
    ap.add_argument("command", choices=("train", "evaluate"))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "checkpoints" / CHECKPOINT_NAME)
    ap.add_argument("--graphs", type=Path, default=GRAPHS_PATH)
    ap.add_argument("--families", default=None, help="evaluate: only these held-out families (comma-separated)")
    ap.add_argument("--epochs", type=int, default=FitConfig.epochs)
    ap.add_argument("--jobs", type=int, default=2, help="evaluate: folds trained in parallel processes")
    ap.add_argument(
        "--ensemble",
        type=_count,
        default=FitConfig.ensemble,
        help="networks per fit (seeds seed .. seed + K - 1), the prediction the mean of theirs (FitConfig.ensemble)",
    )
    ap.add_argument("--seed", type=int, default=FitConfig.seed, help="the seed of the fit (FitConfig.seed)")
    ap.add_argument(
        "--family-balanced",
        action=argparse.BooleanOptionalAction,
        default=FitConfig.family_balanced,
        help="weigh every (family, GPU) equally in the training loss (FitConfig.family_balanced)",
    )
    args = ap.parse_args(argv)
    import torch

    # one thread: on the shared 2-core machine the final fit took 12.0 s with one and 202.5 s with two (intra-op
    # threads of these small graphs wait on each other; 2026-11-26, load average 2-3)
    torch.set_num_threads(1)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    try:
        graphs = load_graphs(args.graphs)
        rows = training_rows()
        exs = examples(rows, graphs)
    except PublicTrainError as exc:
        sys.exit(f"error: {exc}")
    cfg = FitConfig(epochs=args.epochs, family_balanced=args.family_balanced, ensemble=args.ensemble, seed=args.seed)
    t0 = time.perf_counter()
    meta = {
        "name": args.out.name,
        "created": date.today().isoformat(),
        "devices": list(MEASURED_DEVICES),
        "training_data": describe_training([r for r in rows if trainable(r)]),
        "data_digest": data_digest(rows, args.graphs),
        "tf32_matmul": tf32_supported(),
        "epochs": cfg.epochs,
        "family_balanced": cfg.family_balanced,
        "seed": cfg.seed,
    }
    if args.command == "train":
        prev = {}
        try:
            prev = json.loads((args.out / "meta.json").read_text())
        except (OSError, ValueError):
            pass
        fitted, train = train_final(exs, graphs, None, cfg, log)
        if prev.get("ood", {}).get("threshold") is not None:  # keep what the last evaluation set
            fitted.ood_threshold = float(prev["ood"]["threshold"])
        fitted.calibration *= float(prev.get("family_factor", 1.0))
        meta["family_factor"] = float(prev.get("family_factor", 1.0))
        meta["default_devices"] = list(prev.get("default_devices", []))  # what the last evaluation decided
        meta |= {"families": sorted({e.row.family for e in train}), "n_rows": len(train), "n_samples": len(train)}
        save_artifact(fitted, args.out, meta)
        log(f"trained on {len(train)} rows in {time.perf_counter() - t0:.0f} s -> {args.out}")
        return
    fams = args.families.split(",") if args.families else None
    ev = evaluate_lofo(exs, graphs, cfg, fams, log, jobs=args.jobs)
    summary = summarise(ev["rows"])
    all_d = [d for v in ev["all_distances"].values() for d in v]
    fitted, train = train_final(exs, graphs, all_d, cfg, log)
    fitted.calibration *= ev["family_factor"]  # widened for unseen families (evaluate_lofo)
    meta["family_factor"] = ev["family_factor"]
    meta |= {
        "families": sorted({e.row.family for e in train}),
        "n_rows": len(train),
        "n_samples": len(train),
        "evaluated_families": sorted(ev["distances"]),
        # the GPUs where `preflight predict` answers with it by default (`default_decision`, predictor.predict)
        "default_devices": [
            k for k in MEASURED_DEVICES if summary["single_forward"]["default"].get(device_group(k), {}).get("on")
        ]
        if fams is None
        else [],
        "ood_threshold": fitted.ood_threshold,
        "left_out": left_out_counts(rows),
        "evaluation": {"single_forward": {k: v for k, v in summary["single_forward"].items() if k != "per_family"}},
    }
    save_artifact(fitted, args.out, meta)
    (args.out / "EVAL.md").write_text(table_markdown(summary, meta))
    (args.out / "eval.json").write_text(
        json.dumps({"summary": summary, "thresholds": ev["thresholds"], "rows": ev["rows"]}, indent=1) + "\n"
    )
    log(f"evaluated and trained in {time.perf_counter() - t0:.0f} s -> {args.out}/EVAL.md")


if __name__ == "__main__":
    main()


# --------------------------------------------------------------------------------------------------
# Prediction on a user's analysis (predictor.predict)
# --------------------------------------------------------------------------------------------------


def precision_of(runtime: dict, ops) -> str:
    """The `PRECISIONS` entry of a user's prediction: float32 -> "tf32" when float32 matmuls run on TF32 tensor
    cores (`runtime["tf32_matmul"]`), else "fp32"; float16 / bfloat16 -> "amp-fp16" / "amp-bf16" when some
    compute stays float32 (autocast), else "fp16" (bfloat16 without float32 ops: "amp-bf16", the nearest)."""
    dtype = runtime.get("dtype", "float32")
    if dtype == "float32":
        return "tf32" if runtime.get("tf32_matmul") else "fp32"
    if dtype == "bfloat16":
        return "amp-bf16"
    live = [c for c in ops if not c.folded and c.outputs and c.category not in ("data_movement",)]
    mixed = any(c.output.dtype == "float32" for c in live)
    return "amp-fp16" if dtype == "float16" and mixed else "fp16"


def predict_analysis(fitted: Fitted, analysis, device_key: str, precision: str) -> tuple[np.ndarray, float, float]:
    """(latency quantiles (3,) in ms, OOD distance, kernel-model estimate in ms) of an analysis on a device, under
    an eager single forward (no harness terms)."""
    from .devices import get_device
    from .kernel_model import kernel_arrays

    kernels = analysis.kernels
    ptr = np.zeros(len(kernels) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(k.ops) for k in kernels])
    idx = np.array([i for k in kernels for i in k.ops], dtype=np.int64)
    g = Graph(
        config=("", 0, ""),
        x=np.asarray(analysis.x, dtype=np.float32),
        edge_index=np.asarray(analysis.edge_index, dtype=np.int64),
        static=dict(analysis.static_features),
        ops={},
        kernels={"k_op_ptr": ptr, "k_op_idx": idx},
        input_bytes=0,
    )
    times = kernel_times(kernel_arrays(kernels), get_device(device_key), precision == "tf32")
    view = view_of_times(g, times)
    item = make_item("residual", g, view, device_key, precision, {}, float("nan"))
    q = fitted.predict_ms([item])[0]
    return q, fitted.distance(g.static), view.estimate_ms
