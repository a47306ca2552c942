"""A launch record names the global arrays its kernel loaded from (`arrays_read`) beside those it
wrote: the device process derives the data flow from them (grader.judge.dataflow)."""

import sys

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim


@cuda.jit
def scaled_copy(src, unused, flags, out):
    i = cuda.grid(1)
    if i < out.size:
        if flags[0] > 0:
            out[i] = src[i] * 2
        cuda.atomic.add(flags, 1, 1)  # an atomic is no load


@pytest.mark.parametrize("executor", ["simt", "thread"])
@pytest.mark.parametrize("races", [True, False])
def test_arrays_read_and_written_under_both_executors(executor, races):
    checks = sim.Checks() if races else sim.Checks(off={"races"})
    with sim.installed(executor=executor, checks=checks), sim.trace() as launches:
        src = cuda.to_device(np.arange(64, dtype=np.float32))
        unused = cuda.to_device(np.zeros(64, np.float32))
        flags = cuda.to_device(np.array([1, 0], np.int32))
        out = cuda.device_array(64, np.float32)
        scaled_copy[2, 32](src, unused, flags, out)
        assert np.array_equal(out.copy_to_host(), 2 * np.arange(64, dtype=np.float32))
    (record,) = launches
    assert record.arrays_read == ["flags", "src"], "loaded from: never `unused`, never `out`"
    assert record.arrays_written == ["flags", "out"]


def test_arrays_read_on_the_scalar_access_log():
    # the per-thread executor's untyped path (numba's own numba.cuda, no numba-cuda typing)
    # logs every access and counts the log in `flush`: the loads mark their arrays there
    from grader.sim.memory import Instrument, LaunchConfig

    class Handle:
        def __init__(self, name, n):
            self.name, self.buffer_id, self.address = name, id(self), 1 << 20
            self.flat = np.zeros(n, np.float32)
            self.initialised = np.ones(n, bool)
            self.dtype, self.offset, self.estrides, self.shape = self.flat.dtype, 0, (1,), (n,)

    inst = Instrument("k", "k.py", LaunchConfig((1, 1, 1), (32, 1, 1), 0, 0, 0), sim.Checks(off={"races"}))
    src, out = Handle("src", 32), Handle("out", 32)
    load, store = inst.scalar_recorder("global", src, "load"), inst.scalar_recorder("global", out, "store")
    frame = sys._getframe()
    for t in range(32):
        load(t, t, frame)
        store(t, t, frame)
    assert inst.read == set(), "nothing marked until the log is counted"
    inst.finish()
    assert inst.read == {"src"} and inst.written == {"out"}
