"""Performance criteria on the simulator's counters, and the line a missed criterion points at."""

import pytest

from grader.course.manifest import Criterion, GpuThreshold, Stage
from grader.judge.hotspots import hotspots
from grader.judge.perf import PerformanceShortfall, expect_performance, totals


def launch(sectors, requests, lines):
    return {"kernel": "k", "block": [256, 1, 1], "counters": {"global_load_sectors": sectors, "global_load_requests": requests,
                                        "global_store_sectors": 0, "global_store_requests": 0},
            "lines": lines}


STRIDED = launch(36 * 32, 64, [{"line": 7, "space": "global", "kind": "load", "requests": 32, "sectors": 128},
                               {"line": 8, "space": "global", "kind": "load", "requests": 32, "sectors": 1024}])
COALESCED = launch(4 * 64, 64, [])


def test_totals_recompute_ratios_from_sums():
    assert totals([STRIDED, COALESCED])["sectors_per_request"] == (36 * 32 + 256) / 128


def test_extra_stores_name_first_the_kernel_the_reference_does_without():
    """(all-reduce audit) a copy kernel beside the adds doubled the stores: the add kernel's line,
    as busy as the copy's, was named; the kernel the reference does not launch comes first now."""
    def stores(kernel, line):
        return {"kernel": kernel, "counters": {}, "lines": [
            {"line": line, "space": "global", "kind": "store", "requests": 32, "sectors": 128}]}

    found = hotspots([stores("add_kernel", 87), stores("copy_kernel", 94)], ["global_stores"],
                     [stores("add_kernel", 80)])
    assert found == [("global stores", 94, "store", "global stores by line (share of warp requests): line 94 of "
                      "kernel 'copy_kernel' (50%), line 87 of kernel 'add_kernel' (50%); kernel 'copy_kernel' is one "
                      "the reference does without: are its stores needed?")]
    assert hotspots([stores("add_kernel", 87)], ["global_stores"], [stores("add_kernel", 80)])[0][3].endswith(
        "line 87 of kernel 'add_kernel' (100%)")


def test_hotspot_names_the_worst_line_of_the_missed_criterion():
    assert hotspots([STRIDED], ["sectors_per_request"]) == [
        ("global", 8, "load", "uncoalesced access at line 8 of kernel 'k' (load): 32.0 sectors per request "
         "(4 for a warp reading consecutive float32)")]
    assert hotspots([STRIDED], ["atomics"]) == []
    stores = launch(0, 0, [{"line": 9, "space": "global", "kind": "store", "requests": 32, "sectors": 1024,
                            "sample": {"itemsize": 8}}])
    assert hotspots([stores], ["sectors_per_request"])[0][3].endswith(  # learner audit: it said "reading" here
        "(store): 32.0 sectors per request (8 for a warp writing consecutive 8-byte elements)")


def test_a_conflicted_load_is_named_beside_the_worse_store_and_a_clean_one_is_not():
    def shared(*lines):
        return {"kernel": "k", "counters": {}, "lines": [
            {"line": line, "space": "shared", "kind": kind, "requests": 32, "wavefronts": 32 * cost}
            for line, kind, cost in lines]}

    both = hotspots([shared((30, "store", 32), (35, "load", 8), (36, "load", 2))], ["wavefronts_per_shared_request"])
    assert [(line, kind) for _, line, kind, _ in both] == [(30, "store"), (35, "load")]
    clean = hotspots([shared((30, "store", 32), (35, "load", 1))], ["wavefronts_per_shared_request"])
    assert [(line, kind) for _, line, kind, _ in clean] == [(30, "store")]


