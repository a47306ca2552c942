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
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] += src[i]
    ### END SOLUTION


def add_on(rank, dst, src) -> None:
    """Launch add_kernel on `rank`'s stream (dst and src: memory of that rank)."""
    with rank:
        add_kernel[blocks_for(dst.size), THREADS_PER_BLOCK, rank.stream](dst, src)


# -- stage 1 ----------------------------------------------------------------------------------
def allreduce_naive(ranks, bufs) -> None:
    """In place: every bufs[r] becomes the sum over ranks, through rank 0."""
    ### BEGIN SOLUTION
    root = ranks[0]
    n = bufs[0].size
    scratch = root.device_array(n, bufs[0].dtype)
    for r in ranks[1:]:
        ranks.copy(scratch, bufs[r.id])
        add_on(root, bufs[0], scratch)
    for r in ranks[1:]:
        ranks.copy(bufs[r.id], bufs[0])
    ### END SOLUTION


# -- stage 2 ----------------------------------------------------------------------------------
def allreduce_ring(ranks, bufs) -> None:
    """In place: reduce-scatter then all-gather around the ring, N - 1 steps each."""
    ### BEGIN SOLUTION
    count, n = len(ranks), bufs[0].size
    largest = chunk(n, count, 0)[1]
    scratch = [r.device_array(max(largest, 1), bufs[0].dtype) for r in ranks]
    for step in range(count - 1):  # reduce-scatter: rank r sends chunk r - step
        for r in ranks:
            lo, hi = chunk(n, count, (r.id - step) % count)
            if hi > lo:
                ranks.copy(scratch[r.next.id][:hi - lo], bufs[r.id][lo:hi])
        for r in ranks:  # rank r adds what rank r - 1 sent: its chunk r - 1 - step
            lo, hi = chunk(n, count, (r.id - 1 - step) % count)
            if hi > lo:
                add_on(r, bufs[r.id][lo:hi], scratch[r.id][:hi - lo])
    for step in range(count - 1):  # all-gather: rank r passes on the finished chunk r + 1 - step
        for r in ranks:
            lo, hi = chunk(n, count, (r.id + 1 - step) % count)
            if hi > lo:
                ranks.copy(bufs[r.next.id][lo:hi], bufs[r.id][lo:hi])
    ### END SOLUTION


# -- stage 3 ----------------------------------------------------------------------------------
def allreduce_pipelined(ranks, bufs) -> None:
    """In place: the ring with every chunk in SLICES pieces, asynchronous copies on a stream of
    their own, adds on r.stream, events between them, two scratch buffers per rank."""
    ### BEGIN SOLUTION
    count, n = len(ranks), bufs[0].size
    pieces = count * SLICES
    largest = chunk(n, pieces, 0)[1]
    sends = [r.new_stream() for r in ranks]  # rank r's copies to rank r + 1
    scratch = [[r.device_array(max(largest, 1), bufs[0].dtype) for _ in range(2)] for r in ranks]
    ready = [[None] * pieces for _ in ranks]   # rank r's piece p is final for this step (an event)
    freed = [[None, None] for _ in ranks]      # rank r's scratch b may be refilled (an event)

    def piece(c: int, k: int) -> tuple[int, int]:
        return chunk(n, pieces, c * SLICES + k)

    def after(event, stream) -> None:
        if event is not None:
            event.wait(stream)

    use = 0
    for step in range(count - 1):  # reduce-scatter
        for k in range(SLICES):
            b = use % 2
            use += 1
            for r in ranks:
                q = r.next
                c = (r.id - step) % count
                lo, hi = piece(c, k)
                if hi == lo:
                    continue
                p = c * SLICES + k
                after(ready[r.id][p], sends[r.id])   # rank r's piece is final
                after(freed[q.id][b], sends[r.id])   # rank q's scratch b is no longer read
                ranks.copy(scratch[q.id][b][:hi - lo], bufs[r.id][lo:hi], stream=sends[r.id])
                arrived = r.event()
                arrived.record(sends[r.id])
                arrived.wait(q.stream)
                add_on(q, bufs[q.id][lo:hi], scratch[q.id][b][:hi - lo])
                done = q.event()
                done.record(q.stream)
                freed[q.id][b] = done
                ready[q.id][p] = done
    for step in range(count - 1):  # all-gather
        for k in range(SLICES):
            for r in ranks:
                q = r.next
                c = (r.id + 1 - step) % count
                lo, hi = piece(c, k)
                if hi == lo:
                    continue
                p = c * SLICES + k
                after(ready[r.id][p], sends[r.id])   # rank r has the final piece
                after(freed[q.id][0], sends[r.id])   # rank q's adds are done before its buffer changes
                after(freed[q.id][1], sends[r.id])
                ranks.copy(bufs[q.id][lo:hi], bufs[r.id][lo:hi], stream=sends[r.id])
                landed = r.event()
                landed.record(sends[r.id])
                ready[q.id][p] = landed
    ### END SOLUTION
