"""Known-wrong: the tiled kernel loops over K // TILE tiles, dropping the last, partial tile when K is not a
multiple of TILE.
"""

import math

import numpy as np
from numba import cuda, float32

BLOCK = 16          # stage 1: BLOCK x BLOCK threads per block
TILE = 16           # stage 2: TILE x TILE tiles and threads per block
BIG_TILE = 32       # stage 3: BIG_TILE x BIG_TILE tiles of C per block ...
COARSE = 4          # ... of BIG_TILE x (BIG_TILE // COARSE) threads, COARSE outputs per thread
ROWS_PER_PASS = BIG_TILE // COARSE


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
    for t in range(K // TILE):  # BUG: rounds down, the last partial tile is skipped
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
        for k in range(BIG_TILE):
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
