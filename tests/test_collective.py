"""The all-reduce verdicts (grader/judge/collective.py) and the modelled multi-GPU timeline
(grader/perf_model/timeline.py), on stream orders recorded from the real simulator."""

import sys
from pathlib import Path

import numpy as np
import pytest

from grader import sim, wire
from grader.backends.ranks import Ranks, devices_for
from grader.judge.collective import (Link, Traffic, expect_allreduced, expect_no_host_traffic, expect_pipelined,
                                     expect_ring_traffic, expect_total_traffic, rank_inputs, ring_bound, timeline_of)
from grader.judge.correctness import WrongAnswer
from grader.judge.perf import PartialCredit, PerformanceShortfall
from grader.judge.student import CallResult
from grader.perf_model import gpu
from grader.perf_model.timeline import schedule


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def solution():
    sys.path.insert(0, str(ROOT / "solutions"))
    try:
        import allreduce
        yield allreduce
    finally:
        sys.path.remove(str(ROOT / "solutions"))
        sys.modules.pop("allreduce", None)


def _recorded(function, ranks, n, dtype=np.float32):
    """The call as the device process would report it: outputs, launches, stream order."""
    inputs = rank_inputs(np.random.default_rng(1), ranks, n, dtype)
    with sim.installed(devices=8) as simulator:
        helper = Ranks(ranks, devices_for(ranks, 8))
        bufs = helper.upload(inputs)
        simulator.streams.take_log()
        with sim.trace() as launches:
            function(helper, bufs)
            helper.synchronize()
        log, cut = simulator.streams.take_log()
        outputs = [b.copy_to_host() for b in bufs]
    report = wire.DeviceReport(1, [], [], [], [], [wire.StreamOp.parse(op, "op") for op in log], cut)
    return CallResult(outputs, [], [l.summary() for l in launches], report, inputs), inputs


def test_the_ring_moves_two_n_minus_one_chunks_per_link_and_rank(solution):
    result, inputs = _recorded(solution.allreduce_ring, 4, 1003)
    expect_allreduced(result.value, inputs, "ring")
    traffic = Traffic.of(result, 4)
    assert sorted(traffic.links) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert all(link.messages == 6 for link in traffic.links.values())
    assert max(link.bytes for link in traffic.links.values()) <= ring_bound(1003, 4, 4) == 6 * 251 * 4
    expect_ring_traffic(traffic, 1003, 4, messages_per_link=6)
    expect_no_host_traffic(traffic, inputs[0].nbytes)
    expect_total_traffic(traffic, inputs[0].nbytes)
    assert "3 -> 0" in traffic.table() and "per rank" in traffic.table()


def test_naive_moves_the_same_total_but_not_a_rings_maxima(solution):
    ring, inputs = _recorded(solution.allreduce_ring, 4, 1003)
    naive, _ = _recorded(solution.allreduce_naive, 4, 1003)
    ring_t, naive_t = Traffic.of(ring, 4), Traffic.of(naive, 4)
    assert naive_t.total == 2 * 3 * inputs[0].nbytes >= ring_t.total
    expect_total_traffic(naive_t, inputs[0].nbytes)
    with pytest.raises(PerformanceShortfall, match="not the ring's") as found:
        expect_ring_traffic(naive_t, 1003, 4, messages_per_link=6)
    assert "rank 0 receives 12,036 bytes" in str(found.value)


def test_at_two_ranks_only_the_message_count_tells_naive_from_ring(solution):
    naive, _ = _recorded(solution.allreduce_naive, 2, 1003)
    traffic = Traffic.of(naive, 2)
    expect_ring_traffic(traffic, 1003, 4)  # the same links and bytes
    with pytest.raises(PerformanceShortfall, match="1 message") as found:
        expect_ring_traffic(traffic, 1003, 4, messages_per_link=2)
    # what every link does wrong is said once, for every link, not once a link
    assert str(found.value).startswith("not a ring's traffic: every link of the ring: 1 message(s); the ring sends "
                                       "exactly 2 (N - 1) = 2 over each link (one chunk per step)\n\n  - every "
                                       "link of the ring: 1 message(s)"), str(found.value)
    assert str(found.value).count("message(s)") == 2, str(found.value)


