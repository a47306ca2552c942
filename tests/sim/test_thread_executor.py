"""The kernel API under the per-thread executor: indexing, memory spaces, barriers, atomics,
warp collectives, launch validation."""

import math

import numpy as np
import pytest
from numba import cuda, float32, int32

import grader.sim as sim


@cuda.jit
def indices(out):
    x, y = cuda.grid(2)
    w, h = cuda.gridsize(2)
    if x < out.shape[1] and y < out.shape[0]:
        out[y, x] = (cuda.blockIdx.x * 1000 + cuda.threadIdx.y * 100 + cuda.laneid
                     + 0 * (w + h + cuda.warpsize + cuda.blockDim.z + cuda.gridDim.z))


def test_grid_2d_indices(thread_sim):
    out = cuda.device_array((5, 7), np.int64)
    indices[(2, 3), (4, 2)](out)
    got = out.copy_to_host()
    for y in range(5):
        for x in range(7):
            tx, ty = x % 4, y % 2
            assert got[y, x] == (x // 4) * 1000 + ty * 100 + (ty * 4 + tx) % 32


@cuda.jit
def two_shared_on_one_line(out):
    a, b = cuda.shared.array(4, float32), cuda.shared.array(4, float32)
    t = cuda.threadIdx.x
    a[t] = t
    b[t] = 10 + t
    cuda.syncthreads()
    out[cuda.blockIdx.x, t] = a[3 - t] + b[t]


def test_two_shared_arrays_on_one_line_do_not_alias(thread_sim):
    out = cuda.device_array((2, 4), np.float32)
    two_shared_on_one_line[2, 4](out)
    np.testing.assert_array_equal(out.copy_to_host(), [[13, 13, 13, 13]] * 2)


@cuda.jit
def stale_shared(out):
    s = cuda.shared.array(1, int32)
    if cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
        s[0] = 7
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = s[0]


def test_shared_memory_is_fresh_per_block(simulator):
    out = cuda.device_array(2, np.int32)
    with pytest.raises(sim.UninitialisedReadError, match="shared array 's'"):
        stale_shared[2, 2](out)


@cuda.jit
def dynamic_shared(inp, out):
    buf = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    buf[t] = inp[t]
    cuda.syncthreads()
    out[t] = buf[buf.size - 1 - t]


def test_dynamic_shared_sized_by_launch(thread_sim):
    inp = cuda.to_device(np.arange(16, dtype=np.float32))
    out = cuda.device_array(16, np.float32)
    dynamic_shared[1, 16, 0, 16 * 4](inp, out)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(16)[::-1])


@cuda.jit
def local_and_const(out, table):
    c = cuda.const.array_like(table)
    loc = cuda.local.array(3, int32)
    for k in range(3):
        loc[k] = c[k] * cuda.threadIdx.x
    out[cuda.threadIdx.x] = loc[0] + loc[1] + loc[2]


