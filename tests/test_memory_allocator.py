"""The caching-allocator replay of predictor/memory.py on hand-built traces, every reserve worked out by hand."""

from __future__ import annotations

import pytest

from predictor.memory import (
    MIB,
    AllocatorOutOfMemory,
    CachingAllocator,
    Reserved,
    RuntimeMemory,
    gpu_memory,
    least_reserved,
    simulate_reserved,
)

KIB = 1024


def test_three_tensor_trace_reserves_more_than_its_peak():
    # A (3 MiB, op 0, read by op 1), B (3 MiB, op 1, read by op 2), C (12 MiB, op 2, the output: last = 3 ops).
    # Peak live: B + C = 15 MiB at op 2.
    # Pass 1: A < 10 MiB -> a 20 MiB segment S0, A = S0[0,3), free S0[3,20) (17 MiB). B takes the smallest free
    #   block that holds it, S0[3,20), split (14 MiB left > 1 MiB): B = S0[3,6). A freed: S0[0,3) free. C (12 MiB)
    #   fits only S0[6,20) (14 MiB): C = S0[6,18), S0[18,20) free (2 MiB > 1 MiB: split). B freed, merges with
    #   S0[0,3): S0[0,6) free. Reserved 20 MiB. C is held by the caller (`out = model(x)`).
    # Pass 2: A = S0[0,3) (best fit 6 MiB, 3 left), B = S0[3,6) (exact fit), A freed; C needs 12 MiB, the free
    #   blocks are 3 and 2 MiB: a new segment, 12 MiB >= 10 MiB so its own, rounded to 2 MiB: 12 MiB. Reserved 32.
    #   B freed; then pass 1's C: S0 merges back into one free 20 MiB block.
    # Pass 3: A, B, C all fit S0 again (as in pass 1): reserved stays 32 MiB = 20 + 12.
    trace = [(0, 1, 3 * MIB), (1, 2, 3 * MIB), (2, 3, 12 * MIB)]
    assert simulate_reserved([], trace) == Reserved(weights=0, total=32 * MIB)
    assert simulate_reserved([], trace, steps=1) == Reserved(weights=0, total=20 * MIB)  # pass 1 alone
    assert simulate_reserved([], trace, steps=2).total == 32 * MIB  # steady from pass 2


def test_weights_are_packed_first_and_their_free_room_is_reused():
    # weights: 600 KiB x 4 (small pool: 3 fit one 2 MiB segment, 3 x 614,400 <= 2,097,152; the fourth opens a
    # second) and 5 MiB (large pool: a 20 MiB segment, 15 MiB left): 2 + 2 + 20 = 24 MiB.
    weights = [600 * KIB] * 4 + [5 * MIB]
    # an input of 1,000 B (rounded to 1,024, kept) and two 4 MiB activations, both fit the weights' 20 MiB segment
    # (15 MiB free, split to 11 then 7 MiB): nothing more is reserved
    trace = [(-1, 0, 1000), (0, 1, 4 * MIB), (1, 2, 4 * MIB)]
    assert simulate_reserved(weights, trace) == Reserved(weights=24 * MIB, total=24 * MIB)
    # a 16 MiB output (op 0 of 1) does not fit the 15 MiB left: its own 16 MiB segment; the caller still holds it
    # while the next pass makes its own, so a second 16 MiB segment: 24 + 2 x 16 = 56 MiB, 32 of it activations
    r = simulate_reserved(weights, [(0, 1, 16 * MIB)])
    assert (r.weights, r.total, r.activations) == (24 * MIB, 56 * MIB, 32 * MIB)


def test_free_blocks_merge_and_small_requests_round_to_512():
    a = CachingAllocator()
    h = [a.malloc(512 * KIB) for _ in range(3)]  # 3 x 512 KiB in one 2 MiB small segment, 512 KiB left
    assert a.reserved == 2 * MIB and h == [(0, 0), (0, 512 * KIB), (0, 1024 * KIB)]
    a.free(h[1])
    a.free(h[0])  # merges with the free block after it: S0[0, 1 MiB) free
    assert a.malloc(1 * MIB) == (0, 0) and a.reserved == 2 * MIB  # 1 MiB (small pool) reuses it, no new segment
    assert a.malloc(1) == (0, 1536 * KIB)  # 1 B -> one 512 B block, from the 512 KiB left at 1.5 MiB
    # a 1 MiB + 1 B request is rounded to 1 MiB + 512 B: large pool, a 20 MiB segment of its own pool
    assert a.malloc(MIB + 1) == (1, 0) and a.reserved == 22 * MIB