def test_int32_witnesses_name_the_missing_ranks():
    inputs = rank_inputs(np.random.default_rng(3), 4, 10, np.int32)
    partial = [inputs[0] + inputs[2]] + [sum(inputs)] * 3
    with pytest.raises(WrongAnswer, match=r"rank 0's buffer .* contributions of ranks 0, 2 only: ranks 1, 3 missing"):
        expect_allreduced(partial, inputs, "allreduce")
    shifted = [np.roll(sum(inputs), 1)] * 4
    with pytest.raises(WrongAnswer, match="another index"):
        expect_allreduced(shifted, inputs, "allreduce")
    # a ring whose chunks were never all reduced: each run of indices says whose contributions it holds
    chunked = np.concatenate([inputs[0][:3] + inputs[1][:3], inputs[1][3:6], sum(inputs)[6:]])
    with pytest.raises(WrongAnswer, match=r"by index: 0\.\.2 ranks 0, 1; 3\.\.5 rank 1 only; 6\.\.9 every rank$"):
        expect_allreduced([chunked] + [sum(inputs)] * 3, inputs, "allreduce")


def test_a_wrong_float_buffer_says_whose_contributions_its_runs_hold():
    inputs = rank_inputs(np.random.default_rng(5), 3, 12, np.float32)
    chunked = np.concatenate([inputs[2][:4], (inputs[0] + inputs[1])[4:8], sum(inputs)[8:]])
    with pytest.raises(WrongAnswer, match=r"contributions of rank 2 only: ranks 0, 1 missing\); by index: 0\.\.3 "
                                          r"rank 2 only; 4\.\.7 ranks 0, 1; 8\.\.11 every rank$"):
        expect_allreduced([chunked.astype(np.float32)] * 3, inputs, "allreduce")


def test_a_right_element_holds_every_rank_even_where_one_ranks_element_is_near_zero():
    # (a right element near 0 in rank 0 fits "ranks 1, 2" too: the runs once split there)
    inputs = rank_inputs(np.random.default_rng(5), 3, 12, np.float32)
    inputs[0][5] = np.float32(1e-9)
    buffer = np.concatenate([sum(inputs)[:10], inputs[0][10:]]).astype(np.float32)
    with pytest.raises(WrongAnswer, match=r"by index: 0\.\.9 every rank; 10\.\.11 rank 0 only$"):
        expect_allreduced([buffer] * 3, inputs, "allreduce")


def test_many_ranks_of_a_long_float_buffer_still_say_whose_contributions_its_wrong_elements_hold():
    # 8 ranks x 40,009 elements: 256 subsets, matched only where an element is wrong
    inputs = rank_inputs(np.random.default_rng(6), 8, 40_009, np.float32)
    buffer = sum(x.astype(np.float64) for x in inputs).astype(np.float32)
    buffer[-1] = inputs[0][-1]
    with pytest.raises(WrongAnswer, match=r"contributions of rank 0 only: ranks 1, 2, 3, 4, 5, 6, 7 missing\); "
                                          r"by index: 0\.\.40007 every rank; 40008\.\.40008 rank 0 only$"):
        expect_allreduced([buffer] * 8, inputs, "allreduce")


def test_a_few_elements_a_subset_sum_fits_by_chance_are_not_a_run_of_their_own():
    """(all-reduce audit) a buffer wrong everywhere read "0..2818 not a sum ...; 2819..2819 ranks 0,
    2, 3, 4, 5, 6, 7; 2820..40008 not a sum": a chance match of one element, told as a finding."""
    from grader.judge.collective import _chance_matches_dropped

    held = np.full(40, -1)
    held[10] = 0b1011101  # one element a subset's sum fits, between elements none fits
    held[30:] = 0b11      # a run of 10: kept
    assert np.array_equal(_chance_matches_dropped(held), np.concatenate([np.full(30, -1), np.full(10, 0b11)]))
    edge = np.full(12, 0b11)
    edge[:2] = -1  # a run of 10 after a short run of none: nothing dropped
    assert np.array_equal(_chance_matches_dropped(edge), edge)
    assert np.array_equal(_chance_matches_dropped(np.array([5])), [5])  # one element alone: kept


def test_float_sums_pass_within_a_tolerance_and_fail_outside_it():
    inputs = rank_inputs(np.random.default_rng(4), 8, 100, np.float32)
    exact = sum(x.astype(np.float64) for x in inputs)
    expect_allreduced([exact.astype(np.float32)] * 8, inputs, "allreduce")
    with pytest.raises(WrongAnswer, match="rank 5"):
        expect_allreduced([exact.astype(np.float32)] * 5 + [(exact - inputs[3]).astype(np.float32)] * 3,
                          inputs, "allreduce")


