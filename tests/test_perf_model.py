"""The simulator's performance model: presets as data, times from counters, the speed credit."""

import pytest

from grader import perf_model
from grader.course.manifest import GpuThreshold


def _launch(sectors=0, wavefronts=0, atomics=0, warp_ops=0, barriers=0, grid=4096, block=256, shared=0):
    return {"grid": [grid, 1, 1], "block": [block, 1, 1], "shared_bytes": shared,
            "counters": {"global_load_sectors": sectors, "global_store_sectors": 0,
                         "bank_conflict_wavefronts": wavefronts, "atomics": atomics, "warp_ops": warp_ops,
                         "barriers": barriers}}


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


def test_a_small_grid_is_launch_bound_and_leaves_bandwidth_unused():
    g = perf_model.gpu("H100")
    tiny = perf_model.launch_time(_launch(sectors=4, grid=1, block=32), g)
    assert tiny.bound == "launch" and tiny.seconds == pytest.approx(g.launch_overhead_us * 1e-6, rel=0.1)
    few_blocks = perf_model.launch_time(_launch(sectors=1 << 22, grid=8), g)
    many_blocks = perf_model.launch_time(_launch(sectors=1 << 22, grid=8192), g)
    assert few_blocks.seconds > 10 * many_blocks.seconds


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
