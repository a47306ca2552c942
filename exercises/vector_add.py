"""Exercise: vector add, your first CUDA kernels.

Each stage is a kernel and the host function that launches it. `gpugrade check vector_add`
grades them; `gpugrade check vector_add --hints` shows a hint for the first stage not yet done.

Stage 1: one thread per element (`add_kernel`, `vector_add`).
    Write `add_kernel` so that thread i computes out[i] = a[i] + b[i], and `vector_add`, the host
    code that copies the inputs to the GPU, chooses a launch configuration that covers every
    element, launches the kernel and returns the result as a NumPy array.

    The idea: a kernel is launched as a grid of blocks of threads. With a fixed block size, the
    number of blocks must be rounded UP, so the last block has threads past the end of the array:
    they must do nothing (a "bounds guard"), or they read and write memory that is not yours.

    How it is graded: float32 inputs of many sizes, including 1, 31, 32, 33, 1000 and 1025 (sizes
    that are not a multiple of your block size), compared elementwise with NumPy; the inputs must
    be left unchanged. On the simulator every out-of-bounds access is an error that names the line.

Stage 2: a grid-stride loop on a grid sized for the GPU (`add_grid_stride_kernel`, `vector_add_grid_stride`).
    Launch exactly `grid_blocks()` blocks of THREADS_PER_BLOCK threads whatever the size of the
    input (given: as many threads as the GPU's SMs hold at once), and let each thread loop over
    the elements i, i + stride, i + 2*stride, ... where stride is the number of threads in the
    whole grid (`cuda.gridsize(1)`).

    The idea: a grid sized for the machine (not for the data) handles any n and keeps every SM
    full, whatever n is. Because in every iteration the 32 threads of a warp touch 32 consecutive
    elements, each warp-wide load is "coalesced" into the fewest 32-byte memory sectors (4 for
    float32). Giving each thread its own contiguous chunk instead looks natural but makes every
    warp touch 32 different sectors. A small fixed grid (say 32 blocks) is correct too, but leaves
    most SMs idle: the speed threshold sees it.

    Going further (how the reference streams at the full bandwidth): a full grid is 2,048 threads
    per SM at most, and DRAM answers a load after half a microsecond or more. To keep it busy, each
    thread needs several loads on their way at once (bytes in flight = bandwidth x latency). In
    `out[i] = a[i] + b[i]` inside the loop a thread has two: the compiler cannot load a[i + stride]
    before it has stored out[i] (out might be the same array as a), so every iteration waits a
    whole round trip. The reference loads ITEMS_IN_FLIGHT elements of a and b first (i, i + stride,
    ...), then adds and stores them: four times the bytes in flight. On an H100 a plain loop is
    within the speed threshold; on an H200, whose bandwidth needs more in flight, it is about 70%
    of the bandwidth ("latency-bound" in the feedback).

    How it is graded: sizes from 1 to past twice the grid; the launch must use the same grid for
    every size; global sectors per request must match the reference (coalescing), and the time
    (modelled on the simulator, measured on a GPU) the reference's.

Stage 3: in-place SAXPY with minimal memory traffic (`saxpy_kernel`, `saxpy_inplace`).
    Compute y <- alpha * x + y in place: `saxpy_inplace(alpha, x, y)` must leave the result in the
    caller's array y (copy the device result back into it) and return it.

    The idea: SAXPY does 2 floating-point operations per element but moves 12 bytes (load x, load
    y, store y): its speed is set by memory bandwidth, not arithmetic. The fastest kernel is the
    one that moves the fewest bytes: read each input once, write each output once, no temporary
    arrays, no second pass, and every access coalesced.

    How it is graded: float32 inputs of many sizes compared with NumPy (the result must be in y);
    on the simulator the kernel's total global loads and stores must not exceed the reference's
    (2 loads and 1 store per element) and its accesses must be coalesced.
"""

import numpy as np
from numba import cuda, float32

THREADS_PER_BLOCK = 256
BLOCKS_PER_SM = 8  # stage 2: 8 blocks of 256 threads = 2048, the most threads one SM holds at once
ITEMS_IN_FLIGHT = 4  # stage 2 (going further): elements a thread loads before it adds and stores them


# -- stage 1 ----------------------------------------------------------------------------------
@cuda.jit
def add_kernel(a, b, out):
    """out[i] = a[i] + b[i] for every i, one thread per element."""
    raise NotImplementedError()


def vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return a + b computed by `add_kernel` on the GPU (a and b: 1-D float32 arrays of equal size)."""
    raise NotImplementedError()


# -- stage 2 ----------------------------------------------------------------------------------
def grid_blocks() -> int:
    """Stage 2's grid, whatever n is: enough blocks to fill every SM of the current GPU once."""
    return BLOCKS_PER_SM * cuda.get_current_device().MULTIPROCESSOR_COUNT


@cuda.jit
def add_grid_stride_kernel(a, b, out):
    """out[i] = a[i] + b[i] for every i, each thread looping with the grid's stride."""
    raise NotImplementedError()


def vector_add_grid_stride(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return a + b computed by `add_grid_stride_kernel` launched on grid_blocks() x THREADS_PER_BLOCK."""
    raise NotImplementedError()


# -- stage 3 ----------------------------------------------------------------------------------
@cuda.jit
def saxpy_kernel(alpha, x, y):
    """y[i] = alpha * x[i] + y[i] for every i, in place."""
    raise NotImplementedError()


def saxpy_inplace(alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y <- alpha * x + y on the GPU (x, y: 1-D float32 arrays of equal size); returns y."""
    raise NotImplementedError()
