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
    ### BEGIN SOLUTION
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc
    ### END SOLUTION


def matmul_naive(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Return A @ B computed by `matmul_naive_kernel` on a 2-D grid of BLOCK x BLOCK blocks."""
    _check_shapes(A, B)
    ### BEGIN SOLUTION
    M, N = A.shape[0], B.shape[1]
    d_A = cuda.to_device(A)
    d_B = cuda.to_device(B)
    d_C = cuda.device_array((M, N), dtype=np.float32)
    grid = (math.ceil(N / BLOCK), math.ceil(M / BLOCK))
    matmul_naive_kernel[grid, (BLOCK, BLOCK)](d_A, d_B, d_C)
    return d_C.copy_to_host()
    ### END SOLUTION


# -- stage 2 ----------------------------------------------------------------------------------
@cuda.jit
def matmul_tiled_kernel(A, B, C):
    """C = A @ B, one TILE x TILE tile of C per block, tiles of A and B staged in shared memory."""
    ### BEGIN SOLUTION
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col = cuda.blockIdx.x * TILE + tx
    row = cuda.blockIdx.y * TILE + ty
    M, K = A.shape
    N = B.shape[1]
    acc = float32(0.0)
    for t in range((K + TILE - 1) // TILE):
        k = t * TILE + tx
        if row < M and k < K:
            sA[ty, tx] = A[row, k]
        else:
            sA[ty, tx] = 0.0
        k = t * TILE + ty
        if k < K and col < N:
            sB[ty, tx] = B[k, col]
        else:
            sB[ty, tx] = 0.0
        cuda.syncthreads()
        for j in range(TILE):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if row < M and col < N:
        C[row, col] = acc
    ### END SOLUTION


def matmul_tiled(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Return A @ B computed by `matmul_tiled_kernel` on TILE x TILE blocks."""
    _check_shapes(A, B)
    ### BEGIN SOLUTION
    M, N = A.shape[0], B.shape[1]
    d_A = cuda.to_device(A)
    d_B = cuda.to_device(B)
    d_C = cuda.device_array((M, N), dtype=np.float32)
    grid = (math.ceil(N / TILE), math.ceil(M / TILE))
    matmul_tiled_kernel[grid, (TILE, TILE)](d_A, d_B, d_C)
    return d_C.copy_to_host()
    ### END SOLUTION


# -- stage 3 ----------------------------------------------------------------------------------
@cuda.jit
def matmul_coarsened_kernel(A, B, C):
    """C = A @ B, one BIG_TILE x BIG_TILE tile of C per block, COARSE rows of it per thread."""
    ### BEGIN SOLUTION
    sA = cuda.shared.array((BIG_TILE, BIG_TILE), float32)
    sB = cuda.shared.array((BIG_TILE, BIG_TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col = cuda.blockIdx.x * BIG_TILE + tx
    row0 = cuda.blockIdx.y * BIG_TILE
    M, K = A.shape
    N = B.shape[1]
    acc0 = float32(0.0)
    acc1 = float32(0.0)
    acc2 = float32(0.0)
    acc3 = float32(0.0)
    for t in range((K + BIG_TILE - 1) // BIG_TILE):
        k0 = t * BIG_TILE
        for r in range(COARSE):
            i = ty + r * ROWS_PER_PASS
            # a warp (fixed i, 32 consecutive tx) stores one row: 32 different banks
            if row0 + i < M and k0 + tx < K:
                sA[i, tx] = A[row0 + i, k0 + tx]
            else:
                sA[i, tx] = 0.0
            if k0 + i < K and col < N:
                sB[i, tx] = B[k0 + i, col]
            else:
                sB[i, tx] = 0.0
        cuda.syncthreads()
        # runs of UNROLL steps: each unrolled whole, so every index is a constant offset
        for k1 in range(0, BIG_TILE, UNROLL):
            for k in range(k1, k1 + UNROLL):
                b = sB[k, tx]  # a row of sB: conflict-free; reused for the COARSE outputs
                acc0 += sA[ty, k] * b  # one word for the whole warp: a broadcast
                acc1 += sA[ty + ROWS_PER_PASS, k] * b
                acc2 += sA[ty + 2 * ROWS_PER_PASS, k] * b
                acc3 += sA[ty + 3 * ROWS_PER_PASS, k] * b
        cuda.syncthreads()
    if col < N:
        if row0 + ty < M:
            C[row0 + ty, col] = acc0
        if row0 + ty + ROWS_PER_PASS < M:
            C[row0 + ty + ROWS_PER_PASS, col] = acc1
        if row0 + ty + 2 * ROWS_PER_PASS < M:
            C[row0 + ty + 2 * ROWS_PER_PASS, col] = acc2
        if row0 + ty + 3 * ROWS_PER_PASS < M:
            C[row0 + ty + 3 * ROWS_PER_PASS, col] = acc3
    ### END SOLUTION


def matmul_coarsened(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Return A @ B computed by `matmul_coarsened_kernel` on (BIG_TILE, ROWS_PER_PASS) blocks."""
    _check_shapes(A, B)
    ### BEGIN SOLUTION
    M, N = A.shape[0], B.shape[1]
    d_A = cuda.to_device(A)
    d_B = cuda.to_device(B)
    d_C = cuda.device_array((M, N), dtype=np.float32)
    grid = (math.ceil(N / BIG_TILE), math.ceil(M / BIG_TILE))
    matmul_coarsened_kernel[grid, (BIG_TILE, ROWS_PER_PASS)](d_A, d_B, d_C)
    return d_C.copy_to_host()
    ### END SOLUTION
