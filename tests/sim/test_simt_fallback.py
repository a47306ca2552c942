"""What the lockstep executor refuses, with the feature and line named, and the automatic
fallback to the per-thread executor that records the reason."""

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
from grader.sim.simt import SimtUnsupported, prepare


@cuda.jit
def slice_store(out):
    out[1:] = 1.0


@cuda.jit
def loops_over_array(a, out):
    total = 0.0
    for v in a:
        total += v
    out[0] = total


@cuda.jit
def slices(a, out):
    row = a[0, cuda.threadIdx.x::cuda.threadIdx.x + 1]  # a step that differs between lanes
    out[cuda.threadIdx.x] = row[0]


@cuda.jit
def spin_lock(lock, out):
    while cuda.atomic.cas(lock, 0, 0, 1) != 0:
        pass
    out[0] += 1
    cuda.atomic.exch(lock, 0, 0)


@cuda.jit
def raises(out):
    if out[0] > 1:
        raise ValueError("no")


def _arg(shape=(4,), dtype=np.float64):
    sim.install(executor="thread")
    try:
        return cuda.device_array(shape, dtype)
    finally:
        sim.uninstall()


@pytest.mark.parametrize("kernel,nargs,feature", [
    (slice_store, 1, "assignment to a slice of an array"),
    (loops_over_array, 2, "for-loop over a non-range iterator"),
    (spin_lock, 2, "spin-wait"),
    (raises, 1, "raise"),
])
def test_unsupported_features_are_named_with_their_line(kernel, nargs, feature):
    from grader.sim.host import DeviceBuffer

    shape = (4, 4) if kernel is slices else (4,)
    dtype = np.int32 if kernel is spin_lock else np.float64
    args = [DeviceBuffer(_arg(shape if k == 0 else (4,), dtype), f"a{k}") for k in range(nargs)]
    with pytest.raises(SimtUnsupported, match=feature) as info:
        prepare(kernel, args)
    first = kernel.py_func.__code__.co_firstlineno
    assert first < info.value.line <= first + 6


def test_a_slice_whose_step_differs_between_lanes_falls_back_naming_it_and_its_line():
    with sim.installed(executor="auto"), sim.trace() as records:
        a = cuda.to_device(np.arange(16, dtype=np.float64).reshape(4, 4))
        out = cuda.device_array(4, np.float64)
        slices[1, 4](a, out)
    np.testing.assert_array_equal(out.copy_to_host(), [0, 1, 2, 3])
    (record,) = records
    line = slices.py_func.__code__.co_firstlineno + 2
    assert record.executor == "thread"
    assert record.fallback_reason == (f"an array slice whose step differs between lanes at "
                                      f"{slices.py_func.__code__.co_filename}:{line}")


def test_auto_mode_falls_back_and_records_the_reason():
    sim.install(executor="auto")
    try:
        a = cuda.to_device(np.arange(8, dtype=np.float64))
        out = cuda.device_array(1, np.float64)
        with sim.trace() as records:
            loops_over_array[1, 1](a, out)
        assert out.copy_to_host()[0] == 28
        assert records[0].executor == "thread"
        assert "non-range iterator" in records[0].fallback_reason
    finally:
        sim.uninstall()


@cuda.jit(device=True)
def countdown(n):
    if n <= 0:
        return 0
    return 1 + countdown(n - 1)


@cuda.jit
def recursive(out):
    out[0] = countdown(3)


def test_recursion_is_refused():
    sim.install(executor="simt")
    try:
        out = cuda.device_array(1, np.int64)
        with pytest.raises(sim.NotSimulatedError, match="recursi|cannot type"):
            recursive[1, 1](out)
    finally:
        sim.uninstall()


@cuda.jit
def array_per_lane(a, b, out):
    i = cuda.threadIdx.x
    src = a
    if i % 2 == 0:
        src = b
    out[i] = src[i]


