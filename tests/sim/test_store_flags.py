"""`Allocation.stored`: every element a kernel stores to is flagged, whichever executor and
access path ran the store (the device process tells a host answer's bytes that no kernel
rewrote from a kernel's work by these flags: grader/device/host_bytes.py). Made by an observer;
an allocation nobody watches has none."""

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim

CONFIGURATIONS = {
    "lockstep": ("simt", None),
    "per-thread, race checker": ("thread", None),
    "per-thread, uninitialised reads only": ("thread", {"races"}),
    "per-thread, compiled accesses": ("thread", {"races", "uninitialised"}),
}


@cuda.jit
def even_elements_and_an_atomic(out, counter):
    i = cuda.grid(1)
    if i < out.size and i % 2 == 0:
        out[i] = out[i] * 0 + i  # element 0 gets its own value back: still a store
    if i == 0:
        cuda.atomic.add(counter, 1, 1)


@cuda.jit
def second_row(out):
    row = out[1]  # a view made in the kernel
    i = cuda.grid(1)
    if i < row.size:
        row[i] = 1.0


def _watched(array):
    array._alloc.stored = np.zeros(array._alloc.store.shape, bool)
    return array


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_every_store_is_flagged_and_nothing_else(configuration):
    executor, off = CONFIGURATIONS[configuration]
    with sim.installed(executor=executor, checks=sim.Checks(off=off) if off else None):
        out = _watched(cuda.to_device(np.zeros(70, np.float32)))
        counter = _watched(cuda.to_device(np.zeros(3, np.int32)))
        even_elements_and_an_atomic[3, 32](out, counter)
        assert out._alloc.stored.tolist() == [i % 2 == 0 for i in range(70)]
        assert counter._alloc.stored.tolist() == [False, True, False]
        matrix = _watched(cuda.to_device(np.zeros((3, 5), np.float32)))
        second_row[1, 32](matrix)
        assert matrix._alloc.stored.reshape(3, 5).tolist() == [[False] * 5, [True] * 5, [False] * 5]


def test_an_allocation_nobody_watches_has_no_flags():
    with sim.installed():
        out = cuda.to_device(np.zeros(64, np.float32))
        even_elements_and_an_atomic[2, 32](out, cuda.to_device(np.zeros(3, np.int32)))
        assert out._alloc.stored is None
