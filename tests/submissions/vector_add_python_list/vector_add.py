"""Known-wrong: stage 1 builds a Python list inside the kernel. The simulator could run it in Python,
but numba cannot compile it for a GPU, so every stage-1 launch fails the compile check."""


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
        pair = [a[i], b[i]]  # BUG: a Python list: fine in Python, not in a CUDA kernel
        out[i] = pair[0] + pair[1]
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


def saxpy_inplace(alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y <- alpha * x + y on the GPU (x, y: 1-D float32 arrays of equal size); returns y."""
    ### BEGIN SOLUTION
    d_x = cuda.to_device(x)
    d_y = cuda.to_device(y)
    blocks = (y.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    saxpy_kernel[blocks, THREADS_PER_BLOCK](np.float32(alpha), d_x, d_y)
    d_y.copy_to_host(y)
    return y
    ### END SOLUTION