def test_host_traffic_beyond_the_graders_copies_is_refused():
    traffic = Traffic(2, host_bytes=4 * 400 + 400)
    with pytest.raises(PerformanceShortfall, match="400 bytes went between the host"):
        expect_no_host_traffic(traffic, 400)


def _stage(ratio=1.15, zero=0.0):
    from grader.course.manifest import GpuThreshold, Stage

    return Stage("allreduce", 3, "pipelined", "allreduce_pipelined", (), (), GpuThreshold("reference", ratio, zero))


def _timeline(result, n):
    return schedule([op.as_dict() for op in result.device.timeline], result.launches, gpu("H100"),
                    scale=(64 << 20) / (4 * n))


def test_stage_3_is_timed_where_the_links_bound_so_one_piece_per_chunk_is_slower_not_faster(solution, monkeypatch):
    """(audit) As on 64 MiB, one Python thread issuing every copy and add (about 10 us each) is the
    bound: one piece per chunk, half the operations, modelled faster than the reference's two, the
    lesson backwards. As on 1 GiB the links are the bound: one piece per chunk leaves each link idle
    while its chunk is added, and it earns partial credit under course.toml's threshold; four
    pieces, a faithful variant, earn it all."""
    from grader.judge.collective import PIPELINE_BUFFER_BYTES

    made = {}
    for slices in (1, 2, 4):
        monkeypatch.setattr(solution, "SLICES", slices)
        made[slices], _ = _recorded(solution.allreduce_pipelined, 4, 40009)
    small = {k: timeline_of(r, "H100", 4 * 40009) for k, r in made.items()}
    large = {k: timeline_of(r, "H100", 4 * 40009, PIPELINE_BUFFER_BYTES) for k, r in made.items()}
    assert small[2].host_bound and small[1].makespan_s < small[2].makespan_s
    assert not large[2].host_bound and large[2].makespan_s < large[1].makespan_s
    stage = _stage(1.05, 1.3)
    assert expect_pipelined(stage, large[4], large[2])["credit"] == 1.0
    with pytest.raises(PartialCredit, match=r"modelled on H100s with a 1 GiB buffer, .*it sends 24 pieces where the "
                                            r"reference sends 48: .*cut each chunk into SLICES pieces") as found:
        expect_pipelined(stage, large[1], large[2])
    assert 0.6 < found.value.credit < 0.9


def test_host_bound_looks_at_the_last_kernel_or_peer_copy_issued_not_the_outputs_copied_back():
    """The device process's log ends with the outputs' copies to the host, after a wait for all the
    work: the host's clock then is the work's end, whatever bounded it."""
    g = gpu("H100")
    ops = [{"index": 0, "kind": "kernel", "device": 0, "stream": 1, "tick": 1, "after": [], "launch": None},
           {"index": 1, "kind": "copy", "device": 0, "stream": 2, "tick": 1, "after": [[1, 1]], "nbytes": 1 << 30,
            "src": 0, "dst": 1},
           {"index": 2, "kind": "sync", "device": -1, "stream": 0, "tick": 0, "after": [[2, 1]]},
           {"index": 3, "kind": "copy", "device": 1, "stream": 3, "tick": 1, "after": [], "nbytes": 4, "src": 1,
            "dst": -1}]
    timeline = schedule(ops, [], g)
    assert timeline.issued_s == pytest.approx(2 * g.host_issue_us * 1e-6)
    assert not timeline.host_bound


def test_the_pipelined_ring_overlaps_copies_and_adds_and_beats_the_synchronous_ring(solution):
    piped, _ = _recorded(solution.allreduce_pipelined, 4, 40009)
    ring, _ = _recorded(solution.allreduce_ring, 4, 40009)
    mine, sync = _timeline(piped, 40009), _timeline(ring, 40009)
    assert mine.overlap_s() > 0 and mine.waits_between_copies == 0
    assert sync.waits_between_copies > 10 and sync.overlap_s() < mine.overlap_s()
    assert mine.makespan_s < 0.8 * sync.makespan_s, (mine.makespan_s, sync.makespan_s)
    assert expect_pipelined(_stage(), mine, mine)["ratio"] == 1.0
    with pytest.raises(PerformanceShortfall, match="host stopped to wait"):
        expect_pipelined(_stage(), sync, mine)


