"""Kernels several test modules of tests/sim run (tests/sim is on sys.path under pytest)."""

from numba import cuda, float32, int32

TILE = 16  # tiled_matmul: TILE x TILE threads per block


@cuda.jit
def vector_add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit(device=True)
def clamp_square(x, limit):
    if x > limit:
        return limit
    y = x * x
    return y if y < limit else limit


@cuda.jit(device=True)
def apply_twice(x, limit):
    return clamp_square(clamp_square(x, limit), limit)


@cuda.jit
def uses_device_functions(inp, out, limit):
    i = cuda.grid(1)
    if i < inp.size:
        out[i] = apply_twice(inp[i], limit)


@cuda.jit
def local_prefix(inp, out):
    i = cuda.grid(1)
    tmp = cuda.local.array(8, int32)
    for k in range(8):
        tmp[k] = inp[i] + k
    for k in range(1, 8):
        tmp[k] += tmp[k - 1]
    out[i] = tmp[7 - i % 8]


@cuda.jit
def barrier_in_branch(out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    out[t] = t


@cuda.jit
def shuffle_from_exited_lane(out):
    t = cuda.threadIdx.x
    if t >= 16:
        return
    out[t] = cuda.shfl_down_sync(0xFFFF, t, 8)


@cuda.jit
def tiled_matmul(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for k in range((A.shape[1] + TILE - 1) // TILE):
        sA[ty, tx] = A[y, k * TILE + tx] if y < A.shape[0] and k * TILE + tx < A.shape[1] else 0
        sB[ty, tx] = B[k * TILE + ty, x] if x < B.shape[1] and k * TILE + ty < B.shape[0] else 0
        cuda.syncthreads()
        for j in range(TILE):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = acc
