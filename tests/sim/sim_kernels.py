"""Kernels several test modules of tests/sim run (tests/sim is on sys.path under pytest)."""

from numba import cuda, int32


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