def test_the_host_waits_for_many_streams_at_one_point_count_as_one_stop(solution):
    """(audit) one ranks.synchronize() per step at N = 4 (3 in all) read "the host waited 36 times":
    each rank's streams and each device counted. Syncs with no work issued between are one stop."""
    def synchronized_between(ranks, bufs):
        for _ in range(3):
            solution.allreduce_pipelined(ranks, bufs)
            ranks.synchronize()  # (each rank's streams, then each device)

    result, _ = _recorded(synchronized_between, 4, 4001)
    assert _timeline(result, 4001).waits_between_copies == 2


def test_a_ring_in_more_pieces_keeps_within_the_rings_bytes_and_is_told_it_is_host_bound(solution, monkeypatch):
    """SLICES = 4, an honest choice: n = 1003 in 16 pieces makes chunks of up to 252 elements where
    ceil(n / N) is 251, one element per piece past the ring's cut, which the traffic bound allows.
    Modelled, its twice as many operations keep the GPUs waiting on the host: the verdict says so."""
    monkeypatch.setattr(solution, "SLICES", 4)
    four, _ = _recorded(solution.allreduce_pipelined, 4, 1003)
    expect_ring_traffic(Traffic.of(four, 4), 1003, 4, min_messages_per_link=12, largest_elements=126)
    monkeypatch.setattr(solution, "SLICES", 2)
    big_two, _ = _recorded(solution.allreduce_pipelined, 4, 40009)
    monkeypatch.setattr(solution, "SLICES", 4)
    big_four, _ = _recorded(solution.allreduce_pipelined, 4, 40009)
    mine, theirs = _timeline(big_four, 40009), _timeline(big_two, 40009)
    assert mine.host_bound and len(mine.spans) > len(theirs.spans)
    with pytest.raises(PartialCredit, match=r"host-bound: the host issues \d+ copies and kernels one after another, "
                                            r"about 10 us each from Python, and the GPUs wait for it \(the reference "
                                            r"issues \d+\): fewer, larger pieces"):
        expect_pipelined(_stage(), mine, theirs)


def test_a_slower_timeline_earns_partial_credit():
    from grader.perf_model.timeline import Span, Timeline

    def spans(end):
        return [Span(0, "copy", 0, 1, 0.0, end, "copy", 0, 1), Span(1, "kernel", 1, 2, 0.0, end, "add")]

    with pytest.raises(PartialCredit) as found:
        expect_pipelined(_stage(1.0), Timeline(spans(1.5e-3), 0, 0), Timeline(spans(1e-3), 0, 0))
    assert 0 < found.value.credit < 1


def test_the_schedule_respects_stream_order_events_and_links():
    g = gpu("H100")
    copy = {"index": 0, "kind": "copy", "device": 0, "stream": 1, "tick": 1, "after": [], "name": "c",
            "nbytes": 7_400_000, "src": 0, "dst": 1}  # 20 us of bytes + 10 us latency
    waiting = {"index": 1, "kind": "kernel", "device": 1, "stream": 2, "tick": 1, "after": [[1, 1]], "name": "add"}
    free = {"index": 2, "kind": "kernel", "device": 2, "stream": 3, "tick": 1, "after": [], "name": "add"}
    t = schedule([copy, free, waiting], [], g)
    c, f, w = t.spans
    assert c.end_s == pytest.approx(c.start_s + 30e-6)
    assert f.start_s == pytest.approx(2 * 10e-6) and f.start_s < c.end_s  # unordered: once the host issued it
    assert w.start_s == pytest.approx(c.end_s)  # ordered after the copy (an event)
    assert t.overlap_s() > 0 and t.host_waits == 0


def test_busbw_against_nccl_full_partial_and_none():
    from grader.judge.collective import expect_busbw, modelled_nccl_busbw

    nccl = modelled_nccl_busbw("H100")
    assert nccl == pytest.approx(0.8 * 370e9)
    assert expect_busbw(0.5 * nccl, nccl, 0.35, "modelled on H100s", "H100", 4)["credit"] == 1.0
    with pytest.raises(PartialCredit) as found:
        expect_busbw(0.3 * nccl, nccl, 0.35, "modelled on H100s", "H100", 4)
    assert found.value.credit == pytest.approx((0.3 - 0.175) / 0.175, abs=1e-3)
    with pytest.raises(PerformanceShortfall, match="far slower than NCCL"):
        expect_busbw(0.1 * nccl, nccl, 0.35, "measured on 4 GPUs", "4 GPUs", 4)


def test_a_measured_busbw_far_above_nccls_is_a_forged_timing():
    from grader.errors import RunnerError
    from grader.judge.collective import expect_busbw

    with pytest.raises(RunnerError, match="forged"):
        expect_busbw(400e9, 200e9, 0.35, "measured on 4 GPUs", "4 GPUs", 4)


