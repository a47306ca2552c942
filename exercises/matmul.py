"""Exercise: matrix multiplication C = A @ B, from naive to register-blocked.

A is M x K, B is K x N, C is M x N, all float32 and C-contiguous (row-major). Each stage is a
kernel and the host function that launches it; every size must work, including sizes that are not
a multiple of the block or tile size and non-square matrices. `gpugrade check matmul` grades them;
`gpugrade check matmul --hints` shows a hint for the first stage not yet done.

Stage 1: naive, one thread per output element (`matmul_naive_kernel`, `matmul_naive`).
    Thread (x, y) of a 2-D grid computes C[row, col] with col = x and row = y: the dot product of
    row `row` of A with column `col` of B. Threads outside C do nothing.

    The idea: a 2-D grid maps naturally onto a matrix. Map x (the fastest-varying thread index,
    the one that changes across the 32 threads of a warp) onto the column: then a warp reads 32
    consecutive elements of a row of B and writes 32 consecutive elements of C (coalesced), and
    every thread of the warp reads the same element of A (one broadcast).

    How it is graded: many shapes (1x1x1, odd sizes, non-square) against NumPy with a tolerance
    for float32 GEMM; on the simulator, global sectors per request must match the reference.

Stage 2: shared-memory tiling (`matmul_tiled_kernel`, `matmul_tiled`).
    Each TILE x TILE block computes a TILE x TILE tile of C. Walk along K one tile at a time: the
    block's threads cooperatively load a tile of A and a tile of B into shared memory (zeros where
    the tile hangs over the edge of the matrix), wait for each other, multiply the two tiles from
    shared memory, and wait again before the next tiles overwrite them.

    The idea: the naive kernel loads every element of A and B from global memory N (or M) times.
    With tiles in shared memory each element is loaded from global memory once per tile instead:
    TILE times less traffic. The two `cuda.syncthreads()` are both needed: the first so no thread
    reads a tile before it is fully written, the second so no thread overwrites a tile that others
    are still reading. Forgetting either is a data race that the simulator reports with its line.

    How it is graded: shapes including K, M, N not multiples of TILE; on the simulator: no races,
    and global loads must not exceed the reference's (about 1/TILE of the naive kernel's).

Stage 3: thread coarsening with register blocking (`matmul_coarsened_kernel`, `matmul_coarsened`).
    Blocks of (BIG_TILE, BIG_TILE // COARSE) threads compute BIG_TILE x BIG_TILE tiles of C: each
    thread computes COARSE outputs of one column (rows ty, ty + BIG_TILE // COARSE, ...), keeping
    its COARSE partial sums in registers (local scalars, not an array).

    The idea: in stage 2 every multiply-add needs two shared-memory loads. Here a thread loads the
    B element once per step of k and reuses it for COARSE accumulators, and the bigger tile halves
    the global traffic again. Shared memory is 32 banks of 4-byte words: a warp's request is served
    in one pass only when its 32 threads hit 32 different banks or the same word. Choose the tile
    layout so that every shared load and store of a warp is conflict-free (a row of 32 floats
    read by the 32 threads of a warp, or one word broadcast). Reading a tile down a column
    (stride 32 words) puts all 32 threads in the same bank: 32 passes. Padding a row to 33
    floats is the classic fix when a column access cannot be avoided.

    Then count instructions, not only loads: numba's compiler unrolls a loop of 16 steps whole,
    every index a constant offset (about 3 instructions per multiply-add, loads included), but a
    32-step loop of four multiply-adds only by 4, keeping 64-bit index arithmetic in the loop (8
    per multiply-add): on an H200 that made this stage slower than stage 2. Run the k loop in
    runs of UNROLL steps (`for k1 in range(0, BIG_TILE, UNROLL): for k in range(k1, k1 + UNROLL):`).
    `cuda.compile_ptx` shows what the compiler made of it.

    How it is graded: the same shapes as stage 2; on the simulator: no races, global loads and
    shared loads per output at most the reference's, and no bank conflicts; its speed is modelled
    from its memory traffic and the instructions its loops issue (from the compiled PTX).
"""

import math

import numpy as np
from numba import cuda, float32

BLOCK = 16          # stage 1: BLOCK x BLOCK threads per block
TILE = 16           # stage 2: TILE x TILE tiles and threads per block
BIG_TILE = 32       # stage 3: BIG_TILE x BIG_TILE tiles of C per block ...
COARSE = 4          # ... of BIG_TILE x (BIG_TILE // COARSE) threads, COARSE outputs per thread
ROWS_PER_PASS = BIG_TILE // COARSE
UNROLL = 16         # ... and the k loop in runs of UNROLL steps, which numba's compiler unrolls whole


def _check_shapes(A: np.ndarray, B: np.ndarray) -> None:
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"cannot multiply {A.shape} by {B.shape}")


# -- stage 1 ----------------------------------------------------------------------------------
@cuda.jit
def matmul_naive_kernel(A, B, C):
    """C[row, col] = sum over k of A[row, k] * B[k, col], one thread per element of C."""
    raise NotImplementedError()


def matmul_naive(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Return A @ B computed by `matmul_naive_kernel` on a 2-D grid of BLOCK x BLOCK blocks."""
    _check_shapes(A, B)
    raise NotImplementedError()


# -- stage 2 ----------------------------------------------------------------------------------
@cuda.jit
def matmul_tiled_kernel(A, B, C):
    """C = A @ B, one TILE x TILE tile of C per block, tiles of A and B staged in shared memory."""
    raise NotImplementedError()


def matmul_tiled(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Return A @ B computed by `matmul_tiled_kernel` on TILE x TILE blocks."""
    _check_shapes(A, B)
    raise NotImplementedError()


# -- stage 3 ----------------------------------------------------------------------------------
@cuda.jit
def matmul_coarsened_kernel(A, B, C):
    """C = A @ B, one BIG_TILE x BIG_TILE tile of C per block, COARSE rows of it per thread."""
    raise NotImplementedError()


def matmul_coarsened(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Return A @ B computed by `matmul_coarsened_kernel` on (BIG_TILE, ROWS_PER_PASS) blocks."""
    _check_shapes(A, B)
    raise NotImplementedError()
