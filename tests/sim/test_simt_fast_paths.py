"""The SIMT executor's fast paths change nothing: a load of a known access pattern with the
race and uninitialised-read checkers off is only counted (its positions are never made, a
repeating pattern gathers each element once); with every checker on the same launch takes the
full path. Both must give the same outputs, counters, per-line and per-thread counts."""

import numpy as np
import pytest
from numba import cuda, float32

import grader.sim as sim
from grader.sim import memory

TILE = 8
COUNTERS_ONLY = sim.Checks(off=["races", "uninitialised"])


@cuda.jit
def tiled_matmul(a, b, c):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        col, row = t * TILE + tx, t * TILE + ty
        sa[ty, tx] = a[y, col] if y < a.shape[0] and col < a.shape[1] else 0.0
        sb[ty, tx] = b[row, x] if row < b.shape[0] and x < b.shape[1] else 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx] + sa[k, ty]  # sa[k, ty]: a transposed (conflicting) read
        cuda.syncthreads()
    if y < c.shape[0] and x < c.shape[1]:
        c[y, x] = acc


@cuda.jit
def repeated_reads(a, out):
    i = cuda.grid(1)
    s = 0.0
    for j in range(4):
        s += a[i] * j + a[i // 3] + a[5]  # one element per lane, repeats, a scalar index
    h = i // 2
    if i % 3 == 1:  # masked patterns, reused
        for j in range(3):
            s += a[i] + a[h]
    out[i] = s


def _run(kernel, grid, block, make_args, checks):
    with sim.installed(executor="simt", checks=checks), sim.trace() as records:
        args = make_args()
        kernel[grid, block](*args)
        outputs = [a.copy_to_host() for a in args]
    (record,) = records
    assert record.executor == "simt"
    return outputs, record


def _assert_same(kernel, grid, block, make_args):
    fast = _run(kernel, grid, block, make_args, COUNTERS_ONLY)
    full = _run(kernel, grid, block, make_args, sim.Checks())
    for a, b in zip(fast[0], full[0]):
        np.testing.assert_array_equal(a, b)
    cf, cs = fast[1].counters, full[1].counters
    assert {k: v for k, v in cf.items() if k != "threads"} == \
        {k: v for k, v in cs.items() if k != "threads"}
    for key, value in fast[1].threads.items():
        np.testing.assert_array_equal(value, full[1].threads[key], err_msg=key)
    return fast[0]


def test_tiled_matmul_counts_the_same_with_and_without_checkers():
    rng = np.random.default_rng(0)
    a = rng.random((20, 13), dtype=np.float32)
    b = rng.random((13, 18), dtype=np.float32)

    def make():
        return [cuda.to_device(a), cuda.to_device(b), cuda.to_device(np.zeros((20, 18), np.float32))]

    out = _assert_same(tiled_matmul, (3, 3), (TILE, TILE), make)[2]
    assert np.isfinite(out).all() and out.any()


@pytest.mark.parametrize("reverse", [False, True])
def test_reused_patterns_on_contiguous_and_reversed_arrays(reverse):
    a = np.arange(1000, dtype=np.float32)

    def make():
        d = cuda.to_device(a)
        return [d[::-1] if reverse else d, cuda.to_device(np.zeros(1000, np.float32))]

    out = _assert_same(repeated_reads, (4,), (250,), make)[1]
    src = a[::-1] if reverse else a
    i = np.arange(1000)
    want = np.zeros(1000, np.float64)
    for j in range(4):
        want += src[i].astype(np.float64) * j + src[i // 3] + src[5]
    m = i % 3 == 1
    for _ in range(3):
        want[m] += src[i[m]].astype(np.float64) + src[i[m] // 2]
    np.testing.assert_array_equal(out, want.astype(np.float32))


@pytest.mark.parametrize("vec, repeats", [
    (np.repeat(np.arange(64), 16), True),  # a tile row read by every thread of a row
    (np.tile(np.arange(16), 64) + np.repeat(np.arange(4) * 100, 256), True),  # tile columns
    (np.tile(np.arange(512), 4), True),  # the same row of a global array in several blocks
    (np.arange(1024), False),  # nothing repeats
    (np.r_[np.repeat(np.arange(32), 16), np.arange(512)], False),  # only the start repeats
])
def test_squeeze_gathers_the_same_values(vec, repeats):
    vec = vec.astype(np.int64)
    store = np.random.default_rng(1).random(int(vec.max()) + 10).astype(np.float32)
    sq = memory._squeeze(vec)
    assert bool(sq) == repeats
    if sq:
        small, shape = sq
        out = np.empty(shape, store.dtype)
        out[...] = store[3:][small]
        np.testing.assert_array_equal(out.reshape(-1), store[vec + 3])
        assert small.size < vec.size
        if shape[2] == 1:  # load_lanes takes np.repeat for runs of one value
            np.testing.assert_array_equal(np.repeat(store[3:][small.reshape(-1)], shape[1]),
                                          store[vec + 3])
