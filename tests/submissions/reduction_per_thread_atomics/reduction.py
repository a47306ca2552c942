"""Known-wrong: the shuffle stage skips the shuffles and has every thread add its element with its own atomic:
the right sum, but 32 times the atomics of one per warp, all on the same address.
"""

import numpy as np
from numba import cuda, float32

THREADS_PER_BLOCK = 256
GRID_BLOCKS = 16        # stage 3: the fixed grid size, whatever n is
FULL_MASK = 0xFFFFFFFF
WARP_SIZE = 32


# -- stage 1 ----------------------------------------------------------------------------------
@cuda.jit
def reduce_tree_kernel(x, partial):
    """partial[blockIdx.x] = the sum of this block's THREADS_PER_BLOCK elements of x."""
    ### BEGIN SOLUTION
    cache = cuda.shared.array(THREADS_PER_BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        cache[t] = x[i]
    else:
        cache[t] = 0.0
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if t < s:
            cache[t] += cache[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = cache[0]
    ### END SOLUTION


def reduce_tree(x: np.ndarray) -> np.float32:
    """Return x.sum() (x: 1-D float32, size >= 1) computed by `reduce_tree_kernel`."""
    ### BEGIN SOLUTION
    d_x = cuda.to_device(x)
    while True:
        blocks = (d_x.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        d_partial = cuda.device_array(blocks, dtype=np.float32)
        reduce_tree_kernel[blocks, THREADS_PER_BLOCK](d_x, d_partial)
        if blocks == 1:
            return d_partial.copy_to_host()[0]
        d_x = d_partial
    ### END SOLUTION


# -- stage 2 ----------------------------------------------------------------------------------
@cuda.jit
def reduce_shuffle_kernel(x, out):
    """out[0] += the sum of x, one shuffle tree and one atomic per warp."""
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    cuda.atomic.add(out, 0, v)  # BUG: one atomic per thread, no warp shuffle
    ### END SOLUTION


def reduce_shuffle(x: np.ndarray) -> np.float32:
    """Return x.sum() (x: 1-D float32, size >= 1) computed by `reduce_shuffle_kernel`."""
    ### BEGIN SOLUTION
    d_x = cuda.to_device(x)
    d_out = cuda.to_device(np.zeros(1, dtype=np.float32))
    blocks = (x.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    reduce_shuffle_kernel[blocks, THREADS_PER_BLOCK](d_x, d_out)
    return d_out.copy_to_host()[0]
    ### END SOLUTION


# -- stage 3 ----------------------------------------------------------------------------------
@cuda.jit
def reduce_grid_stride_kernel(x, out):
    """out[0] += the sum of x: grid-stride accumulation, then one shuffle tree and atomic per warp."""
    ### BEGIN SOLUTION
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    acc = 0  # numba types it from what is added: int64 for int32 input, float64 for float32
    for i in range(start, x.size, stride):
        acc += x[i]
    offset = WARP_SIZE // 2
    while offset > 0:
        acc += cuda.shfl_down_sync(FULL_MASK, acc, offset)
        offset //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, acc)
    ### END SOLUTION


def reduce_grid_stride(x: np.ndarray):
    """Return x.sum() as x's dtype (x: 1-D float32 or int32, size >= 1) on a fixed grid."""
    ### BEGIN SOLUTION
    d_x = cuda.to_device(x)
    d_out = cuda.to_device(np.zeros(1, dtype=x.dtype))
    reduce_grid_stride_kernel[GRID_BLOCKS, THREADS_PER_BLOCK](d_x, d_out)
    return d_out.copy_to_host()[0]
    ### END SOLUTION
