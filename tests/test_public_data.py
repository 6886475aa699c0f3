"""predictor.public_data: every published DLE A100 row is mapped to a zoo configuration or given a reason."""

from __future__ import annotations

import json

import pytest

import zoo
from predictor.public_data import (
    DEFAULT_PATH,
    LeftOut,
    MappedRow,
    PublicDataError,
    load_rows,
    map_row,
    map_rows,
    usable_per_family,
)


@pytest.fixture(scope="module")
def results() -> list[MappedRow | LeftOut]:
    return map_rows(load_rows())


def test_every_row_is_mapped_or_has_a_reason(results) -> None:
    with open(DEFAULT_PATH, encoding="utf-8") as fh:
        n_lines = sum(1 for line in fh if line.strip())
    assert n_lines == 377  # the data README's count
    assert len(results) == 377 and [r.index for r in results] == list(range(377))
    for r in results:
        if isinstance(r, LeftOut):
            assert r.reason and "\n" not in r.reason
        else:
            assert r.latency_ms > 0 and r.batch >= 1
            assert r.device in ("a100-40gb", "a100-80gb")
            assert r.comparability in ("B", "C")
            zoo.resolve(r.spec)  # a valid zoo spec


def test_usable_rows_per_family(results) -> None:
    table = usable_per_family(results)
    # row counts per family as the data file holds them (grep -c '"model": "nnU-Net"' etc.)
    assert {m: t["rows"] for m, t in table.items()} == {
        "BART-large (summarization)": 14, "DLRM": 60, "FastPitch": 38, "GNMT v2": 21, "HiFi-GAN": 16,
        "Mask R-CNN": 10, "MoFlow": 6, "QuartzNet": 30, "SE(3)-Transformer": 18, "SSD300 v1.1": 40,
        "Tacotron 2": 8, "Temporal Fusion Transformer": 46, "Transformer (big) NMT": 12, "nnU-Net": 50,
        "wav2vec 2.0": 8,
    }  # fmt: skip
    mapped = {m: t["mapped"] for m, t in table.items() if t["mapped"]}
    # the single-forward families map every row; the rest (generation, pipelines, unbuilt) none
    assert mapped == {
        "DLRM": 60, "QuartzNet": 30, "SSD300 v1.1": 40, "Temporal Fusion Transformer": 46, "nnU-Net": 50,
        "wav2vec 2.0": 8,
        "FastPitch": 14,  # the generator alone: 6 TorchScript rows, 8 Triton rows; 24 vocoder pipelines left out
    }  # fmt: skip
    # grade C among them: DLRM with CUDA graphs (30), TFT on Triton (22), nnU-Net 3D on Triton (6), FastPitch (14)
    assert {m: t["mapped"] - t["mapped_b"] for m, t in table.items() if t["mapped"] > t["mapped_b"]} == {
        "DLRM": 30,
        "Temporal Fusion Transformer": 22,
        "nnU-Net": 6,
        "FastPitch": 14,
    }


def _first(results, **want) -> MappedRow:
    return next(r for r in results if isinstance(r, MappedRow) and all(getattr(r, k) == v for k, v in want.items()))


def test_rows_map_to_the_configuration_they_timed(results) -> None:
    rows = load_rows()
    nn3d = _first(results, spec="nnunet_3d", precision="tf32")
    assert rows[nn3d.index]["seq_len_or_resolution"].endswith("128x128x128")
    assert nn3d.dtype == "float32" and nn3d.device == "a100-80gb"
    # QuartzNet padded to 2.0 s: 200 frames of 10 ms + 1 (centred STFT) = 201, padded to a multiple of 16: 208
    q = _first(results, spec="quartznet_15x5?seq_len=208")
    assert rows[q.index]["seq_len_or_resolution"] == "audio padded to 2.0 s"
    # SSD300 prints throughput only: latency = 1000 * batch / throughput
    ssd = _first(results, model="SSD300 v1.1")
    assert ssd.latency_from == "throughput"
    assert ssd.latency_ms == pytest.approx(1000 * rows[ssd.index]["batch"] / rows[ssd.index]["throughput_per_s"])
    # wav2vec 2.0 in bfloat16 autocast
    w = _first(results, spec="wav2vec2_base", precision="amp-bf16")
    assert w.dtype == "bfloat16"
    # DLRM 32768 AMP without CUDA graphs: README prints 0.00228 s; main.py's inference_benchmark runs AMP as
    # `model = model.half()`: the whole model in float16, no autocast
    d = next(
        r for r in results
        if isinstance(r, MappedRow) and r.model == "DLRM" and r.batch == 32768 and r.comparability == "B"
        and rows[r.index]["precision"].startswith("AMP")
    )  # fmt: skip
    assert d.latency_ms == pytest.approx(2.28) and "CUDA graphs off" in d.timed
    assert (d.dtype, d.precision) == ("float16", "fp16") and "model.half()" in d.note
    # TFT: the traffic rows use the 963-sensor id table
    t = _first(results, spec="tft_traffic")
    assert "traffic" in (rows[t.index]["variant"] + rows[t.index]["seq_len_or_resolution"]).lower()


def test_precision_is_what_the_inference_script_ran(results) -> None:
    """The tables' precision column against what the family's inference script does with it (the sources' code)."""
    rows = load_rows()
    by_family: dict[tuple[str, str, str], set] = {}
    for r in results:
        if isinstance(r, MappedRow):
            key = (r.model, rows[r.index]["precision"], "Triton" if "Triton" in rows[r.index]["runtime"] else "eager")
            by_family.setdefault(key, set()).add((r.dtype, r.precision))
    # TFT's eager table says "mixed precision"; inference.py has no autocast and no .half(): float32 on TF32
    assert by_family[("Temporal Fusion Transformer", "AMP (mixed precision)", "eager")] == {("float32", "tf32")}
    # TFT on Triton: the exported model in FP16 (the row's config says so), unchanged
    assert by_family[("Temporal Fusion Transformer", "FP16", "Triton")] == {("float16", "fp16")}
    # DLRM "AMP", CUDA graphs on or off: model.half(); TF32 rows stay TF32
    assert by_family[("DLRM", "AMP (mixed precision)", "eager")] == {("float16", "fp16")}
    assert by_family[("DLRM", "TF32", "eager")] == {("float32", "tf32")}
    # nnU-Net's AMP is autocast: main.py builds its Lightning Trainer with `precision=16 if args.amp else 32`
    assert by_family[("nnU-Net", "AMP (FP16)", "eager")] == {("float16", "amp-fp16")}


def test_left_out_reasons_name_the_cause(results) -> None:
    by_model = {r.model: r.reason for r in results if isinstance(r, LeftOut)}
    assert by_model["BART-large (summarization)"].startswith("generation")
    assert by_model["Tacotron 2"].startswith("generation pipeline")
    assert by_model["SE(3)-Transformer"].startswith("not built")
    assert by_model["Mask R-CNN"].startswith("not built")


def test_malformed_rows_raise_one_line(tmp_path) -> None:
    with pytest.raises(PublicDataError, match="row 3: malformed"):
        map_row(3, {"model": "nnU-Net"})
    good = load_rows()[0]
    with pytest.raises(PublicDataError, match="row 0: unknown GPU 'V100'"):
        map_row(0, {**good, "model": "DLRM", "runtime": "x", "gpu": "V100"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n[1, 2]\n")
    with pytest.raises(PublicDataError, match=r"bad.jsonl:2: not a JSON object"):
        load_rows(bad)
