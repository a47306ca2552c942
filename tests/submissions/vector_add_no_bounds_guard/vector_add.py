"""Known-wrong: the kernel has no bounds guard, so threads past the end of the arrays write out of bounds."""


import numpy as np
from numba import cuda

THREADS_PER_BLOCK = 256


@cuda.jit
def add_kernel(a, b, out):
    """out[i] = a[i] + b[i] for every i, one thread per element."""
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    out[i] = a[i] + b[i]  # BUG: no bounds guard
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