def test_gpu_memory_takes_the_replayed_reserve():
    rt = RuntimeMemory(fixed_mib=400.0, per_sm_mib=0.0, reserve=2.0, source="test")
    r = Reserved(weights=24 * MIB, total=40 * MIB)  # given, not replayed
    m = gpu_memory(22 * MIB, 16 * MIB, sms=108, hopper=False, runtime=rt, reserved=r)
    # weights 24 (their segments), activations 40 - 24 = 16, context 400, cuBLAS 8.125 (Ampere)
    assert (m.weights_mib, m.activations_mib, m.context_mib, m.workspace_mib) == (24.0, 16.0, 400.0, 8.125)
    assert m.total_mib == pytest.approx(448.125)  # 24 + 16 + 400 + 8.125
    assert m.tensor_peak_mib == 38.0  # 22 + 16, unrounded


def test_weights_of_extrapolated_layers():
    from passes.memory import repeat_weight_sizes

    # embedding 10, one layer (1, 2), head 7; the 2-layer graph inserts a second (1, 2) before the head: 4 layers
    # are the embedding, (1, 2) x 4, the head
    assert repeat_weight_sizes((10, 1, 2, 7), (10, 1, 2, 1, 2, 7), 4) == (10, 1, 2, 1, 2, 1, 2, 1, 2, 7)
    assert repeat_weight_sizes((10, 1, 2, 7), (10, 3, 7), 4) == ()  # not the 1-layer graph plus a block


def test_zero_byte_requests_reserve_nothing():
    # c10's allocate() calls malloc only for size != 0: a 0-byte tensor gets a null pointer and no block.
    a = CachingAllocator()
    assert a.malloc(0) is None and a.reserved == 0
    a.free(None)  # freeing it is a no-op
    assert a.reserved == 0
    # 1 B still takes one 512 B block from a 2 MiB small segment
    assert a.malloc(1) == (0, 0) and a.reserved == 2 * MIB
    # a trace of only 0-byte storages (an input, an activation, the output) reserves nothing at all
    assert simulate_reserved([0, 0], [(-1, 0, 0), (0, 1, 0), (1, 2, 0)]) == Reserved(weights=0, total=0)
    # 0-byte weights and storages beside real ones change nothing: weights 5 MiB -> one 20 MiB segment; a 3 MiB
    # activation fits its 15 MiB of free room; the 0-byte output takes no block
    with_zeros = simulate_reserved([0, 5 * MIB, 0], [(0, 1, 3 * MIB), (0, 2, 0)], n_ops=2)
    assert with_zeros == simulate_reserved([5 * MIB], [(0, 1, 3 * MIB)], n_ops=2) == Reserved(20 * MIB, 20 * MIB)


def test_n_ops_marks_the_outputs_and_the_last_op_runs():
    # A graph of 3 ops whose output is a weight (no activation lives to the end, last = 3): X (12 MiB, born at op 1,
    # read by op 2) and Y (14 MiB, born at op 2, read by nobody but op 2 itself).
    trace = [(1, 2, 12 * MIB), (2, 2, 14 * MIB)]
    # n_ops = 3: op 1 allocates X, its own 12 MiB segment (>= 10 MiB); op 2 allocates Y, X still live: a 14 MiB
    # segment; after op 2 both are freed. Later passes reuse the two free blocks (best fit): 12 + 14 = 26 MiB.
    assert simulate_reserved([], trace, n_ops=3) == Reserved(0, 26 * MIB)
    # inferred without n_ops: max(last 2, birth 2 + 1) = 3, the same answer. (Taking the largest last op, 2, for the
    # op count, as before, never ran op 2: Y was never allocated and X was kept as an output over the next pass,
    # 2 x 12 = 24 MiB.)
    assert simulate_reserved([], trace) == Reserved(0, 26 * MIB)
    # The same two storages with X an output (last = n_ops = 3): pass 1 holds X (12) and Y (12) at op 2, Y is freed;
    # pass 2 allocates X' while pass 1's X is still held: Y's free 12 MiB block; Y' needs another 12: a third segment.
    # Pass 1's X is freed after pass 2; pass 3 finds two free blocks for X'' and Y'': 36 MiB.
    assert simulate_reserved([], [(1, 3, 12 * MIB), (2, 2, 12 * MIB)], n_ops=3) == Reserved(0, 36 * MIB)
    # a storage born at or after the op count does not fit the graph
    with pytest.raises(ValueError, match="does not fit a graph of 2 ops"):  # Y is born at op 2
        simulate_reserved([], trace, n_ops=2)