def test_shared_float64_words_are_two_passes_at_best_and_named_as_wide_words_not_bank_conflicts():
    """A float64 tile: a warp's 32 consecutive words are 256 bytes, two passes of 128 with no bank
    conflict. Named as what it is (8-byte words; float32 takes one pass), and a float64 line with
    more passes than two is a bank conflict against two."""
    def line(n, kind, cost, size):
        return {"line": n, "space": "shared", "kind": kind, "requests": 32, "wavefronts": 32 * cost,
                "sample": {"itemsize": size}}

    tile = {"kernel": "k", "counters": {}, "lines": [line(24, "store", 2, 8), line(34, "load", 1.5, 8)]}
    notes = hotspots([tile], ["wavefronts_per_shared_request"])
    assert [(n, kind) for _, n, kind, _ in notes] == [(24, "store"), (34, "load")], notes
    assert notes[0][3] == ("8-byte words in shared memory at line 24 of kernel 'k' (store): 2.0 wavefronts per "
                           "request, no bank conflict: a warp's 32 of them are 256 bytes, and a pass serves 128 (32 "
                           "banks of 4 bytes); 32 float32 take 1. Do the shared arrays need 8 bytes an element? "
                           "(cuda.shared.array(shape, float32))")
    conflicted = {"kernel": "k", "counters": {}, "lines": [line(24, "store", 16, 8), line(34, "load", 2, 8)]}
    (_, n, kind, note), (_, *wide) = hotspots([conflicted], ["wavefronts_per_shared_request"])
    assert (n, kind) == (24, "store") and note.startswith("bank-conflicted access at line 24") \
        and note.endswith("16.0 wavefronts per request (2 without bank conflicts for 8-byte words)"), note
    assert wide[:2] == [34, "load"] and wide[2].startswith("8-byte words in shared memory at line 34"), wide


def test_a_missed_criterion_says_where():
    criterion = Criterion(counter="sectors_per_request", max_ratio=1.25, label="coalescing")
    stage = Stage("ex", 1, "t", "f", ("a", "b", "c"), (criterion,), gpu=GpuThreshold("reference", 1.2))
    with pytest.raises(PerformanceShortfall, match=r"(?s)^coalescing: 18 against the reference's [^\n]*, "
                       r"worst at line 8 \(load\)\n.*where:.*line 8 of kernel 'k'"):
        expect_performance(stage, [STRIDED], [COALESCED])
    expect_performance(stage, [COALESCED], [COALESCED])



def naive_matmul(k_steps, c_in_loop):
    """A naive matmul's launch of 16 warps: per step, A broadcast (1 sector) and B coalesced (4);
    with `c_in_loop` (`C[row, col] += A[row, k] * B[k, col]` at line 79), C loaded and stored on
    every step too (4 sectors each, coalesced), else one store of C at line 80."""
    warps, per_step = 16, 3 if c_in_loop else 2
    loads = {"line": 79 if c_in_loop else 78, "space": "global", "kind": "load", "requests": warps * per_step * k_steps,
             "sectors": warps * (5 + 4 * c_in_loop) * k_steps, "sample": {"itemsize": 4}}
    stores = (k_steps + 1) if c_in_loop else 1
    store = {"line": 79 if c_in_loop else 80, "space": "global", "kind": "store", "requests": warps * stores,
             "sectors": 4 * warps * stores, "sample": {"itemsize": 4}}
    return {"kernel": "matmul_naive_kernel", "lines": [loads, store], "counters": {
        "global_load_sectors": loads["sectors"], "global_load_requests": loads["requests"],
        "global_store_sectors": store["sectors"], "global_store_requests": store["requests"],
        "max_global_loads_per_thread": per_step * k_steps, "max_global_stores_per_thread": stores}}


def test_coalesced_extra_accesses_are_not_called_uncoalesced():
    """Accumulating into C in global memory (the audit's M8) raises the average sectors per
    request with coalesced accesses only: no line is called uncoalesced at the ideal 4 sectors;
    the note says extra accesses, per thread against the reference's, at the line that makes them."""
    mine, ref = naive_matmul(64, True), naive_matmul(64, False)
    assert totals([mine])["sectors_per_request"] > 1.25 * totals([ref])["sectors_per_request"]
    assert hotspots([mine], ["sectors_per_request"]) == []
    [(space, line, kind, note)] = hotspots([mine], ["sectors_per_request"], [ref])
    assert (space, line, kind) == ("global extra", 79, "load, store")
    assert "uncoalesced access" not in note and "store up to 65 elements each (the reference's 1)" in note
    criterion = Criterion(counter="sectors_per_request", max_ratio=1.25, label="coalescing")
    stage = Stage("ex", 1, "t", "f", ("a", "b", "c"), (criterion,), gpu=GpuThreshold("reference", 1.2))
    with pytest.raises(PerformanceShortfall, match=r"^coalescing: [^\n]*, not from uncoalesced access but from extra "
                       r"global memory accesses, each coalesced, at line 79 \(load, store\)\n"):
        expect_performance(stage, [mine], [ref], modelled=False)