def test_a_measured_busbw_has_the_models_prediction_beside_it_and_is_believed_up_to_the_models_bound(solution):
    """On N GPUs the student's runner reports its own times: the judge sets the model's prediction
    for the same call beside them, and believes them only up to the reference's measured busbw
    times the modelled ratio of the two calls, times MODEL_SLACK."""
    from grader.judge.collective import MODEL_SLACK, believed_busbw, expect_busbw, model_beside_allreduce
    from grader.judge.perf import take_timing

    piped, inputs = _recorded(solution.allreduce_pipelined, 4, 40009)
    ring, _ = _recorded(solution.allreduce_ring, 4, 40009)
    model = model_beside_allreduce(ring, piped, inputs[0].nbytes, 4, "NVIDIA H200", "H100")
    assert model["gpu"] == "H200", "the preset of the GPUs measured"
    assert 0 < model["busbw_gbs"] < model["reference_busbw_gbs"], "a synchronous ring is modelled slower"
    assert model_beside_allreduce(ring, piped, inputs[0].nbytes, 4, "Some Future GPU", "H100")["gpu"] == "H100"
    nccl, reference = 300e9, 120e9
    bound = believed_busbw(model, reference)
    assert bound == pytest.approx(reference * model["busbw_gbs"] / model["reference_busbw_gbs"] * MODEL_SLACK)
    # an honest measurement under the bound is graded as measured, the model beside it
    honest = 0.9 * bound
    summary = expect_busbw(honest, nccl, 0.01, "measured on 4 GPUs", "4 x NVIDIA H200", 4, model=model,
                           believed_up_to=bound)
    assert summary["busbw_gbs"] == pytest.approx(honest / 1e9, abs=0.01) and "measured_busbw_gbs" not in summary
    assert summary["model"] == model and take_timing()["model"] == model
    # a runner that claims more than the bound is graded at the bound, and told so: with full
    # credit from 1.5 times the bound, a third of the points (none from half of it)
    assert bound < 1.2 * nccl
    with pytest.raises(PartialCredit) as found:
        expect_busbw(1.2 * nccl, nccl, 1.5 * bound / nccl, "measured on 4 GPUs", "4 x NVIDIA H200", 4, model=model,
                     believed_up_to=bound)
    assert found.value.credit == pytest.approx(1 / 3, abs=1e-3)
    assert "more than the simulator's record of the same call allows" in str(found.value)
    assert "the performance model predicted" in str(found.value)
    timing = take_timing()
    assert timing["measured_busbw_gbs"] == pytest.approx(1.2 * nccl / 1e9)
    assert timing["busbw_gbs"] == pytest.approx(bound / 1e9, abs=0.01)


def test_without_the_device_report_traffic_and_timeline_tests_are_not_gradable():
    """`--simulator inline` (debugging: no device process, so no report of the call): the tests
    that read the report skip, which the plugin reports as not gradable with their points."""
    inline = CallResult([], [], [], None, [], ranks=True)
    for read in (lambda: Traffic.of(inline, 2), lambda: timeline_of(inline, "h100", 4096)):
        with pytest.raises(pytest.skip.Exception, match="device process, and this run has none"):
            read()
    assert Traffic.of(inline, 2, required=False) is None


def test_ranks_copy_into_a_slice_cut_short_by_its_arrays_end_says_the_array_is_too_small():
    """(audit) `ranks.copy(scratch[:253], chunk)` with a 250-element scratch read only "dst is
    float32[250] and src is float32[253]; they must match": the slice had silently stopped at the
    array's end, and the student looked at their slicing, not at the scratch's size."""
    with sim.installed(devices=2):
        ranks = Ranks(2, devices_for(2, 2))
        bufs = ranks.upload([np.ones(253, np.float32), np.ones(253, np.float32)])
        scratch = ranks[1].device_array(250, np.float32)
        with pytest.raises(ValueError, match=r"dst is float32\[250\] and src is float32\[253\]; they must match "
                                             r"\(slice both the same\): dst stops where its array does, an array "
                                             r"of 250 elements"):
            ranks.copy(scratch[:253], bufs[0])
        with pytest.raises(ValueError, match=r"\(slice both the same\)$"):  # a slice short of its array's end
            ranks.copy(scratch[:100], bufs[0][:101])