def test_a_loop_that_drops_its_outputs():
    # the first test's trace (A 3, B 3, C 12 MiB, C the output) in a loop that drops C as each pass returns: every
    # pass finds S0 (20 MiB) as pass 1 left it, C back in S0[6,18): 20 MiB, not the 32 of a loop holding C
    trace = [(0, 1, 3 * MIB), (1, 2, 3 * MIB), (2, 3, 12 * MIB)]
    assert simulate_reserved([], trace, hold_outputs=False) == Reserved(weights=0, total=20 * MIB)


def test_predict_falls_back_to_the_reserve_factor_on_a_trace_it_cannot_replay():
    # An allocation trace no eager loop produces (a liveness fault: a storage born at op 5 of a graph whose ops end
    # earlier) must not escape `predict` as a bare ValueError: the memory is costed as for a graph without a trace
    # (the fitted reserve factor), every other number is kept, and a warning names the storage.
    import dataclasses

    import torch

    from analyzer import analyze
    from predictor.predict import predict

    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).eval()
    analysis = analyze(model, (torch.zeros(8, 256),)).analysis
    n_ops = len(analysis.memory.timeline)
    assert analysis.memory.blocks and n_ops < 5

    def with_blocks(blocks):
        return dataclasses.replace(analysis, memory=dataclasses.replace(analysis.memory, blocks=blocks))

    broken, warnings = predict(with_blocks(((5, 6, 4 * MIB),)), "h100-80gb")
    without, warnings_without = predict(with_blocks(()), "h100-80gb")
    replayed, _ = predict(analysis, "h100-80gb")
    assert broken.memory_mib_interval == without.memory_mib_interval and broken.memory_mib == without.memory_mib
    assert broken.memory_mib != replayed.memory_mib  # the fallback is not the replay
    assert (broken.latency_ms, broken.energy_j) == (replayed.latency_ms, replayed.energy_j)
    new = [w for w in warnings if w not in warnings_without]
    assert len(new) == 1 and "cannot be replayed" in new[0]
    assert f"storage (birth 5, last 6) does not fit a graph of {n_ops} ops" in new[0]