def test_runtime_refusal_restores_memory_before_the_fallback():
    sim.install(executor="auto")
    try:
        a = cuda.to_device(np.ones(8))
        b = cuda.to_device(np.zeros(8))
        out = cuda.device_array(8)
        with sim.trace() as records:
            array_per_lane[1, 8](a, b, out)
        assert records[0].executor == "thread"
        assert "array per lane" in records[0].fallback_reason
        np.testing.assert_array_equal(out.copy_to_host(), [0, 1] * 4)
    finally:
        sim.uninstall()


# every fallback names its construct and where: the file and line
_EXEC_SOURCE = """
def built_by_exec(out):
    out[0] = 1.0
"""


def _exec_kernel():
    namespace = {}
    exec(compile(_EXEC_SOURCE, "<generated>", "exec"), namespace)
    return cuda.jit(namespace["built_by_exec"])


@cuda.jit
def takes_a_tuple_of_arrays(pair, out):
    out[0] = pair[0][0]


@cuda.jit
def calls_a_method(out, c):
    out[0] = c.item()


@pytest.mark.parametrize("case", ["method", "no source", "tuple of arrays"])
def test_every_fallback_names_the_construct_file_and_line(case):
    here = __file__
    with sim.installed(executor="auto"), sim.trace() as records:
        out = cuda.to_device(np.zeros(4))
        if case == "method":
            calls_a_method[1, 1](out, 2.5)
            expect = ("call of a local value or method", here,
                      calls_a_method.py_func.__code__.co_firstlineno + 2)
        elif case == "no source":
            _exec_kernel()[1, 1](out)
            expect = ("no source for 'built_by_exec'", "<generated>", 2)
        else:
            takes_a_tuple_of_arrays[1, 1]((np.ones(2), np.ones(2)), out)
            expect = ("a tuple argument holding arrays (parameter 'pair')", here,
                      takes_a_tuple_of_arrays.py_func.__code__.co_firstlineno + 1)
    (record,) = records
    assert record.executor == "thread"
    feature, filename, line = expect
    assert record.fallback_reason == f"{feature} at {filename}:{line}"


@cuda.jit
def lane_bound_range(out):
    total = 0
    for i in range(cuda.threadIdx.x, out.size * 40, 1):  # each lane's own start: a masked loop
        total += 1
    out[cuda.threadIdx.x] = total


@cuda.jit
def lane_bound_range_that_can_break(out):
    total = 0
    for i in range(cuda.threadIdx.x, out.size * 40, 1):
        total += 1
        if total > out.size * 1000:  # (never: but a loop that can leave early may spin on a flag)
            break
    out[cuda.threadIdx.x] = total


@cuda.jit
def lane_bound_while(out):
    total = 0
    i = cuda.threadIdx.x
    while i < out.size * 40:
        total += 1
        i += 1
    out[cuda.threadIdx.x] = total


def test_a_long_range_loop_stays_in_lockstep_a_long_while_loop_is_taken_for_a_spin_wait(monkeypatch):
    """A `for` over range() with no way out but its end ends by itself however long it runs, so the
    spin-wait limit is not for it: a lane-dependent range past the limit once went to the per-thread
    executor (an 8x slower rerun from the start: 144 s instead of 18 s for 512 threads x 70,000
    iterations). One that can break may be a spin-wait bounded by its range, as a `while` may."""
    from grader.sim.simt import mask

    monkeypatch.setattr(mask, "LOOP_LIMIT", 64)  # the loops below run 160 lockstep iterations
    expected = 160 - np.arange(4)
    with sim.installed(executor="auto"), sim.trace() as records:
        for kernel in (lane_bound_range, lane_bound_range_that_can_break, lane_bound_while):
            out = cuda.to_device(np.zeros(4, np.int64))
            kernel[1, 4](out)
            np.testing.assert_array_equal(out.copy_to_host(), expected)
    ranged, can_break, spun = records
    assert (ranged.executor, ranged.fallback_reason) == ("simt", None)
    for record in (can_break, spun):
        assert record.executor == "thread" and "after 64 lockstep iterations (a spin-wait" in record.fallback_reason
