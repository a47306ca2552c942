"""Simulated events' times (grader/sim/event_clock.py): the performance model's timeline of what the
host issued, so `cuda.event_elapsed_time` agrees with what `gpugrade run`'s table models."""

import numpy as np
import pytest
from numba import cuda

from grader import perf_model, sim


@cuda.jit
def scale(out, a):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = 2.0 * a[i]


@cuda.jit
def scale_strided(out, a):
    for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
        out[i] = 2.0 * a[i]


N = 1 << 14


def _timed(launches: int = 1, stream=0, kernel=scale, blocks=N // 256):
    """(ms between two events around `launches` launches of `kernel` on `stream`, the records)."""
    a = cuda.to_device(np.ones(N, np.float32))
    out = cuda.device_array_like(a)
    start, end = cuda.event(), cuda.event()
    with sim.trace() as records:
        start.record(stream)
        for _ in range(launches):
            kernel[blocks, 256, stream](out, a)
        end.record(stream)
    end.synchronize()
    return cuda.event_elapsed_time(start, end), [r.summary() for r in records]


def test_events_around_a_kernel_measure_its_modelled_time_and_the_hosts_issue():
    with sim.installed(gpu_key="H100"):
        ms, (launch,) = _timed()
    g = perf_model.gpu("H100")
    expected = g.host_issue_us * 1e-6 + perf_model.launch_time(launch, g).seconds
    assert ms == pytest.approx(expected * 1e3, rel=1e-9)


@pytest.mark.parametrize("key", ["H100", "T4"])
def test_launches_in_a_row_queue_behind_each_other_once_the_gpu_is_the_slower(key):
    # 2 blocks looping over the array: 32 round trips to DRAM a thread, each launch longer than
    # the host takes to issue the next
    with sim.installed(gpu_key=key):
        ms, launches = _timed(launches=5, kernel=scale_strided, blocks=2)
    g = perf_model.gpu(key)
    each = perf_model.launch_time(launches[0], g).seconds
    assert each > g.host_issue_us * 1e-6
    assert ms == pytest.approx((g.host_issue_us * 1e-6 + 5 * each) * 1e3, rel=1e-9)


def test_launches_faster_than_the_host_issues_them_wait_for_the_host():
    with sim.installed(gpu_key="H100"):
        ms, launches = _timed(launches=5)
    g = perf_model.gpu("H100")
    each = perf_model.launch_time(launches[0], g).seconds
    assert each < g.host_issue_us * 1e-6
    assert ms == pytest.approx((5 * g.host_issue_us * 1e-6 + each) * 1e3, rel=1e-9)


def test_a_copy_on_another_stream_overlaps_the_kernel_as_on_the_timeline():
    """A kernel on one stream and a host copy on another: the end event, after both, comes when
    the longer ends, not after their sum (the timeline's resources: the GPU's SMs, its host link)."""
    with sim.installed(gpu_key="H100") as simulator:
        a = cuda.to_device(np.ones(N, np.float32))
        out = cuda.device_array_like(a)
        big = np.ones(1 << 20, np.float32)
        target = cuda.device_array_like(big)
        kernels, copies = cuda.stream(), cuda.stream()
        start, copied, end = cuda.event(), cuda.event(), cuda.event()
        start.record(kernels)
        scale[N // 256, 256, kernels](out, a)
        target.copy_to_device(big, stream=copies)
        copied.record(copies)
        copied.wait(kernels)
        end.record(kernels)
        end.synchronize()
        both = cuda.event_elapsed_time(start, end)
    g = simulator.clock.gpu
    copy_ms = 1e3 * big.nbytes / (g.host_bandwidth_gbs * 1e9)
    # issued second, the copy starts when the host issued it and ends last: the kernel ran meanwhile
    assert both == pytest.approx(2 * g.host_issue_us * 1e-3 + copy_ms, rel=1e-9)


def test_an_event_recorded_on_an_idle_stream_completes_when_the_host_issues_it():
    with sim.installed():
        start, end = cuda.event(), cuda.event()
        start.record()
        end.record()
        assert cuda.event_elapsed_time(start, end) == 0.0


def test_host_arrays_given_to_a_kernel_are_copied_there_and_back_inside_the_events_with_numbas_warning():
    """numba copies each host array argument to the GPU before the launch and back after it (every
    one: it cannot know which the kernel wrote), and warns. Events around the launch include those
    copies, in that order, as on a GPU."""
    a, out = np.ones(N, np.float32), np.zeros(N, np.float32)
    with sim.installed(gpu_key="H100") as simulator:
        start, end = cuda.event(), cuda.event()
        with pytest.warns(Warning, match="Host array used in CUDA kernel will incur copy overhead") as caught:
            start.record()
            scale[N // 256, 256](out, a)
            end.record()
        ms = cuda.event_elapsed_time(start, end)
        log, _ = simulator.streams.take_log()
    assert caught[0].filename == __file__
    np.testing.assert_array_equal(out, 2)
    kinds = [(op["kind"], op.get("src"), op.get("dst")) for op in log if op["kind"] != "sync"]
    assert kinds == [("copy", -1, 0), ("copy", -1, 0), ("kernel", None, None), ("copy", 0, -1), ("copy", 0, -1)]
    g = simulator.clock.gpu
    copies_ms = 1e3 * 4 * a.nbytes / (g.host_bandwidth_gbs * 1e9)
    assert ms > copies_ms


def test_the_clock_forgets_what_the_host_has_waited_for():
    """A long script keeps only the end times of work still in flight, and its events read the same."""
    a = np.ones(N, np.float32)
    with sim.installed() as simulator:
        d, out = cuda.to_device(a), cuda.device_array(N, np.float32)
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(40):
            scale[N // 256, 256](out, d)
            cuda.synchronize()
        end.record()
        assert len(simulator.clock._scheduler._ends) <= 2
        ms = cuda.event_elapsed_time(start, end)
    g = simulator.clock.gpu
    assert ms > 40 * g.host_issue_us * 1e-3
