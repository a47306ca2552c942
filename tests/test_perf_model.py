"""The simulator's performance model: presets as data, times from counters, the speed credit."""

import pytest

from grader import perf_model
from grader.course.manifest import GpuThreshold


def _launch(sectors=0, wavefronts=0, atomics=0, warp_ops=0, barriers=0, grid=4096, block=256, shared=0,
            same_address=0, reads_grid_size=0):
    return {"grid": [grid, 1, 1], "block": [block, 1, 1], "shared_bytes": shared,
            "counters": {"global_load_sectors": sectors, "global_store_sectors": 0,
                         "bank_conflict_wavefronts": wavefronts, "atomics": atomics, "warp_ops": warp_ops,
                         "barriers": barriers, "atomic_same_address": same_address,
                         "reads_grid_size": reads_grid_size}}


def test_the_presets_are_data_with_the_published_bandwidths():
    presets = perf_model.presets()
    assert {"H100", "H200", "A100", "L4", "T4"} <= set(presets)
    assert presets["H200"].dram_bandwidth_gbs > presets["H100"].dram_bandwidth_gbs > presets["A100"].dram_bandwidth_gbs
    with pytest.raises(KeyError, match="no GPU preset"):
        perf_model.gpu("GTX 480")


def test_a_streaming_kernel_at_full_load_runs_at_the_memory_bandwidth():
    g = perf_model.gpu("H100")
    nbytes = 3 * 4 * (1 << 24)  # a, b, out of 2^24 float32
    m = perf_model.launch_time(_launch(sectors=nbytes // 32), g, steady=True)
    assert m.bound == "memory" and m.seconds == pytest.approx(nbytes / g.dram_bps)
    assert m.bandwidth_fraction(g) == pytest.approx(1.0)
    assert perf_model.copy_time(nbytes, g) > m.seconds / 2


def test_uncoalesced_conflicted_and_serialised_work_is_slower():
    g = perf_model.gpu("A100")
    base = perf_model.launch_time(_launch(sectors=1 << 20), g, steady=True).seconds
    assert perf_model.launch_time(_launch(sectors=8 << 20), g, steady=True).seconds == pytest.approx(8 * base)
    shared = perf_model.launch_time(_launch(sectors=1 << 10, wavefronts=32 << 20), g, steady=True)
    assert shared.bound == "shared memory"
    atomics = perf_model.launch_time(_launch(sectors=1 << 10, atomics=1 << 24), g, steady=True)
    assert atomics.bound == "atomics"


def test_atomics_on_one_address_queue_as_measured_on_an_h200():
    """The shuffle reduction's reference on an H200 (2026-12-04): one float atomic per warp to one
    address, 2^24 floats: 2^19 atomics, 929 us measured, where the same kernel's bytes alone take
    14 us. Queued at one address, the model says so within 5%; spread over addresses (one per
    warp to its own element), the same atomics cost their throughput only, and the loads' latency
    bounds the kernel."""
    g = perf_model.gpu("H200")
    n = 1 << 24
    one_address = perf_model.launch_time(_launch(sectors=4 * n // 32, atomics=n // 32, same_address=n // 32,
                                                 grid=n // 256), g, steady=True)
    assert one_address.bound == "atomics" and one_address.seconds == pytest.approx(929e-6, rel=0.05)
    spread = perf_model.launch_time(_launch(sectors=4 * n // 32, atomics=n // 32, same_address=1, grid=n // 256),
                                    g, steady=True)
    # one load a thread: 8 KB an SM in flight, short of the DRAM's bandwidth x latency
    assert spread.bound == "latency" and spread.seconds < one_address.seconds / 20


def test_a_grid_stride_loop_keeps_its_grid_at_full_load_as_measured_on_an_h200():
    """Vector add's grid-stride reference as it was then (32 blocks of 256, 2^26 floats) streamed at
    227 GB/s on an H200 (2026-12-04), the reduction's (16 blocks) at 128 GB/s: at full load a grid that reads its
    own size stays as launched; the same grid sized to the data fills the GPU."""
    g = perf_model.gpu("H200")
    n = 1 << 26
    for blocks, nbytes, measured_gbs in ((32, 12 * n, 227), (16, 4 * n, 128)):
        fixed = perf_model.launch_time(_launch(sectors=nbytes // 32, grid=blocks, reads_grid_size=1), g, steady=True)
        assert nbytes / fixed.seconds / 1e9 == pytest.approx(measured_gbs, rel=0.1)
        sized = perf_model.launch_time(_launch(sectors=nbytes // 32, grid=blocks), g, steady=True)
        assert sized.bandwidth_fraction(g) == pytest.approx(1.0)


def test_a_small_grid_is_launch_bound_and_leaves_bandwidth_unused():
    g = perf_model.gpu("H100")
    tiny = perf_model.launch_time(_launch(sectors=4, grid=1, block=32), g)
    assert tiny.bound == "launch"  # the launch and one DRAM round trip
    assert tiny.seconds == pytest.approx((g.launch_overhead_us + g.memory_latency_ns / 1e3) * 1e-6, rel=1e-3)
    few_blocks = perf_model.launch_time(_launch(sectors=1 << 22, grid=8), g)
    many_blocks = perf_model.launch_time(_launch(sectors=1 << 22, grid=8192), g)
    assert few_blocks.seconds > 10 * many_blocks.seconds


def test_a_shared_memory_tree_is_latency_bound_as_measured_on_an_h200():
    """The tree reduction's reference on an H200 (2026-12-04): blocks of 256 that load once, then
    wait on 9 barriers. Its first pass over 2^26 floats took 394.5 us (the fit: 680 GB/s where the
    throughput limits say 4,800); the whole call over 2^24 floats (3 launches, as graded) took
    112.6 us, which the fit predicts. A streaming kernel of the same grid stays memory-bound."""
    g = perf_model.gpu("H200")

    def tree(n, steady):
        blocks = -(-n // 256)
        return perf_model.launch_time(_launch(sectors=-(-4 * n // 32) + blocks, wavefronts=45 * blocks,
                                              barriers=9 * blocks, grid=blocks), g, steady=steady)

    first = tree(1 << 26, steady=True)
    assert first.bound == "latency" and first.seconds == pytest.approx(394.5e-6, rel=0.02)
    call = sum(tree(n, False).seconds for n in (1 << 24, 1 << 16, 1 << 8))
    assert call == pytest.approx(112.6e-6, rel=0.05)


def _streaming(n, elements_a_round_trip, blocks=None, g=None):
    """A vector add over n floats (two loads and a store an element) on `blocks` blocks of 256 (n /
    256: one thread an element; fewer: a grid-stride loop), whose warps wait on one DRAM round
    trip for every `elements_a_round_trip` elements of a thread."""
    blocks = blocks or n // 256
    launch = _launch(sectors=12 * n // 32, grid=blocks, reads_grid_size=int(blocks < n // 256))
    launch["counters"]["load_round_trips"] = n // 32 / elements_a_round_trip
    return perf_model.launch_time(launch, g or perf_model.gpu("H200"), steady=True)


def test_a_warps_round_trips_bound_a_streaming_kernel_as_measured_on_an_h200():
    """Vector add's one-thread-an-element reference on an H200 (2026-12-04): 237 us over 2^26 floats,
    3,398 GB/s, 71% of the bandwidth: each warp's one pair of loads in flight is too few bytes for
    the latency of a loaded DRAM (the fit of `loaded_latency_ns`). The same traffic with four
    elements' loads in flight before a warp waits is memory-bound; the grid-stride loop on 32
    blocks (each thread storing an element before it loads the next) was measured at 3.55 ms."""
    n = 1 << 26
    one = _streaming(n, 1)
    assert one.bound == "latency" and one.seconds == pytest.approx(237e-6, rel=0.01)
    assert one.bandwidth_fraction(perf_model.gpu("H200")) == pytest.approx(0.71, abs=0.01)
    four = _streaming(n, 4)
    assert four.bound == "memory" and four.bandwidth_fraction(perf_model.gpu("H200")) == pytest.approx(1.0)
    few_blocks = _streaming(n, 1, blocks=32)
    assert few_blocks.seconds == pytest.approx(3.55e-3, rel=0.1)
    # no round trips counted (no compile check): one a warp
    assert perf_model.launch_time(_launch(sectors=12 * n // 32, grid=n // 256), perf_model.gpu("H200"),
                                  steady=True).seconds == pytest.approx(one.seconds)


def test_calls_add_their_launches():
    g = perf_model.gpu("T4")
    one = perf_model.call_time([_launch(sectors=1 << 20)], g, steady=True)
    two = perf_model.call_time([_launch(sectors=1 << 20)] * 2, g, steady=True)
    assert two.seconds == pytest.approx(2 * one.seconds) and two.global_bytes == 2 * one.global_bytes


def test_speed_credit_is_full_up_to_the_threshold_and_its_margin_then_linear_to_zero():
    t = GpuThreshold("reference", max_time_ratio=1.2)
    assert t.credit(1.0) == t.credit(1.26) == 1.0
    assert t.credit(2.4) == t.credit(5.0) == 0.0
    assert 0 < t.credit(2.0) < t.credit(1.5) < 1
    assert GpuThreshold("reference", 1.2, zero_time_ratio=3.0).credit(2.4) > t.credit(2.4)


def test_registers_limit_the_blocks_an_sm_holds_as_ptxas_reports_them():
    """Registers are allocated per warp in units of 256 from each of 4 sub-partitions (64 K a SM on
    every preset): the coarsened matmul reference's 50 registers hold 4 blocks of 256 threads, the
    tiled one's 32 hold 8; unknown (0) leaves the warp and shared-memory limits."""
    g = perf_model.gpu("H100")
    assert perf_model.resident_blocks(g, 256, 8192, registers=50) == 4
    assert perf_model.resident_blocks(g, 256, 2048, registers=32) == 8
    assert perf_model.resident_blocks(g, 256, 2048) == 8
    assert perf_model.resident_blocks(g, 1024, 0, registers=255) == 1  # does not fit: one, as the launch reports
    assert perf_model.registers({"compiled": {"available": True, "registers": 50}}) == 50
    assert perf_model.registers({"compiled": {"registers": 40}}) == 40 and perf_model.registers({"compiled": {}}) == 0


def test_an_occupancy_registers_limit_leaves_bandwidth_unused_at_full_load():
    """Half the warps resident (64 registers a thread: 32 of 64 warps) is short of the 60% that
    saturates DRAM: the same traffic takes 1.2x as long, and the model says why."""
    g = perf_model.gpu("H100")
    full = perf_model.launch_time(_launch(sectors=1 << 20), g, steady=True)
    heavy = perf_model.launch_time({**_launch(sectors=1 << 20), "compiled": {"registers": 64}}, g, steady=True)
    assert (full.occupancy, heavy.occupancy, heavy.registers) == (1.0, 0.5, 64)
    assert heavy.seconds == pytest.approx(full.seconds * 0.6 / 0.5)
    light = perf_model.launch_time({**_launch(sectors=1 << 20), "compiled": {"registers": 40}}, g, steady=True)
    assert light.seconds == pytest.approx(full.seconds) and light.occupancy == 0.75


def test_registers_count_on_both_sides_or_on_neither():
    """A reference recorded without registers (or a machine without the toolchain) against a
    student's with them: neither side's occupancy counts them, so the student is not judged by a
    limit the reference escaped."""
    from grader.judge.perf import _comparable

    mine, theirs = [{**_launch(sectors=1 << 20), "compiled": {"registers": 128}}], [_launch(sectors=1 << 20)]
    a, b = _comparable(mine, theirs)
    assert perf_model.registers(a[0]) == 0 and a[0]["counters"] == mine[0]["counters"]
    both = [{**_launch(sectors=1 << 20), "compiled": {"registers": 32}}]
    a, b = _comparable(mine, both)
    assert perf_model.registers(a[0]) == 128 and perf_model.registers(b[0]) == 32
