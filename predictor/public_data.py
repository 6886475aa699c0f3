"""Map the rows of NVIDIA DeepLearningExamples' published A100 tables (``data/public-models/dle-a100.jsonl``) to zoo
configurations preflight can analyse, or say why a row is left out.

Every row becomes either a :class:`MappedRow` (a zoo spec, a batch, the float dtype of the graph, the precision
mode the row ran in, the device key, the measured milliseconds per batch, what the timed loop holds, and the
row's comparability grade) or a :class:`LeftOut` with its reason (a generation or multi-model pipeline, a family
the zoo cannot build faithfully, no latency and no throughput). A row is mapped when what it timed is one forward
pass of a model the zoo builds as NVIDIA's code does, whatever else the loop holds (host work, Triton, CUDA
graphs: said in ``timed`` and ``comparability``, for the caller to model or filter). Plain Python: no TVM, no torch.

Example:
    >>> from predictor.public_data import load_rows, map_rows
    >>> results = map_rows(load_rows())
    >>> sum(isinstance(r, MappedRow) for r in results)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_PATH",
    "LeftOut",
    "MappedRow",
    "PublicDataError",
    "load_rows",
    "map_row",
    "map_rows",
    "usable_per_family",
]

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "data" / "public-models" / "dle-a100.jsonl"


class PublicDataError(ValueError):
    """A row of the public data file is malformed (one line, names the row)."""


@dataclass(frozen=True)
class MappedRow:
    """One published row as a zoo configuration.

    Attributes:
        index: 0-based line of the row in the file.
        model: The row's ``model`` (the DLE family as printed).
        spec: Zoo spec, e.g. ``"nnunet_3d"`` or ``"quartznet_15x5?seq_len=208"``.
        batch: Batch size (the zoo's dimension 0).
        dtype: Float dtype to analyse the graph in: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        precision: How the row computed: ``"tf32"`` (float32 storage, TF32 tensor-core math), ``"fp32"``
            (TF32 state not stated), ``"amp-fp16"`` / ``"amp-bf16"`` (autocast: matmuls and convs in half,
            reductions and norms in float32), ``"fp16"`` (the whole model converted to half). As the family's
            inference script ran it where that differs from the table's column (``_AS_RUN``: DLRM's "AMP" is
            ``model.half()``, TFT's "mixed precision" eager rows run float32 on TF32); ``note`` says so.
        device: preflight device key, ``"a100-40gb"`` or ``"a100-80gb"``.
        latency_ms: Measured milliseconds per batch (average).
        latency_from: ``"latency_ms_avg"`` (printed) or ``"throughput"`` (``1000 * batch / throughput_per_s``,
            for rows that print only a throughput: the loop is serial, one batch after another).
        timed: What the timed loop holds besides the forward pass.
        comparability: The row's grade, ``"B"`` or ``"C"`` (see the data README).
        source: The row's source (repository @ commit : file).
        note: Anything approximate about the mapping ("" if nothing).
    """

    index: int
    model: str
    spec: str
    batch: int
    dtype: str
    precision: str
    device: str
    latency_ms: float
    latency_from: str
    timed: str
    comparability: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class LeftOut:
    """A published row preflight does not use, and why.

    Attributes:
        index: 0-based line of the row in the file.
        model: The row's ``model``.
        reason: One line.
    """

    index: int
    model: str
    reason: str


# ---------------------------------------------------------------------------- what each family's loop holds

_NNUNET_EAGER = (
    "PyTorch Lightning predict step on a fixed patch (scripts/benchmark.py --mode predict): the DALI benchmark "
    "pipeline's crop on the GPU, the Lightning step, the forward"
)
_TRITON = "Triton perf_analyzer, client end to end: request and response over shared memory, queueing, the forward"
_TIMED = {
    "DLRM": "dlrm.scripts.main inference_benchmark: the forward on batches from the binary data loader",
    "TFT": "inference.py: H2D copy of the batch and the forward (scripted submodules in the nvFuser context, a "
    "torch.cuda.synchronize inside the model)",
    "SSD300": "next(val_dataloader) (COCO, CPU DataLoader), H2D copy and normalisation, the forward (no NMS)",
    "QuartzNet": "the forward with conv masks and greedy CTC argmax; DALI CPU preprocessing may be inside (the "
    "README does not say which of the logged stages it prints)",
    "wav2vec2": "scripts/inference_benchmark.sh end to end: the forward on variable-length batches and CTC decoding",
    "FastPitch": "inference.py per batch of phrases: text to symbols on the host, the TorchScript generator "
    "(data-dependent durations)",
}

# ---------------------------------------------------------------------------- why a family is left out

_NOT_BUILT = {
    "SE(3)-Transformer": "not built: SE(3)-equivariant attention over DGL graphs (graph message passing, "
    "spherical-harmonic bases) has no plain-torch zoo model",
    "Mask R-CNN": "not built: RoIAlign and data-dependent proposal / NMS / mask post-processing (torchvision "
    "does not load with this torch build); the timed loop is end to end",
    "MoFlow": "not built: molecule generation (glow inverse over atoms and bonds, validity correction) is a "
    "multi-step pipeline, not one forward",
    "Tacotron 2": "generation pipeline: autoregressive Tacotron 2 decoder plus WaveGlow vocoder",
    "GNMT v2": "generation: full beam-search translation (encoder plus autoregressive decoder steps; the "
    "architecture is built as gnmt_v2, one teacher-forced forward)",
    "Transformer (big) NMT": "generation: beam-search translation, batch given in tokens (the architecture is "
    "built as transformer_nmt_big, one teacher-forced forward)",
    "BART-large (summarization)": "generation: beam search 6 up to 60 target tokens (the architecture is built as "
    "bart_large, one teacher-forced forward)",
    "HiFi-GAN": "pipeline: FastPitch mel generation plus the HiFi-GAN vocoder (and denoiser), TorchScript, "
    "latency printed in seconds with three decimals",
}


def _device(gpu: str) -> tuple[str, str]:
    text = gpu.upper()
    if "80GB" in text:
        return "a100-80gb", ""
    if "40GB" in text:
        return "a100-40gb", ""
    if text.startswith("A100"):
        # TFT's README: the inference table says only "DGX A100"; its other tables (same 22.11 container) are 80 GB
        return "a100-80gb", "memory size not stated; the README's other DGX A100 tables are 80 GB"
    raise PublicDataError(f"unknown GPU {gpu!r}")


def _precision(text: str) -> tuple[str, str]:
    """The row's precision text -> (graph dtype, precision mode)."""
    t = text.upper()
    if "BF16" in t:
        return "bfloat16", "amp-bf16"
    if "TF32" in t:
        return "float32", "tf32"
    if "AMP" in t or "MIXED" in t:
        return "float16", "amp-fp16"
    if "FP16" in t:
        return "float16", "fp16"
    if "FP32" in t:
        return "float32", "fp32"
    raise PublicDataError(f"unknown precision {text!r}")


# What the family's inference script does with the precision its README's table names (the source's code at the
# rows' commits), where that differs from the column: (dtype, precision, note) by the row's precision mode.
_AS_RUN = {
    # dlrm/scripts/main.py (4154bda6e1, the rows' commit), mode inference_benchmark: `if FLAGS.amp: model =
    # model.half()  # can use pure FP16 for inference`, and the dense features are `.half()`ed: no autocast
    ("DLRM", "amp-fp16"): (
        "float16",
        "fp16",
        "AMP rows run the whole model in float16 (main.py: `model = model.half()` for inference_benchmark)",
    ),
    # inference.py (92c85bffc5, 5a522b139e, 777d174008) never enters autocast nor calls .half(): the float32 model
    # runs on TF32 tensor cores (NGC containers; the README: "TF32 ... is enabled by default"); "mixed
    # precision" in the table header is how the checkpoint was trained
    ("Temporal Fusion Transformer", "amp-fp16"): (
        "float32",
        "tf32",
        "the table says mixed precision, but inference.py runs the float32 model (no autocast, no .half()): TF32",
    ),
}


def _latency(row: dict) -> tuple[float, str] | None:
    if row.get("latency_ms_avg"):
        return float(row["latency_ms_avg"]), "latency_ms_avg"
    if row.get("throughput_per_s"):
        return 1000.0 * row["batch"] / row["throughput_per_s"], "throughput"
    return None


# QuartzNet: 10 ms frames of the padded duration (+1 for the centred STFT), padded to a multiple of 16 (pad_align)
def _quartznet_frames(seconds: float) -> int:
    frames = round(seconds * 100) + 1
    return -(-frames // 16) * 16


def _spec(row: dict) -> tuple[str, str, str] | str:
    """(zoo spec, timed, note) for a row preflight maps, else the reason it is left out."""
    model, variant, size, runtime = row["model"], row["variant"], row["seq_len_or_resolution"], row["runtime"]
    if model in _NOT_BUILT:
        return _NOT_BUILT[model]
    if model == "FastPitch":
        if "+" in variant:
            return "pipeline: FastPitch mel generation plus a vocoder (WaveGlow or HiFi-GAN), TorchScript"
        note = (
            "durations fixed at 5 frames per symbol (throughput x latency of the rows: 600-675 frames per "
            "128-symbol phrase)"
        )
        if "Triton" in runtime:
            return "fastpitch_v1_1", _TRITON, note
        return "fastpitch_v1_1", _TIMED["FastPitch"], note + "; latency printed in seconds to three decimals"
    if model == "nnU-Net":
        timed = _TRITON if "Triton" in runtime else _NNUNET_EAGER
        if "3D" in variant:
            note = "3D upsampling analysed as 1x1 conv + depth-to-space (the same arithmetic as the transposed conv)"
            return "nnunet_3d", timed, note
        return "nnunet_2d", timed, ""
    if model == "DLRM":
        graphs = "CUDA graphs on" if "Graphs ON" in runtime else "CUDA graphs off"
        note = "Criteo FL=15 table sizes assumed (the 15 GB model that fits one A100-80GB; the README does not say)"
        return "dlrm_criteo_1tb", f"{_TIMED['DLRM']}; {graphs}", note
    if model == "Temporal Fusion Transformer":
        dataset = "traffic" if "traffic" in (variant + size).lower() else "electricity"
        timed = _TRITON if "Triton" in runtime else _TIMED["TFT"]
        return f"tft_{dataset}", timed, ""
    if model.startswith("SSD300"):
        return "ssd300_resnet50", _TIMED["SSD300"], ""
    if model == "QuartzNet":
        seconds = float(size.split("to")[1].split("s")[0])
        note = "the script's config is QuartzNet 15x5 (the README's prose says 10x5); conv masks left out"
        return f"quartznet_15x5?seq_len={_quartznet_frames(seconds)}", _TIMED["QuartzNet"], note
    if model == "wav2vec 2.0":
        note = "average 6.54 s utterance (104,640 samples); real batches are padded to their longest utterance"
        return "wav2vec2_base", _TIMED["wav2vec2"], note
    return f"unknown family {model!r}"


def map_row(index: int, row: dict) -> MappedRow | LeftOut:
    """Map one published row.

    Args:
        index: The row's 0-based line.
        row: The parsed JSON object.

    Returns:
        The row as a zoo configuration, or why it is left out.

    Raises:
        PublicDataError: For a row missing a field or with an unknown GPU or precision.
    """
    try:
        model = row["model"]
        spec = _spec(row)
        if isinstance(spec, str):
            return LeftOut(index, model, spec)
        latency = _latency(row)
        if latency is None:
            return LeftOut(index, model, "neither latency nor throughput printed")
        device, device_note = _device(row["gpu"])
        dtype, precision = _precision(row["precision"])
        zoo_spec, timed, note = spec
        as_run = _AS_RUN.get((model, precision))
        if as_run is not None and "Triton" not in row["runtime"]:
            dtype, precision, run_note = as_run
            note = "; ".join(n for n in (note, run_note) if n)
        return MappedRow(
            index=index,
            model=model,
            spec=zoo_spec,
            batch=int(row["batch"]),
            dtype=dtype,
            precision=precision,
            device=device,
            latency_ms=latency[0],
            latency_from=latency[1],
            timed=timed,
            comparability=row["comparability"],
            source=row["source"],
            note="; ".join(n for n in (note, device_note) if n),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, PublicDataError):
            raise PublicDataError(f"row {index}: {exc}") from None
        raise PublicDataError(f"row {index}: malformed ({type(exc).__name__}: {exc})") from None


def load_rows(path: str | Path = DEFAULT_PATH) -> list[dict]:
    """Read the JSON-lines file (one object a line; blank lines skipped).

    Raises:
        PublicDataError: For a line that is not a JSON object.
    """
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PublicDataError(f"{path}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise PublicDataError(f"{path}:{n}: not a JSON object")
            rows.append(row)
    return rows


def map_rows(rows: list[dict]) -> list[MappedRow | LeftOut]:
    """Map every row (same order, one result each)."""
    return [map_row(i, row) for i, row in enumerate(rows)]


def usable_per_family(results: list[MappedRow | LeftOut]) -> dict[str, dict[str, int]]:
    """Per family: rows, rows mapped (and how many of them grade B), rows left out.

    Returns:
        ``{model: {"rows": n, "mapped": m, "mapped_b": b, "left_out": n - m}}``, sorted by family.
    """
    rows = Counter(r.model for r in results)
    mapped = Counter(r.model for r in results if isinstance(r, MappedRow))
    grade_b = Counter(r.model for r in results if isinstance(r, MappedRow) and r.comparability == "B")
    return {
        m: {"rows": rows[m], "mapped": mapped[m], "mapped_b": grade_b[m], "left_out": rows[m] - mapped[m]}
        for m in sorted(rows)
    }
