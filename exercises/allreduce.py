"""Exercise: all-reduce across GPUs, from a naive reduce-and-broadcast to a pipelined ring.

An all-reduce leaves on every rank (GPU) the element-wise sum of all the ranks' buffers: it is how
data-parallel training adds up its gradients. Each stage is a host function `f(ranks, bufs)`:
`bufs[r]` is rank r's 1-D device array (float32 or int32, any size n >= 1, also n < N), on rank
r's GPU; afterwards every `bufs[r]` must hold the sum, in place. `gpugrade check allreduce` grades
them (on the simulator's virtual GPUs, or on real ones); `--hints` shows a hint for the first
stage not yet done.

`ranks` is the course's small helper for what numba-cuda has no word for (N ranks may share one
GPU; the copy between ranks is counted): `len(ranks)`, `ranks[i]`, `r.id`, `r.next`, `r.prev`;
`with r:` (make rank r's GPU current to launch on it); `r.stream`, `r.new_stream()`, `r.event()`;
`r.device_array(shape, dtype)` (scratch memory of rank r); `ranks.copy(dst, src, stream=None)`
(the only way data crosses ranks: synchronous without a stream, asynchronous on a stream of
either rank); `ranks.synchronize()`. Everything else is plain numba-cuda: kernels launched inside
`with r:` on `r.stream`, events `e.record(stream)` / `e.wait(stream)`. A kernel may only touch
memory of the rank it runs on: reading another rank's buffer from a kernel is refused.

Stage 1: reduce to rank 0, then broadcast (`add_kernel`, `allreduce_naive`).
    Rank 0 receives each other rank's buffer into a scratch array and adds it into its own with
    `add_kernel` (dst[i] += src[i], one thread per element); then copies the sum to every rank.

    The idea: the simplest correct all-reduce, and the baseline for the next stage: N - 1 full
    buffers flow into rank 0 and N - 1 flow out of it, so rank 0's links carry everything.

    How it is graded: 2, 3, 4 and 8 ranks; sizes 1, N - 1, 1003 and 40009 (not divisible by N),
    float32 (a tolerance growing with N) and int32 (exact, with inputs that tell which rank's
    contribution is missing); every rank's buffer is checked; the adds are kernels; no more bytes
    between ranks than the reference (2 (N - 1) buffers in all).

Stage 2: ring all-reduce (`allreduce_ring`).
    Split the buffer into N chunks whose sizes differ by at most one. Reduce-scatter: in step s
    (N - 1 steps) every rank r sends chunk (r - s) mod N to rank r + 1, which adds it into its own
    chunk; afterwards rank r holds the full sum of chunk (r + 1) mod N. All-gather: in N - 1 more
    steps every rank passes the finished chunks on around the ring, copying them into place.

    The idea: every link of the ring is busy in every step, and each rank sends and receives only
    2 (N - 1) / N of the buffer whatever N is (the naive version: rank 0 receives N - 1 buffers).
    That is bandwidth-optimal, and it is what NCCL does.

    How it is graded: as stage 1, plus the traffic: only the N links r -> r + 1 carry bytes, each
    2 (N - 1) messages of at most ceil(n / N) elements (per rank at most 2 (N - 1) ceil(n / N)
    elements sent and received), and no more add work than the reference.

Stage 3: chunked and pipelined over streams (`allreduce_pipelined`).
    As the ring, but every chunk is cut into SLICES pieces and the copies are asynchronous:
    each rank copies on a stream of its own (`r.new_stream()`) and adds on `r.stream`, and events
    order the two: a slice is added only after its copy arrived, a slice is sent only after its
    add is done, and a scratch buffer is refilled only after the add that read it is done (two
    scratch buffers per rank, used in turn). No host synchronisation inside the loop.

    The idea: while slice k is being added, slice k + 1 is already on the wire: copies and adds
    overlap, and the links never wait for the host. Streams run concurrently on a GPU, so each
    missing event is a race, even if the answer happens to come out right.

    How it is graded: as stage 2 (slices add no traffic), at least 2 (N - 1) x SLICES messages per
    link; no cross-stream race (the simulator tracks what the streams and events order and names
    the two operations of a race); at most one host synchronisation; on the modelled timeline (as
    on a 1 GiB buffer, where the links are the bound) copies and adds overlap and the whole takes
    no longer than the reference's.
"""

import numpy as np
from numba import cuda

THREADS_PER_BLOCK = 256
SLICES = 2  # stage 3: pieces per chunk


def blocks_for(n: int) -> int:
    return (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK


def chunk(n: int, parts: int, c: int) -> tuple[int, int]:
    """[lo, hi) of chunk c when n elements are cut into `parts` chunks differing by at most one
    (some are empty when n < parts: skip those)."""
    base, extra = divmod(n, parts)
    lo = c * base + min(c, extra)
    return lo, lo + base + (1 if c < extra else 0)


@cuda.jit
def add_kernel(dst, src):
    """dst[i] += src[i] for every i < dst.size."""
    raise NotImplementedError()


def add_on(rank, dst, src) -> None:
    """Launch add_kernel on `rank`'s stream (dst and src: memory of that rank)."""
    with rank:
        add_kernel[blocks_for(dst.size), THREADS_PER_BLOCK, rank.stream](dst, src)


# -- stage 1 ----------------------------------------------------------------------------------
def allreduce_naive(ranks, bufs) -> None:
    """In place: every bufs[r] becomes the sum over ranks, through rank 0."""
    raise NotImplementedError()


# -- stage 2 ----------------------------------------------------------------------------------
def allreduce_ring(ranks, bufs) -> None:
    """In place: reduce-scatter then all-gather around the ring, N - 1 steps each."""
    raise NotImplementedError()


# -- stage 3 ----------------------------------------------------------------------------------
def allreduce_pipelined(ranks, bufs) -> None:
    """In place: the ring with every chunk in SLICES pieces, asynchronous copies on a stream of
    their own, adds on r.stream, events between them, two scratch buffers per rank."""
    raise NotImplementedError()