def test_an_all_gather_by_direct_sends_is_told_as_such_not_as_48_links():
    """(all-reduce audit) every rank sending its chunk to every other rank listed each link, and no cause."""
    traffic = Traffic(4)
    for src in range(4):
        for dst in range(4):
            if src != dst:
                traffic.links[(src, dst)] = Link(bytes=1003, messages=1, largest=1003)
    with pytest.raises(PerformanceShortfall, match=r"not a ring's traffic: bytes on links that are not the ring's "
                                                   r"\(r -> r \+ 1\): all 8 others: ranks 0, 1, 2, 3 send to every "
                                                   r"other rank directly; in a ring each rank sends only to r\.next"):
        expect_ring_traffic(traffic, 1003, 4, messages_per_link=6)


def test_ranks_copy_on_a_stream_of_no_rank_says_whose_stream_it_is():
    """(all-reduce audit) copies given cuda.default_stream() read only the rule; the message now
    says that stream is no rank's, or which rank's it is."""
    from numba import cuda

    with sim.installed(devices=3):
        ranks = Ranks(3, devices_for(3, 3))
        bufs = ranks.upload([np.ones(8, np.float32)] * 3)
        with pytest.raises(ValueError, match=r"must be one of rank 0's or rank 1's \(r\.stream or r\.new_stream\(\)\); "
                                             r"that stream is no rank's \(cuda\.stream\(\) and "
                                             r"cuda\.default_stream\(\) make none\)"):
            ranks.copy(bufs[1], bufs[0], stream=cuda.default_stream())
        with pytest.raises(ValueError, match=r"that stream is rank 2's, which this copy does not touch$"):
            ranks.copy(bufs[1], bufs[0], stream=ranks[2].stream)


def test_a_ring_that_runs_the_other_way_is_told_so(solution):
    """(audit) a consistent r -> r - 1 ring was told only as its off-ring links."""
    chunk = solution.chunk

    def backwards(ranks, bufs):
        n, count = bufs[0].size, len(ranks)
        scratch = [r.device_array(max(chunk(n, count, 0)[1], 1), bufs[0].dtype) for r in ranks]
        for step in range(count - 1):
            for r in ranks:
                lo, hi = chunk(n, count, (r.id + step) % count)
                ranks.copy(scratch[r.prev.id][:hi - lo], bufs[r.id][lo:hi])
            for r in ranks:
                lo, hi = chunk(n, count, (r.id + 1 + step) % count)
                solution.add_on(r, bufs[r.id][lo:hi], scratch[r.id][:hi - lo])
        for step in range(count - 1):
            for r in ranks:
                lo, hi = chunk(n, count, (r.id - 1 + step) % count)
                ranks.copy(bufs[r.prev.id][lo:hi], bufs[r.id][lo:hi])

    result, inputs = _recorded(backwards, 4, 1003)
    expect_allreduced(result.value, inputs, "ring")
    with pytest.raises(PerformanceShortfall, match=r"1 -> 0, 2 -> 1, 3 -> 2: the ring runs the other way") as info:
        expect_ring_traffic(Traffic.of(result, 4), 1003, 4, messages_per_link=6)
    # (the audit: the ring's own links, empty because of it, were listed again as "0 message(s)")
    assert "0 message(s)" not in str(info.value), str(info.value)


def test_less_overlap_than_the_references_names_the_cause_the_timeline_shows():
    """(audit) copies on the adds' stream, or adds on the legacy default stream, were told "one
    scratch buffer per rank, or one piece per chunk", code the student had right."""
    from grader.judge.collective import _why_less_overlap
    from grader.perf_model.timeline import Span, Timeline

    def ring(copy_stream, add_stream, default=False, pieces=4, copy_device=0):
        spans = [Span(i, "copy", copy_device, copy_stream, i, i + 1, "copy", src=0, dst=1) for i in range(pieces)]
        spans += [Span(10 + i, "kernel", 1, add_stream, i + 1, i + 2, "add_kernel", default=default)
                  for i in range(pieces)]
        return Timeline(spans, 0, 0)

    reference = ring(5, 6)
    assert "its copies and adds are issued on one stream (stream 6 of device 1)" in \
        _why_less_overlap(ring(6, 6, copy_device=1), reference)
    assert "its adds run on a GPU's legacy default stream" in _why_less_overlap(ring(5, 0, default=True), reference)
    assert "it sends 2 pieces where the reference sends 4" in _why_less_overlap(ring(5, 6, pieces=2), reference)
    assert "one scratch buffer per rank" in _why_less_overlap(ring(5, 6), reference)
