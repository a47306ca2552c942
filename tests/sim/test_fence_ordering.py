"""A threadfence orders a write for other blocks only together with an acquire on the reader's
side (issue 9): blocks are not ordered on a GPU, so a kernel that is right only because the
simulator runs block 0 first must be reported, under both executors, while the classic
"last block" pattern (write, fence, atomic counter; the block that sees the count reads) is not.
"""

import numpy as np
import pytest
from numba import cuda, float32, int32

import grader.sim as sim


@cuda.jit
def reads_earlier_block(data, out):
    if cuda.threadIdx.x == 0:
        if cuda.blockIdx.x == 0:
            data[0] = 42.0
            cuda.threadfence()
        else:
            out[0] = data[0]  # right only because block 0 happened to run first


@cuda.jit
def last_block_all_threads(inp, partial, count, out):
    is_last = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        partial[cuda.blockIdx.x] = inp[cuda.blockIdx.x] * float32(2)
        cuda.threadfence()
        is_last[0] = cuda.atomic.inc(count, 0, cuda.gridDim.x) == cuda.gridDim.x - 1
    cuda.syncthreads()
    if is_last[0] and t < cuda.gridDim.x:
        out[t] = partial[t]  # written by thread 0 of block t; its own thread 0 did the atomic


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_fence_without_an_acquire_orders_nothing(executor):
    with sim.installed(executor=executor):
        data = cuda.to_device(np.zeros(1, np.float32))
        out = cuda.to_device(np.zeros(1, np.float32))
        with pytest.raises(sim.RaceError, match="data race on global array 'data'"):
            reads_earlier_block[2, 32](data, out)


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_the_last_block_pattern_is_ordered_by_its_atomic_and_barrier(executor):
    with sim.installed(executor=executor):
        blocks = 8
        inp = np.arange(blocks, dtype=np.float32)
        partial = cuda.device_array(blocks, np.float32)
        count = cuda.to_device(np.zeros(1, np.uint32))
        out = cuda.to_device(np.zeros(blocks, np.float32))
        last_block_all_threads[blocks, 32](cuda.to_device(inp), partial, count, out)
        assert np.array_equal(out.copy_to_host(), 2 * inp)