def test_a_gpu_timing_faster_than_the_copy_bandwidth_or_without_kernels_is_refused():
    """The judge's lower bound on what the student's runner reports (its clock is the upper one)."""
    from grader.errors import RunnerError
    from grader.judge.perf import WrongAnswer, _plausible
    from grader.judge.student import TimedResult

    honest = TimedResult([0.05] * 5, 1, "precise", "GPU", [], 1.0)
    _plausible(honest, 50e-6, 64e6, 3e12, stock=False)  # 64 MB in 50 us: 1.3 TB/s, under a 3 TB/s copy
    with pytest.raises(RunnerError, match="faster than this GPU's copy bandwidth"):
        _plausible(honest, 5e-6, 64e6, 3e12, stock=False)  # 13 TB/s
    with pytest.raises(WrongAnswer, match="launched no kernel"):
        _plausible(TimedResult([0.0] * 5, 0, "precise", "GPU", [], 1.0), 0.0, 64e6, 3e12, stock=False)
    _plausible(honest, 5e-6, 64e6, 3e12, stock=True)  # numba's stock simulator: no bound to apply


def test_a_missed_atomics_criterion_names_the_line_with_most_atomics():
    launches = [{"kernel": "k", "counters": {}, "lines": [
        {"line": 12, "space": "global", "kind": "atomic", "atomics": 40000},
        {"line": 20, "space": "global", "kind": "atomic", "atomics": 192}]}]
    assert [(line, note[:40]) for _, line, _, note in hotspots(launches, ["atomics"])] == [
        (12, "most atomic operations at line 12 of ker")]


def test_a_missed_traffic_criterion_lists_the_lines_that_load():
    launches = [{"kernel": "scale", "counters": {}, "lines": [
        {"line": 5, "space": "global", "kind": "load", "requests": 100, "sectors": 400}]},
                {"kernel": "add", "counters": {}, "lines": [
        {"line": 9, "space": "global", "kind": "load", "requests": 300, "sectors": 1200}]}]
    assert hotspots(launches, ["global_loads"]) == [("global loads", 9, "load", (
        "global loads by line (share of warp requests): line 9 of kernel 'add' (75%), line 5 of kernel 'scale' (25%)"))]


def test_on_a_gpu_the_models_prediction_is_kept_beside_the_measurement():
    from grader import perf_model
    from grader.judge import perf

    assert perf_model.preset_for("NVIDIA H200 NVL").key == "H200" and perf_model.preset_for("Tesla T4").key == "T4"
    assert perf_model.preset_for("NVIDIA GeForce RTX 4090") is None
    criterion = Criterion(counter="sectors_per_request", max_ratio=5.0, label="coalescing")
    stage = Stage("ex", 1, "t", "f", ("a", "b", "c"), (criterion,), gpu=GpuThreshold("reference", 1.2))
    perf.take_timing()
    expect_performance(stage, [STRIDED], [COALESCED], modelled=False)  # the simulator's launches, beside
    model = perf.model_beside(stage, "NVIDIA H200")
    assert model["gpu"] == "H200" and model["ratio"] > 1 and model["seconds"] > model["reference_seconds"]
    # memory-bound at steady state: the modelled bandwidth is the preset's DRAM bandwidth
    assert model["bound"] == "memory" and model["gbs"] == round(perf_model.gpu("H200").dram_bps / 1e9, 1)
    assert perf.model_beside(stage, "NVIDIA H200") is None, "used once"
    expect_performance(stage, [STRIDED], [COALESCED], modelled=False)
    perf.take_timing()  # a new test starts: nothing of the last one's
    assert perf.model_beside(stage, "NVIDIA H200") is None


