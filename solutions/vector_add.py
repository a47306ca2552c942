"""Exercise: vector add, your first CUDA kernel.

Stage 1: one thread per element.
    Write `add_kernel` so that thread i computes out[i] = a[i] + b[i], and `vector_add`, the host
    code that copies the inputs to the GPU, chooses a launch configuration that covers every
    element, launches the kernel and returns the result as a NumPy array.

    The idea: a kernel is launched as a grid of blocks of threads. With a fixed block size, the
    number of blocks must be rounded UP, so the last block has threads past the end of the array:
    they must do nothing (a "bounds guard"), or they read and write memory that is not yours.

    How it is graded: float32 inputs of many sizes, including 1, 31, 32, 33, 1000 and 1025 (sizes
    that are not a multiple of your block size), compared elementwise with NumPy; the inputs must
    be left unchanged. On the simulator every out-of-bounds access is an error that names the line.
"""

import numpy as np
from numba import cuda

THREADS_PER_BLOCK = 256


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
