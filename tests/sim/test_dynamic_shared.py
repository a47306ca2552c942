"""Dynamic shared arrays (`cuda.shared.array(0, dtype)`, CUDA's `extern __shared__`) are views
of one byte buffer per block: a store through one is seen, reinterpreted, through the others;
a read is initialised when all its bytes were written; races are judged on the bytes, across
views; bounds come from the launch's dynamic shared size. Both executors, the per-thread one
also with its accesses compiled inline."""

import numpy as np
import pytest
from numba import cuda, float32, float64, int16, int32, uint8

import grader.sim as sim

# (executor, checks): SIMT, per-thread recorded (every checker), per-thread compiled
SETUPS = {"simt": ("simt", None), "thread": ("thread", None),
          "compiled": ("thread", sim.Checks(off={"races", "uninitialised"}))}


@pytest.fixture(params=list(SETUPS))
def setup(request):
    executor, checks = SETUPS[request.param]
    with sim.installed(executor=executor, checks=checks), sim.trace() as records:
        yield request.param, records
    assert all(r.executor == executor for r in records)


def checked(setup):
    return setup[0] != "compiled"


@cuda.jit
def float_then_int(out):
    f = cuda.shared.array(0, float32)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    f[i] = 1.5
    cuda.syncthreads()
    out[i] = n[i]


def test_store_through_one_view_is_read_through_another(setup):
    out = np.zeros(32, np.int32)
    float_then_int[1, 32, 0, 128](out)
    assert (out == np.float32(1.5).view(np.int32)).all()
    out[:] = 0
    float_then_int[2, 32, 0, 128](out)  # every block its own memory
    assert (out == np.float32(1.5).view(np.int32)).all()


@cuda.jit
def halves_of_doubles(out, write_both):
    d = cuda.shared.array(0, float64)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    n[2 * i] = 0
    if write_both:
        n[2 * i + 1] = 1072693248  # the high word of 1.0
    cuda.syncthreads()
    out[i] = d[i]


def test_read_is_initialised_when_all_its_bytes_are(setup):
    out = np.zeros(16, np.float64)
    halves_of_doubles[1, 16, 0, 128](out, True)
    assert (out == 1.0).all()
    if checked(setup):
        with pytest.raises(sim.UninitialisedReadError, match="shared array 'd' at index 0"):
            halves_of_doubles[1, 16, 0, 128](out, False)


@cuda.jit
def bytes_after_floats(out):
    f = cuda.shared.array(0, float32)
    i = cuda.threadIdx.x
    f[i] = 1.0
    cuda.syncthreads()
    b = cuda.shared.array(0, uint8)  # declared after the floats were written
    h = cuda.shared.array(0, int16)
    out[i] = b[4 * i + 3] + h[2 * i + 1]


def test_smaller_view_declared_later(setup):
    out = np.zeros(32, np.int32)
    bytes_after_floats[1, 32, 0, 128](out)
    assert (out == 0x3F + 0x3F80).all()


@cuda.jit
def neighbour_through_other_view(out):
    f = cuda.shared.array(0, float32)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    f[i] = i
    cuda.syncthreads()
    out[i] = f[i]
    n[(i + 31) % 32] = 5  # no barrier: the element another thread read


@cuda.jit
def overlapping_bytes(out):
    d = cuda.shared.array(0, float64)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    if i == 0:
        d[0] = 2.0  # bytes 0..7
    if i == 1:
        n[1] = 7  # bytes 4..7
    cuda.syncthreads()
    out[i] = n[0]


@cuda.jit
def disjoint_bytes(out):
    d = cuda.shared.array(0, float64)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    if i == 0:
        d[0] = 2.0  # bytes 0..7
    if i == 1:
        n[2] = 7  # bytes 8..11
    cuda.syncthreads()
    out[i] = n[0]


def test_races_across_views(setup):
    if not checked(setup):
        pytest.skip("the race checker is off")
    out = np.zeros(32, np.int32)
    with pytest.raises(sim.RaceError, match="shared array 'n'"):
        neighbour_through_other_view[1, 32, 0, 128](out)
    with pytest.raises(sim.RaceError, match="shared array '[dn]'"):
        overlapping_bytes[1, 32, 0, 128](out)
    disjoint_bytes[1, 32, 0, 128](out)
    assert (out == 0).all()  # the low word of 2.0


@cuda.jit
def byte_of_neighbours_float(out):
    f = cuda.shared.array(0, float32)
    i = cuda.threadIdx.x
    f[i] = 1.0
    b = cuda.shared.array(0, uint8)  # refines the units after floats were recorded
    b[4 * ((i + 1) % 32) + 3] = 7  # a byte of the next thread's float, no barrier
    out[i] = i


def test_race_across_views_after_refining(setup):
    if not checked(setup):
        pytest.skip("the race checker is off")
    with pytest.raises(sim.RaceError, match="shared array '[fb]'"):
        byte_of_neighbours_float[1, 32, 0, 128](np.zeros(32, np.int32))


@cuda.jit
def static_beside_dynamic(out):
    s = cuda.shared.array(32, int32)
    f = cuda.shared.array(0, float32)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    f[i] = 1.0
    cuda.syncthreads()
    out[i] = s[i] + n[i]  # s was never written


@cuda.jit
def read_past_dynamic(out, k):
    n = cuda.shared.array(0, int32)
    d = cuda.shared.array(0, float64)
    i = cuda.threadIdx.x
    n[i] = 0
    cuda.syncthreads()
    if i == 0:
        out[0] = d[k]


def test_static_unaffected_and_bounds_in_bytes(setup):
    out = np.zeros(32, np.int32)
    if checked(setup):
        with pytest.raises(sim.UninitialisedReadError, match="shared array 's' at index 0"):
            static_beside_dynamic[1, 32, 0, 128](out)
    dout = np.zeros(1, np.float64)
    read_past_dynamic[1, 32, 0, 128](dout, 15)  # 128 bytes: 16 doubles
    with pytest.raises(sim.OutOfBoundsError, match="shared array 'd' of shape 16 at index 16"
                       ) as err:
        read_past_dynamic[1, 32, 0, 128](dout, 16)
    assert "dynamic shared memory, 128 bytes here" in str(err.value)