def test_a_slow_verdict_names_the_work_done_most_more_than_the_references():
    """A kernel whose criteria hold but whose modelled time is slow is told what it does more of
    (every block of a grid stride on blockDim re-reads the whole array): the largest ratio, from
    1.5x up."""
    from grader.judge.perf import heaviest

    ref = {"global_loads": 100, "global_load_sectors": 50, "atomics": 0, "threads_launched": 256}
    got = {"global_loads": 3200, "global_load_sectors": 1000, "atomics": 7, "threads_launched": 256}
    assert heaviest(got, ref) == ("; its kernels load 32.0x the reference's elements from global memory "
                                  "(3,200 against 100): more than any access pattern adds (an uncoalesced float32 "
                                  "load reads at most 8x its sectors), so the same elements are read by many "
                                  "threads: do several blocks, or every thread, loop over the same elements?")
    assert heaviest({**ref, "global_loads": 140}, ref) == ""  # under 1.5x, and atomics the reference has none of
    # 8x or less may be the layout (a strided load's sectors): not called re-reading
    assert heaviest({**ref, "global_load_sectors": 400}, ref) == (
        "; its kernels read 8.0x the reference's global memory sectors (400 against 50)")


def test_a_criterion_per_warp_divides_both_sides_by_the_warps_launched():
    """One atomic per warp, whatever the block size: 512 threads a block launch more warps, and
    more atomics, than the reference's 256 (the last block's idle warps too); 32 per warp fails."""
    def atomics(count, grid, block):
        return {"kernel": "k", "grid": [grid, 1, 1], "block": [block, 1, 1], "counters": {"atomics": count},
                "lines": []}

    criterion = Criterion(counter="atomics", max_ratio=1.0, label="atomic operations per warp", per="warp")
    stage = Stage("ex", 1, "t", "f", ("a", "b", "c"), (criterion,), gpu=GpuThreshold("reference", 1.2))
    reference = [atomics(157 * 8, 157, 256)]
    expect_performance(stage, [atomics(79 * 16, 79, 512)], reference, modelled=False)
    assert totals([atomics(1, 79, 512), atomics(1, 3, 33)])["warps_launched"] == 79 * 16 + 3 * 2
    with pytest.raises(PerformanceShortfall, match=r"^atomic operations per warp: 32 against the reference's 1 "):
        expect_performance(stage, [atomics(157 * 256, 157, 256)], reference, modelled=False)
    plain = Criterion(counter="atomics", max_ratio=1.0, label="atomic operations")
    with pytest.raises(PerformanceShortfall, match="atomic operations: 1,264 against the reference's 1,256"):
        expect_performance(Stage("ex", 1, "t", "f", ("a", "b", "c"), (plain,), gpu=GpuThreshold("reference", 1.2)),
                           [atomics(79 * 16, 79, 512)], reference, modelled=False)


def test_a_criterion_per_block_divides_both_sides_by_the_blocks_launched():
    """One atomic per block (the grid-stride reduction): 512-thread blocks keep it; one per warp,
    8 a block of 256, fails."""
    def atomics(count, grid, block):
        return {"kernel": "k", "grid": [grid, 1, 1], "block": [block, 1, 1], "counters": {"atomics": count},
                "lines": []}

    criterion = Criterion(counter="atomics", max_ratio=1.0, label="atomic operations per block", per="block")
    stage = Stage("ex", 3, "t", "f", ("a", "b", "c"), (criterion,), gpu=GpuThreshold("reference", 1.2))
    reference = [atomics(1056, 1056, 256)]
    expect_performance(stage, [atomics(528, 528, 512)], reference, modelled=False)
    assert totals([atomics(1, 79, 512), atomics(1, 3, 33)])["blocks_launched"] == 82
    with pytest.raises(PerformanceShortfall, match=r"^atomic operations per block: 8 against the reference's 1 "):
        expect_performance(stage, [atomics(1056 * 8, 1056, 256)], reference, modelled=False)


