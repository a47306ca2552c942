"""The race checker's silent-store rule: a plain store of the bits an (initialised) element
already holds changes nothing, so it conflicts with no load, races with no store, and does not
become the element's last writer. Stores that change the value are checked as before. Every
test runs under the SIMT and the per-thread executor."""

import numpy as np
import pytest
from numba import cuda, int32

import grader.sim as sim


def line_of(kernel, text):
    """Absolute line number of the first source line of `kernel` containing `text`."""
    import inspect

    lines, first = inspect.getsourcelines(kernel.py_func)
    return first + next(k for k, src in enumerate(lines) if text in src)


def run(kernel, grid, block, *args):
    """Launch; return the launch record ("simt" never falls back, so each executor runs)."""
    with sim.trace() as records:
        kernel[grid, block](*args)
    (record,) = records
    return record


# ---------------------------------------------------------------- numba-cuda's test_useful_syncwarp
def useful_syncwarp(ary):
    i = cuda.grid(1)
    if i == 0:
        ary[0] = 42
    cuda.syncwarp(0xFFFFFFFF)
    ary[i] = ary[0]


def test_useful_syncwarp_passes(executor):
    kernel = cuda.jit("void(int32[:])")(useful_syncwarp)
    ary = cuda.to_device(np.zeros(32, np.int32))
    record = run(kernel, 1, 32, ary)
    assert (ary.copy_to_host() == 42).all()
    assert record.warnings == []
    # a silent store is still a store: 1 + 32 stores, 32 loads
    assert record.counters["global_stores"] == 33
    assert record.counters["global_loads"] == 32
    assert "ary" in record.arrays_written


def test_useful_syncwarp_variants_that_race(executor):
    @cuda.jit
    def useless(ary):
        i = cuda.grid(1)
        if i == 0:
            ary[0] = 42  # changes ary[0]: the loads below race with it
        ary[i] = ary[0]

    with pytest.raises(sim.RaceError, match=r"global array 'ary' at index 0"):
        useless[1, 32](cuda.to_device(np.zeros(32, np.int32)))
    # two warps: the syncwarp orders only warp 0; warp 1's loads of ary[0] race with its store
    kernel = cuda.jit("void(int32[:])")(useful_syncwarp)
    with pytest.raises(sim.RaceError, match=r"global array 'ary' at index 0"):
        kernel[1, 64](cuda.to_device(np.zeros(64, np.int32)))


# ---------------------------------------------------------------- same value, no barrier
@cuda.jit
def store_then_load(a, out, v):
    t = cuda.threadIdx.x
    if t == 1:
        a[0] = v
    out[cuda.grid(1)] = a[0]  # no barrier between the store and the other threads' loads


@cuda.jit
def load_then_store(a, out, v):
    t = cuda.threadIdx.x
    out[cuda.grid(1)] = a[0]
    if t == 5:
        a[0] = v


@pytest.mark.parametrize("kernel", [store_then_load, load_then_store])
def test_store_of_the_same_value_does_not_race_with_loads(executor, kernel):
    a = cuda.to_device(np.array([7], np.int32))
    out = cuda.device_array(64, np.int32)
    record = run(kernel, 2, 32, a, out, 7)
    assert (out.copy_to_host() == 7).all() and record.warnings == []


@pytest.mark.parametrize("kernel", [store_then_load, load_then_store])
def test_store_of_a_different_value_still_races(executor, kernel):
    a = cuda.to_device(np.array([7], np.int32))
    with pytest.raises(sim.RaceError, match=r"global array 'a' at index 0"):
        kernel[2, 32](a, cuda.device_array(64, np.int32), 8)


@cuda.jit
def shared_rewrite(out, v):
    s = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        s[0] = 3
    cuda.syncthreads()
    if t == 1:
        s[0] = v  # silent for v == 3: thread 0 stays the last writer, ordered by the barrier
    out[t] = s[0]


def test_shared_silent_store_does_not_become_the_last_writer(executor):
    out = cuda.device_array(64, np.int32)
    run(shared_rewrite, 1, 64, out, 3)
    assert (out.copy_to_host() == 3).all()
    with pytest.raises(sim.RaceError, match=r"shared array"):
        shared_rewrite[1, 64](out, 4)


@cuda.jit
def uninitialised_rewrite(out, v):
    s = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        s[0] = v  # stores over never-written memory: never silent, whatever it holds
    out[t] = s[0]


