"""Known-wrong: SAXPY writes its result to a temporary array and copies it into y with a second kernel:
the right answer, with one extra load and one extra store per element.
"""

import numpy as np
from numba import cuda

THREADS_PER_BLOCK = 256
GRID_BLOCKS = 32  # stage 2: the fixed grid size, whatever n is


# -- stage 1 ----------------------------------------------------------------------------------
@cuda.jit
def add_kernel(a, b, out):
    """out[i] = a[i] + b[i] for every i, one thread per element."""
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]
    ### END SOLUTION


def vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return a + b computed by `add_kernel` on the GPU (a and b: 1-D float32 arrays of equal size)."""
    ### BEGIN SOLUTION
    d_a = cuda.to_device(a)
    d_b = cuda.to_device(b)
    d_out = cuda.device_array_like(d_a)
    blocks = (a.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    add_kernel[blocks, THREADS_PER_BLOCK](d_a, d_b, d_out)
    return d_out.copy_to_host()
    ### END SOLUTION


# -- stage 2 ----------------------------------------------------------------------------------
@cuda.jit
def add_grid_stride_kernel(a, b, out):
    """out[i] = a[i] + b[i] for every i, each thread looping with the grid's stride."""
    ### BEGIN SOLUTION
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, out.size, stride):
        out[i] = a[i] + b[i]
    ### END SOLUTION


def vector_add_grid_stride(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return a + b computed by `add_grid_stride_kernel` launched on GRID_BLOCKS x THREADS_PER_BLOCK."""
    ### BEGIN SOLUTION
    d_a = cuda.to_device(a)
    d_b = cuda.to_device(b)
    d_out = cuda.device_array_like(d_a)
    add_grid_stride_kernel[GRID_BLOCKS, THREADS_PER_BLOCK](d_a, d_b, d_out)
    return d_out.copy_to_host()
    ### END SOLUTION


# -- stage 3 ----------------------------------------------------------------------------------
@cuda.jit
def saxpy_kernel(alpha, x, y):
    """y[i] = alpha * x[i] + y[i] for every i, in place."""
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    if i < y.size:
        y[i] = alpha * x[i] + y[i]
    ### END SOLUTION


@cuda.jit
def saxpy_to_kernel(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i]


def d_zeros(n):
    return cuda.to_device(np.zeros(n, dtype=np.float32))


def saxpy_inplace(alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y <- alpha * x + y on the GPU (x, y: 1-D float32 arrays of equal size); returns y."""
    ### BEGIN SOLUTION
    d_x = cuda.to_device(x)
    d_y = cuda.to_device(y)
    d_tmp = cuda.device_array_like(d_y)  # BUG: a temporary array and a second pass over memory
    blocks = (y.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    saxpy_to_kernel[blocks, THREADS_PER_BLOCK](np.float32(alpha), d_x, d_y, d_tmp)
    add_kernel[blocks, THREADS_PER_BLOCK](d_tmp, d_zeros(y.size), d_y)
    d_y.copy_to_host(y)
    return y
    ### END SOLUTION