def test_counts_are_told_in_digits_not_scientific_notation():
    """The audit: 'shared memory loads ... 1.17965e+06 against the reference's 737280'."""
    from grader.judge.perf import shortfall

    loads = Criterion(counter="shared_loads", max_ratio=1.25, label="shared memory loads")
    assert shortfall(loads, 1179648.0, 737280.0) == \
        "shared memory loads: 1,179,648 against the reference's 737,280 (at most 921,600 allowed)"
    ratio = Criterion(counter="sectors_per_request", max_ratio=1.25, label="coalescing")
    # (audit) a ratio to 3 digits: "31.9973 against the reference's 3.99996 (at most 4.99994 allowed)" was noise
    assert shortfall(ratio, 3.00312, 2.01242) == "coalescing: 3 against the reference's 2.01 (at most 2.52 allowed)"
    from grader.report.html import _criterion  # the feedback page reads the counts back
    from grader.report.results import Status, TestResult

    failed = TestResult("ex::t", "ex", 1, 1, 0, Status.FAILED, shortfall(loads, 1179648.0, 737280.0))
    assert _criterion(failed) == ("shared memory loads", 1179648.0, 737280.0, 921600.0)


def test_a_grid_stride_stage_models_the_students_grid_as_fixed_however_the_stride_is_spelled():
    """The reference's grid-stride kernel reads its grid's size, so its grid stays as launched at
    full load. A student's kernel with the same grid and twice the loads, its stride written from a
    module constant (no `cuda.gridsize` to see), is modelled with its grid fixed too: twice the
    reference's time, not sixteen times faster for filling a GPU its grid never fills."""
    from grader.judge.perf import modelled_speed

    def grid_stride(sectors, reads_grid_size):
        return {"kernel": "k", "grid": [16, 1, 1], "block": [256, 1, 1], "shared_bytes": 0, "lines": [],
                "counters": {"global_load_sectors": sectors, "global_store_sectors": 0,
                             "reads_grid_size": reads_grid_size}}

    stage = Stage("ex", 3, "t", "f", ("a", "b", "c"), (), gpu=GpuThreshold("reference", 1.2))
    ratio, _ = modelled_speed(stage, [grid_stride(2 << 20, 0)], [grid_stride(1 << 20, 1)])
    assert ratio == pytest.approx(2.0)
    ratio, _ = modelled_speed(stage, [grid_stride(1 << 20, 1)], [grid_stride(1 << 20, 1)])
    assert ratio == pytest.approx(1.0)


def test_the_feedback_names_an_occupancy_lower_than_the_references():
    from grader.judge.perf import timing_sentence

    t = {"source": "modelled", "gpu": "H100", "seconds": 1.2e-6, "bound": "memory", "bandwidth_fraction": 0.83,
         "reference_seconds": 1e-6, "ratio": 1.2, "max_time_ratio": 1.2, "occupancy": 0.5,
         "reference_occupancy": 1.0, "registers": 64}
    assert ", 83% of its memory bandwidth, occupancy 50% (64 registers a thread; the reference's: 100%); " \
           "the reference: 1 us" in timing_sentence(t)
    assert "occupancy" not in timing_sentence({**t, "occupancy": 1.0})