def test_short_memory_gives_free_segments_back_and_retries():
    # X (12 MiB, op 0, freed after op 0) then Y (14 MiB, op 1, freed after op 1), nothing held between passes.
    # With room: X gets its own 12 MiB segment (>= 10 MiB, rounded to 2 MiB); freed, it cannot hold Y: a second,
    # 14 MiB segment; later passes reuse both: 26 MiB reserved.
    trace = [(0, 0, 12 * MIB), (1, 1, 14 * MIB)]
    assert simulate_reserved([], trace, n_ops=2) == Reserved(0, 26 * MIB)
    # Within 14 MiB: Y's segment would pass the limit (12 + 14 = 26 > 14), so the free 12 MiB segment is given back
    # (one free block: c10's release_cached_blocks) and Y gets its 14 MiB; pass 2's X takes Y's free block (split,
    # 2 MiB left), which merges back for Y: 14 MiB at most, the least the loop runs in (13 MiB: Y cannot be placed)
    assert simulate_reserved([], trace, n_ops=2, limit=14 * MIB) == Reserved(0, 14 * MIB)
    with pytest.raises(AllocatorOutOfMemory):
        simulate_reserved([], trace, n_ops=2, limit=14 * MIB - 1)
    assert least_reserved([], trace, n_ops=2) == 14 * MIB
    # the first test's trace keeps a live block in every segment when pass 2's C asks for a new one (B in S0, pass
    # 1's C held): nothing to give back, the least is the 32 MiB reserved with room
    trace = [(0, 1, 3 * MIB), (1, 2, 3 * MIB), (2, 3, 12 * MIB)]
    assert least_reserved([], trace) == 32 * MIB
    with pytest.raises(AllocatorOutOfMemory):
        simulate_reserved([], trace, limit=30 * MIB)
    a = CachingAllocator(limit=20 * MIB)
    h = a.malloc(3 * MIB)  # a 20 MiB segment
    with pytest.raises(AllocatorOutOfMemory):  # 18 MiB more: its own segment, and S0 is in use
        a.malloc(18 * MIB)
    a.free(h)
    assert a.malloc(18 * MIB) == (0, 0) and a.reserved == 20 * MIB  # S0 itself holds it now (best fit, split)


def test_the_least_reserve_is_checked_at_the_rooms_a_decision_rests_on():
    # More room is not always enough: with more room nothing is given back early and the blocks land otherwise. On
    # this trace (17 storages, 12 ops) the loop runs within 106-126 MiB and 172 MiB, but not within 128-170 MiB (the
    # oracle: a replay at every 2 MiB limit); the bisection alone answers 106 MiB, and a device whose allocator has
    # 130 MiB would run out of memory. Checked at the rooms of the targets (130 MiB fails), the answer is the least
    # limit above 130 MiB the loop runs within: 172 MiB, the whole reserve; a room it runs within (110 MiB) changes
    # nothing.
    trace = [(-1, 6, 1865922), (-1, 5, 15915776), (-1, 5, 1328037), (-1, 4, 1959933), (0, 1, 438285),
             (10, 12, 4154932), (9, 10, 45699788), (0, 4, 643262), (10, 12, 8032114), (1, 1, 10186555),
             (2, 4, 42472670), (1, 3, 288847), (2, 7, 5920153), (10, 10, 3223021), (4, 11, 2241701), (7, 11, 198075),
             (6, 12, 361897)]  # fmt: skip

    def runs(limit_mib: int) -> bool:
        try:
            simulate_reserved([], trace, n_ops=12, limit=limit_mib * MIB)
        except AllocatorOutOfMemory:
            return False
        return True

    assert simulate_reserved([], trace, n_ops=12).total == 172 * MIB
    ran = [m for m in range(0, 174, 2) if runs(m)]
    assert ran == [*range(106, 127, 2), 172]
    assert least_reserved([], trace, n_ops=12) == 106 * MIB
    assert least_reserved([], trace, n_ops=12, check=[110 * MIB]) == 106 * MIB
    assert least_reserved([], trace, n_ops=12, check=[110 * MIB, 130 * MIB]) == 172 * MIB


def test_predict_checks_the_least_reserve_at_its_targets_rooms():
    # the rooms of an H100 and its six profiles: usable - 698 MiB of CUDA context (measured) - 32 MiB of cuBLAS
    # workspace (Hopper); the trace above replayed as `predict` replays a graph's, with and without a room in its gap
    from types import SimpleNamespace

    from predictor.devices import get_device
    from predictor.predict import allocator_rooms, replay_reserve

    usable = [81_559, 9_984, 20_090.88, 20_090.88, 40_448, 40_448, 81_152]
    assert allocator_rooms(get_device("h100-80gb")) == [int((u - 698 - 32) * MIB) for u in usable]
    assert allocator_rooms(get_device("h100-80gb:1g.10gb")) == [int((9_984 - 698 - 32) * MIB)]
    trace = [(-1, 6, 1865922), (-1, 5, 15915776), (-1, 5, 1328037), (-1, 4, 1959933), (0, 1, 438285),
             (10, 12, 4154932), (9, 10, 45699788), (0, 4, 643262), (10, 12, 8032114), (1, 1, 10186555),
             (2, 4, 42472670), (1, 3, 288847), (2, 7, 5920153), (10, 10, 3223021), (4, 11, 2241701), (7, 11, 198075),
             (6, 12, 361897)]  # fmt: skip
    memory = SimpleNamespace(blocks=tuple(trace), weight_sizes=(), timeline=(0,) * 12)
    assert replay_reserve(memory, 0).least == 106 * MIB
    assert replay_reserve(memory, 0, rooms=[130 * MIB]).least == 172 * MIB


