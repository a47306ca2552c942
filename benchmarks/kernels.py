"""The benchmark workloads: kernels, inputs, launch shapes and NumPy checks.

Imported both by the process that runs grader.sim and by the NUMBA_ENABLE_CUDASIM=1 process that
runs numba-cuda's stock simulator, so every kernel here is plain numba-cuda code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import cuda, float32

TILE = 16
WARP = 32


@cuda.jit
def tiled_matmul(A, B, C):
    """C = A @ B with 16x16 tiles staged through shared memory."""
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        col = t * TILE + tx
        row = t * TILE + ty
        if y < A.shape[0] and col < A.shape[1]:
            sA[ty, tx] = A[y, col]
        else:
            sA[ty, tx] = 0.0
        if x < B.shape[1] and row < B.shape[0]:
            sB[ty, tx] = B[row, x]
        else:
            sB[ty, tx] = 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = acc


@cuda.jit
def vector_add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def warp_reduce(a, out):
    """Sum of `a` into out[0]: a shuffle tree per warp, then one atomic per warp."""
    i = cuda.grid(1)
    v = float32(0.0)
    if i < a.size:
        v = a[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if cuda.threadIdx.x % 32 == 0:
        cuda.atomic.add(out, 0, v)


@dataclass
class Workload:
    name: str
    kernel: object
    make_inputs: Callable[[], tuple]       # host arrays: inputs..., output
    launch: Callable[[tuple], tuple]       # host inputs -> (grid, block)
    check: Callable[[tuple, np.ndarray], None]  # host inputs, output -> raises on mismatch
    output_index: int = -1


def _matmul(n: int) -> Workload:
    def make():
        rng = np.random.default_rng(1)
        A = rng.random((n, n), dtype=np.float32)
        B = rng.random((n, n), dtype=np.float32)
        return A, B, np.zeros((n, n), np.float32)

    def launch(args):
        g = math.ceil(n / TILE)
        return (g, g), (TILE, TILE)

    def check(args, out):
        ref = args[0].astype(np.float64) @ args[1].astype(np.float64)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

    return Workload(f"tiled matmul {n}x{n} (16x16 tiles)", tiled_matmul, make, launch, check)


def _vadd(log2n: int) -> Workload:
    n = 1 << log2n

    def make():
        rng = np.random.default_rng(2)
        a = rng.random(n, dtype=np.float32)
        b = rng.random(n, dtype=np.float32)
        return a, b, np.zeros(n, np.float32)

    def launch(args):
        return (math.ceil(n / 256),), (256,)

    def check(args, out):
        np.testing.assert_array_equal(out, args[0] + args[1])

    return Workload(f"vector add 2^{log2n}", vector_add, make, launch, check)


def _reduce(log2n: int) -> Workload:
    n = 1 << log2n

    def make():
        rng = np.random.default_rng(3)
        return rng.random(n, dtype=np.float32), np.zeros(1, np.float32)

    def launch(args):
        return (math.ceil(n / 256),), (256,)

    def check(args, out):
        ref = args[0].astype(np.float64).sum()
        np.testing.assert_allclose(out[0], ref, rtol=1e-5)

    return Workload(f"warp-shuffle reduction 2^{log2n}", warp_reduce, make, launch, check)


WORKLOADS = {
    "matmul128": lambda: _matmul(128),
    "vadd16": lambda: _vadd(16),
    "vadd20": lambda: _vadd(20),
    "reduce16": lambda: _reduce(16),
}


def stock_shim() -> None:
    """Give numba-cuda's stock simulator a `shfl_down_sync` (it has no warp shuffles).

    Minimal: it uses the *block* barrier as the warp rendezvous, so it is only right when every
    thread of the block calls it at the same point with a full mask, as `warp_reduce` does.
    """
    import threading

    from numba.cuda.simulator import kernelapi

    def shfl_down_sync(self, mask, value, delta):
        t = threading.current_thread()
        shared = t._manager.__dict__.setdefault("_shfl_values", {})
        shared[t.thread_id] = value
        t.syncthreads()
        lane = t.thread_id % 32
        result = shared[t.thread_id + delta] if lane + delta < 32 and \
            t.thread_id + delta in shared else value
        t.syncthreads()
        return result

    kernelapi.FakeCUDAModule.shfl_down_sync = shfl_down_sync
