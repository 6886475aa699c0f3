"""ML.ENERGY's aggregation of a vLLM 0.5.4 run replayed (`predictor.serving_window`) and the host fit on both of its
windows (`predictor.serving_fit.fit_windows`): a 3-request run worked out by hand, a brute-force run aggregated by a
transcription of the leaderboard's own code, the output lengths' capped mean, the request counts of the rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from predictor import serving_fit as sf
from predictor import serving_window as win


def test_three_request_run_by_hand():
    # lengths 2, 3, 2 output tokens, 2 slots, prompts of 10 tokens:
    # it 0 prefill A, B (first tokens; 1 waiting)       running A(g1) B(g1)
    # it 1 decode A, B: live context 11 + 11 = 22      A ends (2 tokens); B g2
    # it 2 prefill C (queue empty: ss_end_iter = 2)    running B(g2) C(g1)
    # it 3 decode B, C: context 12 + 11 = 23            both end
    s = win.schedule([2, 3, 2], slots=2, prompt=10)
    assert list(s.decode) == [False, True, False, True]
    assert list(s.seqs) == [2, 2, 1, 2]
    assert list(s.context) == [0, 22, 0, 23]
    # steady state: iterations 0-1, 2 + 2 = 4 tokens, running 2 and 2: mean batch 2
    assert (s.steady, s.steady_tokens, s.steady_batch) == (2, 4, 2.0)
    # step times 4, 3, 2, 5 ms. Avg TPOT: it 1, A and B 3 ms since their first token, mean 3; it 3, B 2 + 5 = 7 (the
    # prefill of C paused it), C 5 (since its own prefill), mean 6; over the two decode iterations (3 + 6) / 2 = 4.5
    # steady state: 2 sequences x (4 + 3) ms / 4 tokens = 3.5 ms per output token of one sequence
    assert s.windows([4.0, 3.0, 2.0, 5.0]) == pytest.approx((4.5, 3.5))
    assert list(s.tpot_weight) == pytest.approx([0.0, 0.5, 0.25, 0.5])


def _leaderboard(stats: dict) -> tuple[float, float]:
    """ML.ENERGY's aggregate_leaderboard_data.py (leaderboard-v2 @ c3af7f31e2), the lines that give Avg TPOT and
    Avg BS / Token tput, transcribed; the steady state's time is the sum of its iterations' times."""
    ss_end_iter = next(filter(lambda iq: iq[1] == 0, enumerate(stats["num_waiting_sys"][2:])))[0] + 2
    ss_total_output_tokens = sum(stats["num_generation_tokens_iter"][:ss_end_iter])
    ss_total_time = sum(stats["iter_time"][:ss_end_iter])
    tpot = []
    for iter_tpot in stats["time_per_output_tokens_iter"]:
        if iter_tpot:
            tpot.append(sum(iter_tpot) / len(iter_tpot))
    avg_bs = sum(stats["num_running_sys"][:ss_end_iter]) / ss_end_iter
    return sum(tpot) / len(tpot), avg_bs / (ss_total_output_tokens / ss_total_time)


def _brute_force(lengths, slots, prompt, budget, step_time) -> dict:
    """vLLM 0.5.4's scheduling sequence by sequence with wall-clock token times, recording the statistics the
    leaderboard reads (`get_last_latency`: now - the sequence's previous token time)."""
    waiting, running, t = list(enumerate(lengths)), [], 0.0
    st = {k: [] for k in ("num_waiting_sys", "num_running_sys", "num_generation_tokens_iter")}
    st |= {"time_per_output_tokens_iter": [], "iter_time": []}
    while waiting or running:
        k = min(slots - len(running), len(waiting), max(1, budget // prompt))
        if k:
            new = [waiting.pop(0) for _ in range(k)]
            dt = step_time(False, k, 0)
            t += dt
            seqs = [{"left": n - 1, "last": t, "gen": 1} for _, n in new]
            running += seqs
            st["num_running_sys"].append(len(running))
            st["num_generation_tokens_iter"].append(k)
            st["time_per_output_tokens_iter"].append([])
        else:
            dt = step_time(True, len(running), sum(prompt + s["gen"] for s in running))
            t += dt
            gaps = []
            for s in running:
                gaps.append(t - s["last"])
                s["last"] = t
                s["left"] -= 1
                s["gen"] += 1
            st["num_running_sys"].append(len(running))
            st["num_generation_tokens_iter"].append(len(running))
            st["time_per_output_tokens_iter"].append(gaps)
        st["num_waiting_sys"].append(len(waiting))
        st["iter_time"].append(dt)
        running = [s for s in running if s["left"] > 0]
    return st


def test_replay_matches_leaderboard_code_on_a_brute_force_run():
    """300 requests through 24 slots: the schedule's windows equal the leaderboard's own aggregation of a run
    simulated sequence by sequence with wall-clock times (step times depending on the batch and the live tokens)."""
    lengths = win.output_lengths(40.0, 200, 300, seed=3)
    prompt, budget = 100, 1000  # at most 10 prompts a prefill

    def step_time(decode, n, tokens):  # ms
        return 5.0 + 0.1 * n + 0.001 * tokens if decode else 3.0 + 2.0 * n

    stats = _brute_force(lengths, 24, prompt, budget, step_time)
    s = win.schedule(lengths, 24, prompt, max_batched_tokens=budget)
    times = [step_time(d, n, c) for d, n, c in zip(s.decode, s.seqs, s.context, strict=True)]
    assert times == pytest.approx(stats["iter_time"])
    assert s.windows(times) == pytest.approx(_leaderboard(stats), rel=1e-12)
    # the steady state is longer per token than Avg TPOT, which the drain's short steps pull down
    tpot, steady = s.windows(times)
    assert steady > 1.05 * tpot


def test_output_lengths_capped_mean_and_greedy_repeats():
    # an exponential of scale 100 capped at 100 has mean 100 (1 - e^-1) = 63.212: the scale found gives it back
    x = win.output_lengths(100 * (1 - math.exp(-1)), 100, 100_000)
    assert x.min() == 1 and x.max() == 100
    assert x.mean() == pytest.approx(63.212, abs=0.3)  # rounding each quantile to a whole token
    # greedy code: 5 distinct outputs, the dataset sent twice, the same outputs in the same order
    y = win.output_lengths(30.0, 512, 10, distinct=5)
    assert list(y[:5]) == list(y[5:])
    with pytest.raises(ValueError):
        win.output_lengths(600.0, 512, 10)


def test_request_counts_of_the_queue_files_fit_every_row():
    # chat: 500 ShareGPT prompts x 4; code: 164 HumanEval+ prompts x 10 (H100) or x 20 (A100); gemma-2-27b on two
    # A100s x 1
    assert win.requests("chat", "NVIDIA H100 80GB HBM3", 1) == 2000
    assert win.requests("code", "NVIDIA A100-SXM4-40GB", 1) == 3280
    assert win.requests("code", "NVIDIA H100 80GB HBM3", 4) == 1640
    assert win.requests("chat", "NVIDIA A100-SXM4-40GB", 2, "google/gemma-2-27b-it") == 500
    # avg_output_len x requests is total completion tokens, a whole number: 25 of the 342 vLLM rows were measured with
    # other counts than the queue files hold (e.g. gemma-2-27b on 4 A100s: 392.4713333 x 1500 = 588,707); with the
    # row's mean given, the nearest count that makes it whole is taken
    other = 0
    for line in sf.DATA.read_text().splitlines():
        r = json.loads(line)
        if r["runtime"].startswith("vLLM"):
            task, x = r["task"].split("/")[-1], r["avg_output_len"]
            n = win.requests(task, r["gpu"], r["num_gpus"], r["model"])
            other += abs(x * n - round(x * n)) > 1e-4
            m = win.requests(task, r["gpu"], r["num_gpus"], r["model"], x)
            assert abs(x * m - round(x * m)) < 1e-4 and m % win.DATASET[task] == 0, r["source"]
    assert other == 25
    assert win.requests("chat", "NVIDIA A100-SXM4-40GB", 4, "google/gemma-2-27b-it", 392.47133333333335) == 1500


def test_fit_windows_recovers_figures_by_hand():
    """Rows whose two windows follow 20 ms + 0.01 ms / block + 8 ms / worker exactly give those figures back (the
    figures in `eng.HOST_FIELDS` order: step, per sequence, per block, per worker, per prompt)."""
    coef = np.array([20.0, 0.0, 0.01, 8.0, 0.0])
    rows = []
    for i, (blocks, tp) in enumerate([(500.0, 1), (3000.0, 1), (1500.0, 2), (8000.0, 4), (200.0, 8)]):
        # Avg TPOT: 0.9 of a step's host features per token; steady state: 1.2 of them (the drain's iterations)
        w = sf.Window(
            4.0 + i, (0.9, 0.0, 0.9 * blocks, 0.9 * (tp - 1), 0.0), 5.0 + i,
            (1.2, 0.0, 1.2 * blocks, 1.2 * (tp - 1), 0.0), 64, 2000,
        )  # fmt: skip
        rows.append(sf.Row(f"m{i}", "h100-80gb", "chat", tp, 64, 100, 8.0, False, w.tpot_ms(coef), 0.1, 1.0, 100.0,
                           w.steady_ms(coef), w))  # fmt: skip
    # the first: 4 + 0.9 x (20 + 0.01 x 500) = 26.5 ms; steady 5 + 1.2 x 25 = 35 ms
    assert (rows[0].tpot_ms, rows[0].steady_ms) == pytest.approx((26.5, 35.0))
    assert list(sf.fit_windows(rows, "block")) == pytest.approx(list(coef), rel=1e-6, abs=1e-9)


def test_fit_windows_per_sequence_and_per_prompt_by_hand():
    """The "seq+prompt" host model: 7 ms + 0.3 ms per running sequence + 12 ms per extra worker per decode step and
    5 ms per prompt a prefill step admits, recovered from rows that follow it exactly; the per-block figure, not in
    the model, stays 0."""
    coef = np.array([7.0, 0.3, 0.0, 12.0, 5.0])
    rows = []
    for i, (seqs, tp, prompts) in enumerate([(60.0, 1, 1.0), (250.0, 1, 4.0), (120.0, 2, 0.5), (500.0, 4, 7.0),
                                             (30.0, 8, 0.2), (300.0, 1, 0.7)]):  # fmt: skip
        # per token of one sequence: one decode step (1, B, 0 blocks, tp - 1) and the B / generate prompts admitted
        tpot_x = (1.0, seqs, 0.0, tp - 1.0, prompts)
        ss_x = (1.1, 1.1 * seqs, 0.0, 1.1 * (tp - 1.0), 1.3 * prompts)
        w = sf.Window(3.0, tpot_x, 4.0, ss_x, seqs, 2000)
        rows.append(sf.Row(f"m{i}", "h100-80gb", "code", tp, int(seqs), 66, 15.0, False, w.tpot_ms(coef), 0.1, 1.0,
                           160.0, w.steady_ms(coef), w))  # fmt: skip
    # the first: 3 + 7 + 0.3 x 60 + 0 + 5 x 1 = 33 ms; steady 4 + 1.1 x (7 + 18) + 1.3 x 5 = 38 ms
    assert (rows[0].tpot_ms, rows[0].steady_ms) == pytest.approx((33.0, 38.0))
    assert list(sf.fit_windows(rows, "seq+prompt")) == pytest.approx(list(coef), rel=1e-6, abs=1e-9)
    # as the engine's HostParams: a decode step of 10 sequences on tp 2 = 7 + 3 + 12 = 22 ms; 3 prompts 15 ms
    h = sf.host_params(sf.fit_windows(rows, "seq+prompt"))
    assert h.decode_s(10, 160.0, tp=2) == pytest.approx(22e-3) and h.prefill_s(3) == pytest.approx(15e-3)
    assert list(sf.coef_of(h)) == pytest.approx(list(coef), abs=1e-6)


def test_host_features_of_the_three_request_run_by_hand():
    """The replay's host features per iteration (`serving_fit.host_matrix`) of the three-request run above, on tensor
    parallel 2, and both windows' features: (step, sequences, KV blocks, extra workers, prompts)."""
    s = win.schedule([2, 3, 2], slots=2, prompt=10)
    x = sf.host_matrix(s, tp=2)
    # it 0 prefill of 2 prompts; it 1 decode of 2 sequences, 22 live tokens: 22 / 16 + 15/32 x 2 = 2.3125 blocks;
    # it 2 prefill of 1; it 3 decode of 2, 23 tokens: 23 / 16 + 15/16 = 2.375 blocks
    assert x.tolist() == [
        [0, 0, 0, 0, 2],
        [1, 2, 2.3125, 1, 0],
        [0, 0, 0, 0, 1],
        [1, 2, 2.375, 1, 0],
    ]
    # Avg TPOT weights 0, 0.5, 0.25, 0.5: step 1, sequences 2, blocks 0.5 x (2.3125 + 2.375) = 2.34375, workers 1,
    # prompts 0.25 (C's prefill paused B); steady state (iterations 0-1, 2 sequences / 4 tokens = 0.5 each): step
    # 0.5, sequences 1, blocks 1.15625, workers 0.5, prompts 0.5 x 2 = 1
    assert (s.tpot_weight @ x).tolist() == pytest.approx([1.0, 2.0, 2.34375, 1.0, 0.25])
    assert (s.steady_weight() @ x).tolist() == pytest.approx([0.5, 1.0, 1.15625, 0.5, 1.0])


def test_serving_fit_main_refuses_an_unwritable_out_in_one_line(tmp_path, monkeypatch, capsys):
    # The fit (a minute) is replaced by a stub; an --out that is a folder, or in a missing folder, is "error: ..."
    # on one line and exit 2, not an OSError traceback after the fit.
    data = tmp_path / "rows.jsonl"
    data.write_text("")
    monkeypatch.setattr(sf, "run", lambda *a, **k: ({"devices": {}}, "| table |"))
    for out in (tmp_path, tmp_path / "missing" / "serving.json"):
        assert sf.main(["--data", str(data), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot write {out}: ") and err.count("\n") == 1
