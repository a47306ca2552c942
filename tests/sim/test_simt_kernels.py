"""The lockstep SIMT executor on whole kernels: results, numba's typing, divergence, memory
spaces, atomics and warp ops; cross-checked against numpy and the per-thread executor."""

import math

import numpy as np
import pytest
from numba import cuda, float32, float64, int32

import grader.sim as sim
from sim_kernels import (barrier_in_branch, local_prefix, shuffle_from_exited_lane,
                         tiled_matmul, uses_device_functions, vector_add)

TPB = 16


@pytest.fixture
def simt():
    """The simulator with the SIMT executor only: anything it cannot run is an error."""
    s = sim.install(executor="simt")
    try:
        yield s
    finally:
        sim.uninstall()


def both_executors(kernel, grid, block, make_args, shared=0):
    """Run on SIMT and on the per-thread executor; return both sets of host arrays."""
    results = []
    for executor in ("simt", "thread"):
        sim.install(executor=executor)
        try:
            args = make_args()
            with sim.trace() as records:
                kernel[grid, block, 0, shared](*args)
            assert records[0].executor == executor
            results.append([a.copy_to_host() if hasattr(a, "copy_to_host") else a for a in args])
        finally:
            sim.uninstall()
    return results


def test_vector_add_with_a_partial_last_block(simt):
    n = 1000
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    out = cuda.device_array(n, np.float32)
    with sim.trace() as records:
        vector_add[(n + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_array_equal(out.copy_to_host(), a + b)
    rec = records[0]
    assert rec.executor == "simt" and rec.fallback_reason is None
    assert rec.counters["global_loads"] == 2 * n and rec.counters["global_stores"] == n
    assert rec.counters["sectors_per_request"] == pytest.approx(4.0, abs=0.1)


@cuda.jit
def grid_stride(a, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, a.shape[0], stride):
        out[i] = 2 * a[i] + 1


def test_grid_stride_loop_with_per_lane_bounds(simt):
    a = np.arange(5000, dtype=np.float64)
    out = cuda.device_array_like(a)
    grid_stride[7, 64](cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * a + 1)


@pytest.mark.parametrize("m,k,n", [(128, 128, 128), (50, 37, 45)])
def test_tiled_matmul_non_multiple_sizes(simt, m, k, n):
    A = np.random.rand(m, k).astype(np.float32)
    B = np.random.rand(k, n).astype(np.float32)
    C = cuda.device_array((m, n), np.float32)
    grid = ((n + TPB - 1) // TPB, (m + TPB - 1) // TPB)
    with sim.trace() as records:
        tiled_matmul[grid, (TPB, TPB)](cuda.to_device(A), cuda.to_device(B), C)
    np.testing.assert_allclose(C.copy_to_host(), A @ B, rtol=1e-5)
    counters = records[0].counters
    assert counters["wavefronts_per_shared_request"] == pytest.approx(1.0)
    assert counters["barriers"] == 2 * grid[0] * grid[1] * ((k + TPB - 1) // TPB)


def test_tiled_matmul_identical_to_per_thread_executor():
    A = np.random.rand(40, 20).astype(np.float32)
    B = np.random.rand(20, 24).astype(np.float32)
    simt_out, thread_out = both_executors(
        tiled_matmul, (2, 3), (TPB, TPB),
        lambda: [cuda.to_device(A), cuda.to_device(B), cuda.device_array((40, 24), np.float32)])
    np.testing.assert_array_equal(simt_out[2], thread_out[2])


@cuda.jit
def tree_reduce(inp, out):
    buf = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = inp[i] if i < inp.size else 0
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        out[cuda.blockIdx.x] = buf[0]


def test_shared_memory_tree_reduction(simt):
    x = np.random.rand(1000).astype(np.float32)
    out = cuda.device_array(8, np.float32)
    tree_reduce[8, 128](cuda.to_device(x), out)
    np.testing.assert_allclose(out.copy_to_host().sum(), x.sum(), rtol=1e-5)


@cuda.jit
def tree_reduce_missing_barrier(inp, out):
    buf = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    buf[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    s = 64
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        s //= 2
    if t == 0:
        out[cuda.blockIdx.x] = buf[0]


def test_missing_barrier_is_a_race_although_lockstep_gets_the_right_sum(simt):
    x = cuda.to_device(np.ones(256, np.float32))
    out = cuda.device_array(2, np.float32)
    with pytest.raises(sim.RaceError, match="buf"):
        tree_reduce_missing_barrier[2, 128](x, out)


@cuda.jit
def warp_shuffle_sum(inp, out):
    i = cuda.grid(1)
    v = inp[i] if i < inp.size else float32(0)
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


def test_warp_shuffle_reduction_one_atomic_per_warp(simt):
    x = np.arange(4096, dtype=np.float32)
    out = cuda.to_device(np.zeros(1, np.float32))
    with sim.trace() as records:
        warp_shuffle_sum[16, 256](cuda.to_device(x), out)
    assert out.copy_to_host()[0] == x.sum()
    assert records[0].counters["atomics"] == 4096 // 32


@cuda.jit
def take_a_ticket(counter, tickets, maxima, flags):
    i = cuda.grid(1)
    tickets[i] = cuda.atomic.add(counter, 0, 1)
    cuda.atomic.max(maxima, i % 3, i)
    old = cuda.atomic.cas(flags, i % 4, 0, i + 1)
    if old == 0:
        cuda.atomic.exch(counter, 1, i)
    cuda.atomic.sub(counter, 2, 2)
    cuda.atomic.min(maxima, 3, -i)
    cuda.atomic.xor(counter, 3, i)


def test_atomics_with_old_values_serialise_in_lane_order(simt):
    n = 300
    counter = cuda.to_device(np.zeros(4, np.int64))
    tickets = cuda.device_array(n, np.int64)
    maxima = cuda.to_device(np.zeros(4, np.int64))
    flags = cuda.to_device(np.zeros(4, np.int32))
    take_a_ticket[3, 100](counter, tickets, maxima, flags)
    np.testing.assert_array_equal(tickets.copy_to_host(), np.arange(n))  # lane order
    c = counter.copy_to_host()
    assert c[0] == n and c[1] == 3 and c[2] == -2 * n
    assert c[3] == np.bitwise_xor.reduce(np.arange(n))
    np.testing.assert_array_equal(maxima.copy_to_host(), [297, 298, 299, -299])
    np.testing.assert_array_equal(flags.copy_to_host(), [1, 2, 3, 4])


@cuda.jit
def unsigned_inc_dec(counts):
    cuda.atomic.inc(counts, 0, np.uint32(4))
    cuda.atomic.dec(counts, 1, np.uint32(4))


def test_atomic_inc_dec_wrap(simt):
    counts = cuda.to_device(np.zeros(2, np.uint32))
    unsigned_inc_dec[1, 7](counts)
    # inc: 0..4 then wraps to 0: 7 increments from 0 -> 2; dec from 0 wraps to 4 first
    np.testing.assert_array_equal(counts.copy_to_host(), [2, 4 - 6 % 5])


@cuda.jit
def divergent(inp, out):
    i = cuda.grid(1)
    if i >= inp.size:
        return
    v = inp[i]
    acc = 0
    for k in range(10):
        if k == v % 7:
            continue
        if k > v:
            break
        acc += k
    if v % 2 == 0:
        out[i] = acc
    elif v % 3 == 0:
        out[i] = -acc
        return
    else:
        out[i] = 1000 + acc
    out[i] += 1


def _divergent_reference(v):
    acc = 0
    for k in range(10):
        if k == v % 7:
            continue
        if k > v:
            break
        acc += k
    if v % 2 == 0:
        return acc + 1
    if v % 3 == 0:
        return -acc
    return 1000 + acc + 1


def test_divergent_if_else_return_break_continue(simt):
    x = np.arange(100, dtype=np.int64) % 13
    out = cuda.device_array(100, np.int64)
    divergent[4, 32](cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), [_divergent_reference(v) for v in x])


@cuda.jit
def collatz(start, steps):
    i = cuda.grid(1)
    if i < start.size:
        n = start[i]
        count = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            count += 1
        steps[i] = count


def test_while_loop_with_lane_dependent_trip_count(simt):
    start = np.arange(1, 2001, dtype=np.int64)
    steps = cuda.device_array(2000, np.int64)
    collatz[16, 128](cuda.to_device(start), steps)

    def ref(n):
        c = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            c += 1
        return c

    np.testing.assert_array_equal(steps.copy_to_host(), [ref(int(n)) for n in start])


def test_device_functions_with_divergent_returns(simt):
    x = np.linspace(-3, 3, 50).astype(np.float32)
    out = cuda.device_array_like(x)
    uses_device_functions[2, 32](cuda.to_device(x), out, np.float32(4.0))
    ref = np.minimum(np.minimum(x * x, 4) ** 2, 4)
    ref = np.where(x > 4, 4, ref)
    np.testing.assert_allclose(out.copy_to_host(), ref, rtol=1e-6)


def test_local_arrays_are_per_lane(simt):
    x = np.arange(64, dtype=np.int32)
    out = cuda.device_array_like(x)
    local_prefix[2, 32](cuda.to_device(x), out)
    ref = [np.cumsum(v + np.arange(8))[7 - i % 8] for i, v in enumerate(x)]
    np.testing.assert_array_equal(out.copy_to_host(), ref)


@cuda.jit
def dot_rows(a, b, out, wide):
    i = cuda.grid(1)
    if i < out.size:
        acc = 0.0  # numba types this float64, whatever the arrays hold
        for k in range(a.shape[1]):
            acc += a[i, k] * b[i, k]
        out[i] = acc
        small = int32(2147483647)
        wide[i] = small + int32(1)  # numba computes int32 + int32 in int64: no wrap-around


def test_accumulator_and_integer_widths_follow_numba_typing(simt):
    a = (np.random.rand(4, 3000) * 1e3).astype(np.float32)
    b = (np.random.rand(4, 3000) * 1e3).astype(np.float32)
    out = cuda.device_array(4, np.float64)
    wide = cuda.device_array(4, np.int64)
    dot_rows[1, 32](cuda.to_device(a), cuda.to_device(b), out, wide)
    ref = np.zeros(4)
    for k in range(a.shape[1]):  # float32 products, accumulated in float64 one at a time
        ref += (a[:, k] * b[:, k]).astype(np.float64)
    np.testing.assert_array_equal(out.copy_to_host(), ref)
    assert (wide.copy_to_host() == 2147483648).all()


@cuda.jit
def math_and_casts(x, out):
    i = cuda.grid(1)
    v = x[i]
    out[i, 0] = math.sqrt(v) + math.exp(-v)
    out[i, 1] = math.floor(v * 2.5)
    out[i, 2] = max(v, float32(1.5)) + min(abs(v - 3), 2)
    out[i, 3] = float32(v) / 3 if v > 2 or v < 0.5 else 7
    out[i, 4] = int32(v * 3.7) // 2 + (i % 3)


def test_math_functions_casts_and_short_circuits(simt):
    x = np.linspace(0.1, 4, 32).astype(np.float32)
    out = cuda.device_array((32, 5), np.float64)
    math_and_casts[1, 32](cuda.to_device(x), out)
    o = out.copy_to_host()
    np.testing.assert_allclose(o[:, 0], np.sqrt(x) + np.exp(-x), rtol=1e-6)
    np.testing.assert_array_equal(o[:, 1], np.floor(x * 2.5))
    np.testing.assert_allclose(o[:, 2], np.maximum(x, 1.5) + np.minimum(np.abs(x - 3), 2),
                               rtol=1e-6)
    np.testing.assert_allclose(o[:, 3], np.where((x > 2) | (x < 0.5), x / 3, 7), rtol=1e-6)
    np.testing.assert_array_equal(o[:, 4], (x.astype(np.float64) * 3.7).astype(np.int32) // 2
                                  + np.arange(32) % 3)


@cuda.jit
def guarded_read(a, out):
    i = cuda.grid(1)
    # the right operand must not run in lanes where the left is false (it would be out of bounds)
    if i < a.size and a[i] > 0:
        out[i] = 1


def test_and_short_circuits_per_lane(simt):
    a = np.array([1, -1, 2], np.float64)
    out = cuda.to_device(np.zeros(64, np.int64))
    guarded_read[1, 64](cuda.to_device(a), out)
    assert list(out.copy_to_host()[:4]) == [1, 0, 1, 0]


@cuda.jit
def dims_3d(out):
    x, y, z = cuda.grid(3)
    w, h, d = cuda.gridsize(3)
    out[z, y, x] = x + 10 * y + 100 * z + 0 * (w + h + d)


def test_three_dimensional_grids(simt):
    out = cuda.device_array((4, 6, 8), np.int64)
    dims_3d[(2, 3, 2), (4, 2, 2)](out)
    z, y, x = np.indices((4, 6, 8))
    np.testing.assert_array_equal(out.copy_to_host(), x + 10 * y + 100 * z)


@cuda.jit
def reverse_dynamic(inp, out):
    buf = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    buf[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    out[cuda.grid(1)] = buf[cuda.blockDim.x - 1 - t]


def test_dynamic_shared_memory_per_block(simt):
    x = np.arange(64, dtype=np.float32)
    out = cuda.device_array_like(x)
    reverse_dynamic[4, 16, 0, 16 * 4](cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), x.reshape(4, 16)[:, ::-1].reshape(-1))


@cuda.jit
def votes(out):
    t = cuda.threadIdx.x
    out[t, 0] = cuda.ballot_sync(0xFFFFFFFF, t % 2 == 1)
    out[t, 1] = cuda.any_sync(0xFFFFFFFF, t == 3) + 2 * cuda.all_sync(0xFFFFFFFF, t < 40)
    out[t, 2] = cuda.match_any_sync(0xFFFFFFFF, t // 8)
    out[t, 3] = cuda.shfl_xor_sync(0xFFFFFFFF, t, 1)
    out[t, 4] = cuda.shfl_up_sync(0xFFFFFFFF, t, 2)
    out[t, 5] = cuda.shfl_sync(0xFFFFFFFF, t * 10, 4)
    out[t, 6] = cuda.lanemask_lt()
    out[t, 7] = cuda.activemask()
    out[t, 8] = cuda.syncthreads_count(t % 3)


def test_warp_votes_shuffles_and_block_counts(simt):
    out = cuda.device_array((64, 9), np.int64)
    votes[1, 64](out)
    o = out.copy_to_host()
    t = np.arange(64)
    lane = t % 32
    assert (o[:, 0] == np.int32(np.uint32(0xAAAAAAAA).view(np.int32))).all()  # numba: int32
    np.testing.assert_array_equal(o[:, 1], np.where(t < 32, 3, 0))  # per warp
    np.testing.assert_array_equal(  # numba types match_any_sync int32
        o[:, 2], np.array([0xFF << (8 * (k // 8)) for k in lane], np.uint32).view(np.int32))
    np.testing.assert_array_equal(o[:, 3], t ^ 1)
    np.testing.assert_array_equal(o[:, 4], np.where(lane >= 2, t - 2, t))
    np.testing.assert_array_equal(o[:, 5], (t - lane + 4) * 10)
    np.testing.assert_array_equal(o[:, 6], (1 << lane) - 1)
    assert (o[:, 7] == 0xFFFFFFFF).all()
    assert (o[:, 8] == np.count_nonzero(t % 3)).all()


def test_shuffle_reading_an_exited_lane_is_flagged(simt):
    out = cuda.device_array(32, np.int64)
    with pytest.raises(sim.WarpOpError, match="shfl_down_sync reads lane"):
        shuffle_from_exited_lane[1, 32](out)


@cuda.jit
def shuffle_inside_the_bounds_guard(x, out):
    i = cuda.grid(1)
    if i < x.size:  # lanes past the end skip the shuffle its full mask names them in
        v = x[i]
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 16)
        out[i] = v


def test_a_shuffle_some_lanes_named_in_its_mask_skip_says_where_it_goes(simt):
    with pytest.raises(sim.WarpOpError, match=r"lane 20 named in the mask is live but not executing this op "
                                              r"\(diverged: call it where every lane named in the mask runs"):
        shuffle_inside_the_bounds_guard[1, 32](cuda.to_device(np.ones(20, np.float32)),
                                               cuda.device_array(32, np.float32))


def test_barrier_reached_by_some_threads_is_divergence(simt):
    out = cuda.device_array(32, np.int64)
    with pytest.raises(sim.BarrierDivergenceError, match="line 3|syncthreads"):
        barrier_in_branch[1, 32](out)


@cuda.jit
def off_by_one(a, out):
    i = cuda.grid(1)
    if i <= a.size:
        out[i] = a[i]


def test_out_of_bounds_names_the_student_line(simt):
    a = cuda.to_device(np.zeros(40, np.float32))
    out = cuda.device_array(64, np.float32)
    with pytest.raises(sim.OutOfBoundsError) as info:
        off_by_one[1, 64](a, out)
    assert info.value.line == off_by_one.py_func.__code__.co_firstlineno + 4
    assert info.value.filename == __file__


@cuda.jit
def block_uniform_barrier(out):
    if cuda.blockIdx.x == 0:
        cuda.syncthreads()
    out[cuda.grid(1)] = 1


def test_barrier_under_a_block_uniform_condition_is_fine(simt):
    out = cuda.device_array(64, np.int64)
    block_uniform_barrier[2, 32](out)
    assert out.copy_to_host().sum() == 64


def test_batches_of_blocks_give_the_same_result():
    from grader.sim.simt import executor

    x = np.arange(5000, dtype=np.float64)
    results = []
    for lanes in (executor.BATCH_LANES, 128):
        old, executor.BATCH_LANES = executor.BATCH_LANES, lanes
        sim.install(executor="simt")
        try:
            counter = cuda.to_device(np.zeros(4, np.int64))
            tickets = cuda.device_array(5000, np.int64)
            maxima = cuda.to_device(np.zeros(4, np.int64))
            flags = cuda.to_device(np.zeros(4, np.int32))
            take_a_ticket[50, 100](counter, tickets, maxima, flags)
            out = cuda.device_array_like(x)
            grid_stride[7, 64](cuda.to_device(x), out)
            results.append((tickets.copy_to_host(), out.copy_to_host()))
        finally:
            executor.BATCH_LANES = old
            sim.uninstall()
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_results_match_the_per_thread_executor_on_divergent_code():
    x = np.arange(100, dtype=np.int64) % 13
    simt_out, thread_out = both_executors(
        divergent, 4, 32, lambda: [cuda.to_device(x), cuda.device_array(100, np.int64)])
    np.testing.assert_array_equal(simt_out[1], thread_out[1])


@cuda.jit
def float64_shared(out):
    s = cuda.shared.array(32, float64)
    s[cuda.threadIdx.x] = cuda.threadIdx.x * 0.5
    cuda.syncthreads()
    out[cuda.threadIdx.x] = s[31 - cuda.threadIdx.x]


def test_float64_shared_array(simt):
    out = cuda.device_array(32, np.float64)
    float64_shared[1, 32](out)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(32)[::-1] * 0.5)