def test_local_and_const_arrays(thread_sim):
    out = cuda.device_array(4, np.int32)
    local_and_const[1, 4](out, np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(out.copy_to_host(), [0, 6, 12, 18])


@cuda.jit
def sync_predicates(out):
    t = cuda.threadIdx.x
    # numba's syncthreads_* take an int32 predicate (a bool is refused: test_executor_agreement)
    c = cuda.syncthreads_count(int32(t % 3 == 0))
    a = cuda.syncthreads_and(int32(t < 100))
    o = cuda.syncthreads_or(int32(t == 5))
    if t == 0:
        out[0] = c
        out[1] = a
        out[2] = o


def test_syncthreads_count_and_or(thread_sim):
    out = cuda.device_array(3, np.int32)
    sync_predicates[1, 10](out)
    np.testing.assert_array_equal(out.copy_to_host(), [4, 1, 1])


@cuda.jit
def atomics(counter, olds, bits, mx, wrap):
    t = cuda.threadIdx.x
    olds[t] = cuda.atomic.add(counter, 0, 1)
    cuda.atomic.or_(bits, 0, 1 << t)
    cuda.atomic.max(mx, 0, t * 3)
    cuda.atomic.inc(wrap, 0, 4)  # numba's atomic.inc takes unsigned arrays only
    cuda.atomic.cas(counter, 2, 0, 99)


def test_atomics_return_old_values(thread_sim):
    counter = cuda.to_device(np.zeros(3, np.int64))
    olds = cuda.device_array(8, np.int64)
    bits = cuda.to_device(np.zeros(1, np.int64))
    mx = cuda.to_device(np.zeros(1, np.int64))
    wrap = cuda.to_device(np.zeros(1, np.uint32))
    atomics[1, 8](counter, olds, bits, mx, wrap)
    assert sorted(olds.copy_to_host()) == list(range(8))
    c = counter.copy_to_host()
    assert c[0] == 8
    assert wrap.copy_to_host()[0] == 3  # 0 1 2 3 4 0 1 2 3: wraps to 0 past 4
    assert c[2] == 99
    assert bits.copy_to_host()[0] == 255 and mx.copy_to_host()[0] == 21


@cuda.jit
def warp_reduce(inp, out):
    i = cuda.grid(1)
    v = inp[i]
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


def test_shuffle_reduction(thread_sim):
    inp = cuda.to_device(np.arange(128, dtype=np.float32))
    out = cuda.to_device(np.zeros(1, np.float32))
    warp_reduce[2, 64](inp, out)
    assert out.copy_to_host()[0] == np.arange(128).sum()


@cuda.jit
def warp_votes(out):
    t = cuda.threadIdx.x
    ballot = cuda.ballot_sync(0xFFFFFFFF, t % 2 == 1)
    anyv = cuda.any_sync(0xFFFFFFFF, t == 3)
    allv = cuda.all_sync(0xFFFFFFFF, t < 32)
    eq = cuda.eq_sync(0xFFFFFFFF, 5)
    same = cuda.match_any_sync(0xFFFFFFFF, t // 8)
    x = cuda.shfl_xor_sync(0xFFFFFFFF, t, 1)
    up = cuda.shfl_up_sync(0xFFFFFFFF, t, 2)
    bc = cuda.shfl_sync(0xFFFFFFFF, t * 10, 4)
    cuda.syncwarp()
    out[t, 0] = ballot
    out[t, 1] = anyv + 2 * allv + 4 * eq
    out[t, 2] = same
    out[t, 3] = x
    out[t, 4] = up
    out[t, 5] = bc
    out[t, 6] = cuda.lanemask_lt()
    out[t, 7] = cuda.activemask()


def test_warp_votes_and_shuffles(thread_sim):
    out = cuda.device_array((32, 8), np.int64)
    warp_votes[1, 32](out)
    o = out.copy_to_host()
    t = np.arange(32)
    # lane masks are int32 in numba's typing: lane 31 set reads negative in an int64 array
    assert (o[:, 0] == np.uint32(0xAAAAAAAA).view(np.int32)).all()
    assert (o[:, 1] == 7).all()
    np.testing.assert_array_equal(
        o[:, 2], np.array([0xFF << (8 * (k // 8)) for k in t], np.uint32).view(np.int32))
    np.testing.assert_array_equal(o[:, 3], t ^ 1)
    np.testing.assert_array_equal(o[:, 4], np.where(t >= 2, t - 2, t))
    assert (o[:, 5] == 40).all()
    np.testing.assert_array_equal(o[:, 6], (1 << t) - 1)
    assert (o[:, 7] == 0xFFFFFFFF).all()


@cuda.jit
def partial_warp_ballot(out):
    out[cuda.threadIdx.x] = cuda.ballot_sync(0xFFFFFFFF, True)


def test_partial_last_warp_lanes_do_not_take_part(thread_sim):
    out = cuda.device_array(40, np.int64)
    partial_warp_ballot[1, 40](out)
    o = out.copy_to_host()
    assert (o[:32] == -1).all() and (o[32:] == 0xFF).all()  # int32, as numba types it


@cuda.jit
def float_math(inp, out):
    i = cuda.threadIdx.x
    out[i] = math.sqrt(inp[i]) + math.exp(float32(0.0))


def test_math_keeps_float32(thread_sim):
    inp = cuda.to_device(np.array([4.0, 9.0], np.float32))
    out = cuda.device_array(2, np.float32)
    float_math[1, 2](inp, out)
    np.testing.assert_array_equal(out.copy_to_host(), [3.0, 4.0])


@cuda.jit
def grid_stride(a, out):
    start = cuda.grid(1)
    for i in range(start, a.size, cuda.gridsize(1)):
        out[i] = a[i] * 2


def test_seeded_shuffle_gives_the_same_result():
    with sim.installed(executor="thread", seed=1234):
        a = cuda.to_device(np.arange(300, dtype=np.float64))
        out = cuda.device_array(300)
        grid_stride[3, 32](a, out)
        np.testing.assert_array_equal(out.copy_to_host(), np.arange(300) * 2)


@pytest.mark.parametrize("grid, block, shared, match", [
    (1, 1025, 0, "1025 threads per block"),
    (1, (1, 1, 65), 0, "block dimension z = 65"),
    (0, 32, 0, ">= 1"),
    ((1, 70000), 32, 0, "grid dimension y = 70000"),
    (1, 32, 300 * 1024, "dynamic shared memory"),
    (1.5, 32, 0, r"grid must be an int.*got 1.5 \(a float: divide with //"),
    ((np.float32(2), 1), 32, 0, "a float: divide with //"),
])
def test_launch_validation(simulator, grid, block, shared, match):
    out = cuda.device_array(4)
    with pytest.raises(sim.LaunchConfigError, match=match):
        grid_stride[grid, block, 0, shared](out, out)


@cuda.jit
def too_much_shared(out):
    s = cuda.shared.array(13000, float32)
    s[0] = 1
    out[0] = s[0]


def test_static_shared_over_48k_is_a_launch_error(thread_sim):
    out = cuda.device_array(1, np.float32)
    with pytest.raises(sim.LaunchConfigError, match="52000 bytes of static"):
        too_much_shared[1, 1](out)


def test_streams_events_and_devices(thread_sim):
    start, end = cuda.event(), cuda.event()
    s = cuda.stream()
    start.record(s)
    a = cuda.to_device(np.arange(1 << 12, dtype=np.float32), stream=s)
    out = cuda.device_array_like(a, stream=s)
    grid_stride[4, 128, s](a, out)
    end.record(s)
    end.synchronize()
    assert cuda.event_elapsed_time(start, end) > 0
    assert cuda.get_current_device().id == 0
    assert len(cuda.gpus) == 1
    with cuda.gpus[0]:
        assert cuda.select_device(0).compute_capability == (9, 0)


@cuda.jit
def uses_unsimulated(out):
    out[0] = cuda.ldcg(out, 0)  # a load with a cache hint


def test_unsimulated_feature_is_named(thread_sim):
    out = cuda.device_array(1)
    with pytest.raises(sim.NotSimulatedError, match="cuda.ldcg"):
        uses_unsimulated[1, 1](out)


def test_forall(thread_sim):
    a = cuda.to_device(np.arange(1000, dtype=np.float64))
    out = cuda.device_array(1000)
    grid_stride.forall(1000)(a, out)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(1000) * 2)


@cuda.jit
def one_slot_of_a_local_array(out):
    i = cuda.grid(1)
    tmp = cuda.local.array(4, int32)
    for k in range(4):  # (a GPU does not zero it; an unset element is an uninitialised read)
        tmp[k] = 0
    tmp[i % 4] = i + 1
    out[i] = tmp[0] + tmp[1] + tmp[2] + tmp[3]


def test_every_thread_has_a_local_array_of_its_own(thread_sim):
    """Local arrays after the first of a launch copy its layout (grader/sim/thread/cuda.py), never
    its storage: each thread sees only what it wrote."""
    out = cuda.device_array(64, np.int32)
    one_slot_of_a_local_array[2, 32](out)
    assert (out.copy_to_host() == np.arange(1, 65)).all()


@cuda.jit
def row_sums(m, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = np.sum(m[i])  # numba compiles it for a GPU: one thread adds its row


@cuda.jit
def whole_sum(a, out):
    if cuda.grid(1) == 0:
        out[0] = a.sum()


def test_np_sum_inside_a_kernel_adds_as_numba_does_each_element_a_load(thread_sim):
    m = np.arange(12, dtype=np.float32).reshape(3, 4) / 3
    out = np.zeros(3, np.float32)
    with sim.trace() as launches:
        row_sums[1, 32](cuda.to_device(m), out_dev := cuda.device_array(3, np.float32))
    out = out_dev.copy_to_host()
    expected = [np.float32(0)] * 3
    for i in range(3):  # one after another, in float32 (numba's accumulator for a float32 array)
        for v in m[i]:
            expected[i] = np.float32(expected[i] + v)
    np.testing.assert_array_equal(out, expected)
    assert launches[0].counters["global_loads"] == 12
    big = np.full(5, 2**31 - 1, np.int32)  # int32 elements, an int64 accumulator: no wrap-around
    total = cuda.device_array(1, np.int64)
    whole_sum[1, 32](cuda.to_device(big), total)
    assert total.copy_to_host()[0] == 5 * (2**31 - 1)


@cuda.jit
def largest(a, out):
    if cuda.grid(1) == 0:
        out[0] = a.max()


def test_an_array_reduction_numba_does_not_compile_for_a_gpu_is_refused_as_numba_refuses_it(thread_sim):
    from grader.sim.errors import CompileError

    with pytest.raises(CompileError, match="kernel 'largest' would not compile for a GPU"):
        largest[1, 32](cuda.to_device(np.ones(4, np.float32)), cuda.device_array(1, np.float32))