def test_store_to_an_uninitialised_element_is_never_silent(executor):
    # the simulator fills fresh shared memory with 0xFF bytes: int32 -1
    with pytest.raises(sim.RaceError, match=r"shared array"):
        uninitialised_rewrite[1, 32](cuda.device_array(32, np.int32), -1)


# ---------------------------------------------------------------- bitwise equality
@cuda.jit
def rewrite_from(a, src, out):
    t = cuda.threadIdx.x
    if t == 1:
        a[0] = src[0]
    out[t] = a[0]


def _bits(u):
    return np.array([u], np.uint64).view(np.float64)


@pytest.mark.parametrize("old, new, silent", [
    (np.array([0.0]), np.array([0.0]), True),
    (np.array([0.0]), np.array([-0.0]), False),  # equal as numbers, not as bits
    (np.array([-0.0]), np.array([0.0]), False),
    (_bits(0x7FF8000000000001), _bits(0x7FF8000000000001), True),  # the same NaN
    (_bits(0x7FF8000000000001), _bits(0x7FF8000000000002), False),  # another payload
])
def test_silence_compares_bits(executor, old, new, silent):
    a, src = cuda.to_device(old), cuda.to_device(new)
    out = cuda.device_array(32, np.float64)
    if silent:
        record = run(rewrite_from, 1, 32, a, src, out)
        assert record.warnings == []
        assert (out.copy_to_host().view(np.uint64) == new.view(np.uint64)[0]).all()
    else:
        with pytest.raises(sim.RaceError, match=r"global array 'a' at index 0"):
            rewrite_from[1, 32](a, src, out)


def test_float32_store_of_a_float64_value_compares_after_the_cast(executor):
    @cuda.jit
    def store_tenth(a, out):
        t = cuda.threadIdx.x
        if t == 1:
            a[0] = 0.1  # a float64 literal, stored as float32(0.1): the bits already there
        out[t] = a[0]

    a = cuda.to_device(np.array([0.1], np.float32))
    record = run(store_tenth, 1, 32, a, cuda.device_array(32, np.float32))
    assert record.warnings == []


# ---------------------------------------------------------------- later stores
@cuda.jit
def silent_then_store(a, v):
    t = cuda.threadIdx.x
    if t == 0:
        a[0] = 1  # the writer
    if t == 1:
        a[0] = 1  # silent: not the writer
    if t == 2:
        a[0] = v  # checked against thread 0's store


def test_later_store_is_checked_against_the_original_writer(executor):
    a = cuda.to_device(np.zeros(1, np.int32))
    writer = line_of(silent_then_store, "a[0] = 1  # the writer")
    with pytest.raises(sim.RaceError, match=rf"conflicts with a store at line {writer} by thread \(0, 0, 0\)") \
            as err:
        silent_then_store[1, 32](a, 2)
    assert err.value.line == line_of(silent_then_store, "a[0] = v")  # not thread 1's store


@cuda.jit
def same_value_everywhere(flag, out):
    t = cuda.threadIdx.x
    flag[0] = 1  # every thread stores 1: the first changes flag[0], the others are silent
    cuda.syncthreads()
    out[t] = flag[0]


@cuda.jit
def different_values_everywhere(flag):
    flag[0] = cuda.threadIdx.x  # different values: a write-write race


def test_one_value_stored_by_every_thread(executor):
    flag = cuda.to_device(np.zeros(1, np.int32))
    out = cuda.device_array(64, np.int32)
    record = run(same_value_everywhere, 1, 64, flag, out)
    assert (out.copy_to_host() == 1).all() and record.warnings == []
    assert record.counters["global_stores"] == 64 + 64
    with pytest.raises(sim.RaceError, match=r"global array 'flag' at index 0"):
        different_values_everywhere[1, 64](cuda.to_device(np.zeros(1, np.int32)))


def test_accumulator_race_still_found_when_the_sums_agree(executor):
    @cuda.jit
    def racy_total(a, out):
        out[0] += a[cuda.grid(1)]

    # every lane loads 0 and stores 1 in lockstep: the stores agree, the loads still race
    with pytest.raises(sim.RaceError, match=r"global array 'out' at index 0"):
        racy_total[1, 32](cuda.to_device(np.ones(32, np.float32)),
                          cuda.to_device(np.zeros(1, np.float32)))
