"""Counters and `trace()`: coalescing (32-byte sectors per warp request), bank conflicts
(wavefronts per shared request), atomics, barriers, warp ops, the per-thread table."""

import numpy as np
import pytest
from numba import cuda, float32

import grader.sim as sim
from sim_kernels import vector_add


@cuda.jit
def strided_copy(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[(i * 32) % a.size]


@cuda.jit
def transpose_tile(inp, out):
    tile = cuda.shared.array((32, 32), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tile[ty, tx] = inp[ty, tx]
    cuda.syncthreads()
    out[ty, tx] = tile[tx, ty]


@cuda.jit
def transpose_padded(inp, out):
    tile = cuda.shared.array((32, 33), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tile[ty, tx] = inp[ty, tx]
    cuda.syncthreads()
    out[ty, tx] = tile[tx, ty]


@cuda.jit
def warp_and_atomic(inp, out):
    v = inp[cuda.grid(1)]
    v += cuda.shfl_down_sync(0xFFFFFFFF, v, 1)
    cuda.syncthreads()
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


EXECUTORS = ["thread", "auto"]


@pytest.fixture(params=EXECUTORS)
def executor(request):
    with sim.installed(executor=request.param):
        yield request.param


def run_traced(kernel, grid, block, *args):
    with sim.trace() as launches:
        kernel[grid, block](*args)
    assert len(launches) == 1
    return launches[0]


def test_coalesced_vector_add_is_4_sectors_per_request(executor):
    n = 1 << 12
    a = cuda.to_device(np.ones(n, np.float32))
    out = cuda.device_array(n, np.float32)
    rec = run_traced(vector_add, n // 128, 128, a, a, out)
    c = rec.counters
    assert c["global_loads"] == 2 * n and c["global_stores"] == n
    assert c["global_load_requests"] == 2 * n // 32
    assert c["sectors_per_request"] == 4.0
    assert c["max_global_loads_per_thread"] == 2 and c["max_global_stores_per_thread"] == 1
    assert c["threads_launched"] == n
    assert rec.kernel == "vector_add" and rec.grid == (32, 1, 1) and rec.block == (128, 1, 1)
    assert rec.arrays_written == ["out"]
    assert rec.thread_table("global_loads").shape == (1, 1, 32, 1, 1, 128)


def test_strided_access_touches_many_more_sectors(executor):
    n = 1 << 10
    a = cuda.to_device(np.ones(n * 32, np.float32))
    out = cuda.device_array(n, np.float32)
    c = run_traced(strided_copy, n // 128, 128, a, out).counters
    assert c["global_load_sectors"] / c["global_load_requests"] == 32.0


def test_bank_conflicts_of_column_reads_and_padding(executor):
    inp = cuda.to_device(np.arange(1024, dtype=np.float32).reshape(32, 32))
    out = cuda.device_array((32, 32), np.float32)
    plain = run_traced(transpose_tile, 1, (32, 32), inp, out).counters
    np.testing.assert_array_equal(out.copy_to_host(), inp.copy_to_host().T)
    padded = run_traced(transpose_padded, 1, (32, 32), inp, out).counters
    np.testing.assert_array_equal(out.copy_to_host(), inp.copy_to_host().T)
    # 32 store requests x 1 wavefront + 32 column-read requests x 32 wavefronts
    assert plain["shared_requests"] == 64
    assert plain["bank_conflict_wavefronts"] == 32 + 32 * 32
    assert padded["bank_conflict_wavefronts"] == 64
    assert padded["wavefronts_per_shared_request"] == 1.0


def test_atomics_barriers_and_warp_ops_are_counted(executor):
    inp = cuda.to_device(np.ones(128, np.float32))
    out = cuda.to_device(np.zeros(1, np.float32))
    c = run_traced(warp_and_atomic, 2, 64, inp, out).counters
    assert c["atomics"] == 4  # lane 0 of 4 warps
    assert c["barriers"] == 2  # one per block
    assert c["warp_ops"] == 4  # one shuffle per warp
    assert out.copy_to_host()[0] == 8  # lane 0 adds its own and lane 1's value


def test_trace_collects_only_inside_the_block(executor):
    a = cuda.to_device(np.ones(32, np.float32))
    out = cuda.device_array(32, np.float32)
    with sim.trace() as first:
        vector_add[1, 32](a, a, out)
        with sim.trace() as second:
            vector_add[1, 32](a, a, out)
    vector_add[1, 32](a, a, out)
    assert len(first) == 2 and len(second) == 1
    assert first[0].executor in ("thread", "simt")