def test_predict_decides_the_mig_fit_on_the_least_reserve():
    # A Linear(256, 256) whose allocation trace is the one above: weights 256 x 256 x 4 + 256 x 4 = 263,168 B, one
    # 2 MiB small segment; activations 26 MiB with room, 14 MiB at least. The prediction's memory (what nvidia-smi
    # shows with room) keeps the 26; the figure the MIG rule takes is the upper bound with 14: the activations'
    # upper bound is 1.25 x them, so it is (26 - 14) x 1.25 = 15 MiB below the interval's top.
    import dataclasses

    import torch

    from analyzer import analyze
    from predictor.predict import predict

    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).eval()
    analysis = analyze(model, (torch.zeros(8, 256),)).analysis
    assert len(analysis.memory.timeline) >= 2 and analysis.totals.param_bytes == 263_168

    def with_blocks(blocks):
        return dataclasses.replace(analysis, memory=dataclasses.replace(analysis.memory, blocks=blocks))

    p, warnings = predict(with_blocks(((0, 0, 12 * MIB), (1, 1, 14 * MIB))), "h100-80gb")
    assert p.memory_mib_interval[1] - p.memory_fit_mib == pytest.approx(15.0, abs=1e-9)
    assert p.to_json()["memory_fit_mib"] == p.memory_fit_mib
    assert f"{p.memory_fit_mib:,.0f} MiB + 5% headroom" in p.mig.reason
    # the reason names the figure as what it is, not as the interval's top (15 MiB above it)
    assert f"upper bound of what it runs in (cached blocks given back): {p.memory_fit_mib:,.0f} MiB" in p.mig.reason
    assert "memory_fit_mib" not in " ".join(warnings)  # 1g.10gb either way: nothing to say
    # X 5,000 MiB then Y 5,400 MiB: with room 5,000 + 5,400 = 10,400 MiB of activations, at least 5,400 (X's segment
    # given back for Y): the upper bounds differ by (10,400 - 5,400) x 1.25 = 6,250 MiB, and the decision with them.
    # With context and workspace (~730 MiB) + 2 MiB of weights, 1.25 x 10,400 = 13,000 MiB needs a 1g.20gb slice;
    # 1.25 x 5,400 = 6,750 MiB fits 1g.10gb (9,984 MiB usable, with 5% headroom)
    p, warnings = predict(with_blocks(((0, 0, 5_000 * MIB), (1, 1, 5_400 * MIB))), "h100-80gb")
    assert p.memory_mib_interval[1] - p.memory_fit_mib == pytest.approx(6_250.0, abs=1e-9)
    assert p.memory_fit_mib * 1.05 <= 9_984 < p.memory_mib_interval[1] * 1.05
    assert p.mig.profile == "1g.10gb" and p.mig.fits["1g.10gb"]
    (note,) = [w for w in warnings if "memory_fit_mib" in w]
    assert f"upper bound {p.memory_fit_mib:,.0f} MiB (memory_fit_mib), which MIG fit is decided on" in note
    # the text's memory line and a sweep point carry the same figure
    from analyzer.render import _tensor_text
    from analyzer.sweep import point

    assert f"runs in {p.memory_fit_mib:,.0f} MiB at most where memory is short" in _tensor_text(p)
    assert point(8, p, None)["memory_fit_mib"] == p.memory_fit_mib
    # the model's own trace gives nothing back: the fit figure is the interval's top
    own, _ = predict(analysis, "h100-80gb")
    assert own.memory_fit_mib == own.memory_mib_interval[1]
    assert f"predicted upper bound {own.memory_fit_mib:,.0f} MiB" in own.mig.reason