def test_float64_in_the_loops_is_named_as_what_makes_a_kernel_issue_bound():
    """numba makes `acc = 0.0` a float64: the instruction profile counts the loops' float64 arithmetic and
    conversions, and the slow verdict names them, not unrolling."""
    from grader.judge.perf import modelled_speed

    def tile_loop(fp64):
        return {"kernel": "k", "grid": [64, 1, 1], "block": [256, 1, 1], "shared_bytes": 0, "lines": [],
                "counters": {"global_load_sectors": 1000, "global_store_sectors": 100,
                             "loop_warp_instructions": 10 ** 7, "loop_fp64_instructions": fp64,
                             "loop_fp64_conversions": fp64, "load_round_trips": 10}}

    stage = Stage("ex", 3, "t", "f", ("a", "b", "c"), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    ratio, sentence = modelled_speed(stage, [tile_loop(10 ** 6)], [tile_loop(0)])
    assert ratio > 1.5 and "issue-bound (its loops compute in float64: 20% of their instructions" in sentence, sentence
    assert "start accumulators from float32(0.0)" in sentence and "did not unroll" not in sentence
    ratio, sentence = modelled_speed(stage, [tile_loop(0)], [tile_loop(0)])
    assert ratio == pytest.approx(1.0) and "float64" not in sentence


def test_an_issue_bound_kernel_whose_requests_have_few_active_lanes_is_told_its_threads_sit_out():
    """A tree whose working threads are spread over every warp (t % (2 * s) == 0): every warp issues
    every step for a few lanes. Its requests' active lanes against the reference's say so, before the
    instruction count's guess at unrolling."""
    from grader.judge.perf import modelled_speed

    def tree(requests):
        return {"kernel": "k", "grid": [64, 1, 1], "block": [256, 1, 1], "shared_bytes": 1024, "lines": [],
                "counters": {"global_load_sectors": 2048, "global_store_sectors": 8, "shared_loads": 510 * 64,
                             "shared_stores": 511 * 64, "shared_requests": requests * 64, "global_loads": 256 * 64,
                             "global_stores": 64, "global_load_requests": 8 * 64, "global_store_requests": 64,
                             "loop_warp_instructions": 2000 * requests * 64, "load_round_trips": 8 * 64,
                             "loop_fp64_instructions": 0, "loop_fp64_conversions": 0}}

    stage = Stage("ex", 1, "t", "f", ("a", "b", "c"), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    ratio, sentence = modelled_speed(stage, [tree(149)], [tree(44)])
    assert ratio > 1.2 and "for threads that mostly sit out: 8.1 of a warp's 32 lanes take part in a memory " \
        "request on average, the reference's 24.1" in sentence, sentence
    assert "did not unroll" not in sentence
    _, sentence = modelled_speed(stage, [tree(60)], [tree(44)])  # (fewer lanes, not a fraction of them)
    assert "sit out" not in sentence and "did not unroll" in sentence, sentence


def test_a_grid_stride_loop_on_a_grid_sized_to_the_data_is_modelled_as_the_data_sized_reference():
    """SAXPY written as a grid-stride loop, launched on (n + 255) // 256 blocks: each thread loads
    its two elements once, as the reference's threads do. Modelled as filling the GPU like the
    reference (it was 3.75x the reference's time as a fixed grid of its test's few blocks); a
    grid that makes its threads loop stays a fixed grid."""
    from grader.judge.perf import modelled_speed

    def saxpy(blocks, reads_grid_size, per_thread):
        n = blocks * 256
        return {"kernel": "saxpy", "grid": [blocks, 1, 1], "block": [256, 1, 1], "shared_bytes": 0, "lines": [],
                "counters": {"global_load_sectors": 2 * n // 8, "global_store_sectors": n // 8,
                             "reads_grid_size": reads_grid_size, "max_global_loads_per_thread": per_thread}}

    stage = Stage("ex", 3, "t", "f", ("a", "b"), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    ratio, _ = modelled_speed(stage, [saxpy(64, 1, 2)], [saxpy(64, 0, 2)])
    assert ratio == pytest.approx(1.0)
    ratio, _ = modelled_speed(stage, [saxpy(8, 1, 16)], [saxpy(64, 0, 2)])  # 8 blocks, 8 elements a thread
    assert ratio > 1.5


def test_a_memory_bound_kernel_on_too_few_blocks_is_told_its_warps_in_flight():
    """A grid-stride loop on 32 blocks where the reference fills the GPU: memory-bound at 5% of the
    bandwidth, because too few warps have loads on their way, not because of its accesses."""
    from grader.judge.perf import modelled_speed

    def grid_stride(blocks):
        n = 1 << 20
        return {"kernel": "k", "grid": [blocks, 1, 1], "block": [256, 1, 1], "shared_bytes": 0, "lines": [],
                "counters": {"global_load_sectors": 2 * n // 8, "global_store_sectors": n // 8, "reads_grid_size": 1}}

    stage = Stage("ex", 2, "t", "f", ("a", "b"), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    ratio, sentence = modelled_speed(stage, [grid_stride(32)], [grid_stride(1056)])
    assert ratio > 10 and "memory-bound (too few warps in flight: its launch keeps 5% of the warps that " \
        "saturate this GPU's memory busy (the reference's: 100%)" in sentence, sentence
    _, sentence = modelled_speed(stage, [grid_stride(1056)], [grid_stride(1056)])
    assert "too few warps" not in sentence


def test_an_occupancy_lost_to_small_blocks_is_told_as_such_not_as_registers():
    """Blocks of 32 threads: an SM holds at most 32 blocks, so half its warps; the feedback names the
    blocks, not the few registers the kernel uses."""
    from grader.judge.perf import modelled_speed

    def add(threads):
        n = 1 << 22
        return {"kernel": "add_kernel", "grid": [n // threads, 1, 1], "block": [threads, 1, 1], "shared_bytes": 0,
                "lines": [], "compiled": {"registers": 15},
                "counters": {"global_load_sectors": n // 4, "global_store_sectors": n // 8}}

    stage = Stage("ex", 1, "t", "f", ("a", "b"), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    _, sentence = modelled_speed(stage, [add(32)], [add(256)])
    assert "occupancy 50% (an SM holds at most 32 blocks, and blocks of 32 threads leave it part empty: use more " \
           "threads a block; the reference's: 100%)" in sentence, sentence
    assert "registers" not in sentence


def test_a_grid_stride_loop_that_waits_on_every_element_is_latency_bound_and_told_why():
    """On the grid of a grid-stride stage, the same traffic with a DRAM round trip for every element
    (each store before the next element's loads) against one for four (the loads of four elements
    issued first): the model's latency limit, and the feedback says what makes the warps wait."""
    from grader.judge.perf import modelled_speed

    n = 1 << 24

    def grid_stride(elements_a_round_trip, reads=1):
        return {"kernel": "k", "grid": [1056, 1, 1], "block": [256, 1, 1], "shared_bytes": 0, "lines": [],
                "counters": {"global_load_sectors": reads * 8 * n // 32, "global_store_sectors": 4 * n // 32,
                             "reads_grid_size": 1, "loop_warp_instructions": n // 8,
                             "loop_fp64_instructions": 0, "loop_fp64_conversions": 0,
                             "global_load_requests": reads * 2 * n // 32,
                             "load_round_trips": reads * n // 32 // elements_a_round_trip}}

    stage = Stage("ex", 2, "t", "f", ("a", "b", "c"), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H200"))
    ratio, sentence = modelled_speed(stage, [grid_stride(1)], [grid_stride(4)])
    assert ratio == pytest.approx(1.41, abs=0.01)
    assert "latency-bound (its warps wait on memory 4.0x as often as the reference's for the same loads: a load " \
           "issued only after a store" in sentence, sentence
    ratio, sentence = modelled_speed(stage, [grid_stride(4)], [grid_stride(4)])
    assert ratio == pytest.approx(1.0) and "wait on memory" not in sentence
    # each element read twice, one round trip for two: twice the loads, and twice the waits a load
    ratio, sentence = modelled_speed(stage, [grid_stride(2, reads=2)], [grid_stride(4)])
    assert "latency-bound (its warps wait on memory 4.0x as often as the reference's: they load 2.0x as much (the " \
           "same elements read by many threads, or each thread walking more than its share of the data), and wait " \
           "2.0x as often a load" in sentence, sentence
    # the same waits a load, on twice the loads
    _, sentence = modelled_speed(stage, [grid_stride(2, reads=2)], [grid_stride(2)])
    assert "wait on memory 2.0x as often as the reference's because they load 2.0x as much: the same elements" \
        in sentence, sentence


def test_a_kernel_looping_over_the_data_on_one_block_is_modelled_on_that_block_not_a_full_gpu():
    """(audit) A tree reduction whose 256 threads loop over all the data on one block reads no grid
    size, so it was modelled as filling the GPU: 0.25x the reference's time, where a GPU runs it about
    100x slower. The judge sees its grid stay one block while the input grows; the model then keeps
    that grid, and the verdict says why."""
    from grader.judge.grid import GridGrowth
    from grader.judge.perf import modelled_speed

    def tree(n, blocks):
        return {"kernel": "reduce_tree_kernel", "grid": [blocks, 1, 1], "block": [256, 1, 1], "shared_bytes": 1024,
                "lines": [], "counters": {"global_load_sectors": n // 8, "global_store_sectors": blocks,
                                          "max_global_loads_per_thread": -(-n // (256 * blocks))}}

    one_block, sized = GridGrowth(), GridGrowth()
    for n in (1, 1025, 40000):
        one_block.saw([tree(n, 1)], 4 * n)
        sized.saw([tree(n, -(-n // 256))], 4 * n)
    assert one_block.fixed("reduce_tree_kernel") and not sized.fixed("reduce_tree_kernel")
    stage = Stage("ex", 1, "t", "f", ("x",), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    ratio, sentence = modelled_speed(stage, one_block.marked([tree(40000, 1)]), [tree(40000, 157)])
    assert ratio > 50 and "its grid stays 1 block of 256 threads whatever the input's size" in sentence, sentence
    ratio, _ = modelled_speed(stage, sized.marked([tree(40000, 157)]), [tree(40000, 157)])
    assert ratio == pytest.approx(1.0)


def test_a_grid_that_grows_or_one_seen_at_one_size_or_on_a_thread_an_element_is_not_fixed():
    from grader.judge.grid import GridGrowth

    def launch(blocks, threads=256):
        return {"kernel": "k", "grid": [blocks, 1, 1], "block": [threads, 1, 1]}

    seen = GridGrowth()
    seen.saw([launch(1)], 4000)
    assert not seen.fixed("k")  # one size: nothing to tell
    seen.saw([launch(1)], 40000)  # 10x the input: not enough growth to tell
    assert not seen.fixed("k")
    coarse = GridGrowth()  # a grid sized for the machine, a thread for every few elements: fills anyway
    for nbytes in (4096, 4 << 20):
        coarse.saw([launch(1056)], nbytes)
    assert not coarse.fixed("k")


def test_a_fixed_grid_may_be_two_launches_the_same_for_every_n():
    """(audit) A grid-stride pass on grid_blocks() blocks, then one block adding the blocks' sums:
    both fixed, yet "the grid must be the same for every n" listed the same two launches for both n."""
    from grader.judge.correctness import WrongAnswer
    from grader.judge.grid import expect_one_grid

    def launches(*blocks):
        return [{"grid": [b, 1, 1], "block": [256, 1, 1]} for b in blocks]

    expect_one_grid({100: launches(1056, 1), 540679: launches(1056, 1)})
    with pytest.raises(WrongAnswer, match="n=100 launched 1 block of 256 threads; n=540,679 launched 2,113 blocks"):
        expect_one_grid({100: launches(1), 540679: launches(2113)})


def test_a_grid_stride_grid_of_half_the_threads_is_told_its_threads_walk_twice_as_far():
    """(audit) THREADS_PER_BLOCK = 128 with grid_blocks()'s 8 blocks an SM: half of each SM, each
    thread walking twice the elements; 73% of the speed points with "latency-bound" and no why."""
    from grader.judge.perf import modelled_speed

    def grid_stride(threads):
        n = 1 << 21
        return {"kernel": "k", "grid": [1056, 1, 1], "block": [threads, 1, 1], "shared_bytes": 0, "lines": [],
                "counters": {"global_load_sectors": n // 8, "global_store_sectors": 1056, "reads_grid_size": 1,
                             "load_round_trips": 1056 * threads // 32 * n // (1056 * threads)}}

    stage = Stage("ex", 3, "t", "f", ("x",), (), gpu=GpuThreshold("reference", 1.2, model_gpu="H100"))
    ratio, sentence = modelled_speed(stage, [grid_stride(128)], [grid_stride(256)])
    assert ratio > 1.2 and "its grid, 1,056 blocks of 128 threads, runs 135,168 threads where the reference's runs " \
        "270,336: each thread walks 2.0x as many elements" in sentence and "2,048 on this GPU" in sentence, sentence
