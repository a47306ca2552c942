"""The two executors agree: on kernels both run, the same outputs and the same counters; on
buggy kernels, the same error class naming the same line; on kernels numba refuses, the same
refusal. The per-thread executor follows numba's types (locals, operations, warp-op results)
as the SIMT executor does.

Sizes stay small: the per-thread executor costs microseconds per memory access.
"""

import math

import numpy as np
import pytest
from numba import cuda, float32, float64, int32, int64

import grader.sim as sim
from grader.sim.thread import rewrite as thread_rewrite
from grader.sim.errors import CompileError
from sim_kernels import (barrier_in_branch, local_prefix, shuffle_from_exited_lane,
                         uses_device_functions, vector_add)

EXECUTORS = ("simt", "thread")
# the per-thread executor with the race and uninitialised-read checkers off: element accesses
# are compiled inline (grader/sim/thread/access.py) instead of going through the recorders
COMPILED = sim.Checks(off={"races", "uninitialised"})

# counters that do not depend on how an executor groups accesses into requests
COUNTERS = ("global_loads", "global_stores", "shared_loads", "shared_stores", "atomics", "shared_atomics",
            "barriers", "warp_ops", "threads_launched", "max_global_loads_per_thread",
            "max_global_stores_per_thread", "global_load_requests", "global_store_requests",
            "global_load_sectors", "global_store_sectors", "shared_requests",
            "bank_conflict_wavefronts", "atomic_same_address")


def run_both(kernel, grid, block, make_args, shared=0):
    """Run the kernel under each executor (no fallback), the per-thread one also with its
    accesses compiled; return {"simt" | "thread" | "compiled": (host copies of the
    device-array arguments, record)}."""
    results = {}
    for name, executor, checks in (*((e, e, None) for e in EXECUTORS),
                                   ("compiled", "thread", COMPILED)):
        with sim.installed(executor=executor, checks=checks), sim.trace() as records:
            args = make_args()
            kernel[grid, block, 0, shared](*args)
            outputs = [a.copy_to_host() for a in args if hasattr(a, "copy_to_host")]
        (record,) = records
        assert record.executor == executor and record.typing_note is None
        results[name] = (outputs, record)
    return results


def assert_agree(results, counters=COUNTERS):
    out_s, rec_s = results["simt"]
    for name in ("thread", "compiled"):
        out_t, rec_t = results[name]
        assert len(out_s) == len(out_t)
        for a, b in zip(out_s, out_t):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b, err_msg=name)
        for key in counters:
            assert rec_s.counters[key] == rec_t.counters[key], (name, key)
        for key in ("global_loads", "global_stores", "shared_loads", "shared_stores"):
            np.testing.assert_array_equal(rec_s.threads[key], rec_t.threads[key],
                                          err_msg=f"{name} {key}")
    return out_s


def dev(x):
    return cuda.to_device(np.ascontiguousarray(x))


# ---------------------------------------------------------------- kernels both executors run
def test_vector_add_with_a_partial_last_block():
    a, b = np.random.rand(200).astype(np.float32), np.random.rand(200).astype(np.float32)
    out = assert_agree(run_both(vector_add, 4, 64,
                                lambda: [dev(a), dev(b), cuda.device_array(200, np.float32)]))
    np.testing.assert_array_equal(out[-1], a + b)


@cuda.jit
def saxpy_grid_stride(alpha, x, y, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.size, stride):
        out[i] = alpha * x[i] + y[i]


def test_grid_stride_loop_with_a_float32_scalar():
    x, y = np.random.rand(300).astype(np.float32), np.random.rand(300).astype(np.float32)
    out = assert_agree(run_both(saxpy_grid_stride, 2, 32, lambda: [
        np.float32(2.5), dev(x), dev(y), cuda.device_array(300, np.float32)]))
    np.testing.assert_array_equal(out[-1], np.float32(2.5) * x + y)


TILE = 4


@cuda.jit
def tiled_matmul(a, b, c):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        k = t * TILE
        sa[ty, tx] = a[row, k + tx] if row < a.shape[0] and k + tx < a.shape[1] else 0
        sb[ty, tx] = b[k + ty, col] if k + ty < b.shape[0] and col < b.shape[1] else 0
        cuda.syncthreads()
        for j in range(TILE):
            acc += sa[ty, j] * sb[j, tx]
        cuda.syncthreads()
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc


def test_tiled_matmul_with_sizes_not_multiple_of_the_tile():
    a = np.random.rand(6, 7).astype(np.float32)
    b = np.random.rand(7, 5).astype(np.float32)
    out = assert_agree(run_both(tiled_matmul, (2, 2), (TILE, TILE), lambda: [
        dev(a), dev(b), cuda.device_array((6, 5), np.float32)]))
    np.testing.assert_allclose(out[-1], a @ b, rtol=1e-5)


@cuda.jit
def tree_sum(a, partial):
    sh = cuda.shared.array(64, float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    sh[t] = a[i] if i < a.size else 0.0
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if t < s:
            sh[t] += sh[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = sh[0]


float64 = np.float64  # numba accepts numpy dtypes for shared arrays


def test_tree_reduction_in_shared_memory():
    a = np.random.rand(150)
    out = assert_agree(run_both(tree_sum, 3, 64, lambda: [dev(a), cuda.device_array(3)]))
    assert math.isclose(out[-1].sum(), a.sum(), rel_tol=1e-12)


@cuda.jit
def shuffle_sum(a, total):
    i = cuda.grid(1)
    v = a[i] if i < a.size else 0
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(total, 0, v)


def test_shuffle_reduction_with_atomics():
    a = np.arange(100, dtype=np.int64)
    out = assert_agree(run_both(shuffle_sum, 2, 64, lambda: [dev(a), dev(np.zeros(1, np.int64))]))
    assert out[-1][0] == a.sum()


def test_atomics_on_one_address_are_counted_per_address():
    """One atomic per warp, all to out[0]: 4 warps' 4 atomics queue at one address (what a GPU
    serialises: `atomic_same_address`), on every executor; per-lane atomics to their own element
    (a histogram of distinct bins) queue one deep."""
    a = np.arange(100, dtype=np.int64)
    results = run_both(shuffle_sum, 2, 64, lambda: [dev(a), dev(np.zeros(1, np.int64))])
    assert {name: record.counters["atomic_same_address"] for name, (_, record) in results.items()} == \
        dict.fromkeys(results, 4)
    spread = run_both(atomic_own_bin, 2, 64, lambda: [dev(np.zeros(128, np.int64))])
    assert {name: record.counters["atomic_same_address"] for name, (_, record) in spread.items()} == \
        dict.fromkeys(spread, 1)


@cuda.jit
def block_total_in_shared(a, total):
    """Lane 0 of each warp adds its warp's value into a shared total; thread 0 adds that to the
    global one: 2 shared atomics and 1 global atomic a block of 64."""
    block = cuda.shared.array(1, int64)
    if cuda.threadIdx.x == 0:
        block[0] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    if cuda.laneid == 0:
        cuda.atomic.add(block, 0, a[i] if i < a.size else 0)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(total, 0, block[0])


def test_shared_atomics_are_counted_apart_from_global_ones():
    """A global atomic goes to the L2 (the model's atomics limit, the courses' atomics criteria); a
    shared one the SM does itself: `shared_atomics`, on every executor."""
    a = np.arange(128, dtype=np.int64)
    results = run_both(block_total_in_shared, 2, 64, lambda: [dev(a), dev(np.zeros(1, np.int64))])
    out = assert_agree(results)
    assert {name: (record.counters["atomics"], record.counters["shared_atomics"])
            for name, (_, record) in results.items()} == dict.fromkeys(results, (2, 4))
    assert out[-1][0] == a[::32].sum()


@cuda.jit
def atomic_own_bin(bins):
    cuda.atomic.add(bins, cuda.grid(1), 1)


@cuda.jit
def atomic_olds(counter, olds, wrap, peak):
    t = cuda.threadIdx.x
    olds[t, 0] = cuda.atomic.add(counter, 0, 2)
    olds[t, 1] = cuda.atomic.inc(wrap, 0, 5)
    olds[t, 2] = cuda.atomic.max(peak, 0, (t * 7) % 11)
    olds[t, 3] = cuda.atomic.cas(counter, 1, t, t + 1)
    olds[t, 4] = cuda.atomic.exch(peak, 1, t)


def test_atomics_with_returned_old_values():
    out = assert_agree(run_both(atomic_olds, 1, 48, lambda: [
        dev(np.zeros(2, np.int64)), cuda.device_array((48, 5), np.int64),
        dev(np.zeros(1, np.uint32)), dev(np.zeros(2, np.int32))]))
    counter, olds = out[0], out[1]
    assert sorted(olds[:, 0]) == list(range(0, 96, 2)) and counter[0] == 96


@cuda.jit
def divergent(a, out):
    i = cuda.grid(1)
    if i >= a.size:
        return
    n = a[i]
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n //= 2
        else:
            n = 3 * n + 1
        steps += 1
        if steps > 50:
            break
    for k in range(i % 5):
        if k == 2:
            continue
        steps += k
    out[i] = steps if i % 3 else -steps


def test_divergent_control_flow():
    a = np.arange(1, 71, dtype=np.int32)
    assert_agree(run_both(divergent, 3, 32, lambda: [dev(a), cuda.device_array(70, np.int64)]))


@pytest.mark.parametrize("limit", [4.0, np.float32(4.0)])
def test_scalar_argument_passed_to_a_device_function_stays_a_scalar(limit):
    """Regression: under the per-thread executor a scalar kernel argument passed on to a
    device function arrived as a ThreadArray ("'>' not supported between instances of 'float'
    and 'ThreadArray'"; numpy scalars have `.flat`)."""
    x = np.linspace(-3, 3, 50).astype(np.float32)
    out = assert_agree(run_both(uses_device_functions, 2, 32, lambda: [
        dev(x), cuda.device_array_like(x), limit]))
    ref = np.minimum(np.minimum(x.astype(np.float64) ** 2, 4) ** 2, 4)
    np.testing.assert_allclose(out[1], ref, rtol=1e-6)


def test_local_arrays():
    x = np.arange(64, dtype=np.int32)
    assert_agree(run_both(local_prefix, 2, 32, lambda: [dev(x), cuda.device_array(64, np.int32)]))


@cuda.jit
def votes(out):
    t = cuda.threadIdx.x
    out[t, 0] = cuda.ballot_sync(0xFFFFFFFF, t % 2 == 1)
    out[t, 1] = cuda.match_any_sync(0xFFFFFFFF, t // 8)
    out[t, 2] = cuda.any_sync(0xFFFFFFFF, t == 3) + 2 * cuda.all_sync(0xFFFFFFFF, t < 40)
    ok = cuda.match_all_sync(0xFFFFFFFF, t // 32)
    out[t, 3] = ok[0]
    out[t, 4] = ok[1]
    out[t, 5] = cuda.syncthreads_count(t % 3)


def test_ballot_and_match_are_int32_as_numba_types_them():
    out = assert_agree(run_both(votes, 1, 64, lambda: [cuda.device_array((64, 6), np.int64)]))
    o = out[0]
    assert (o[:, 0] == np.uint32(0xAAAAAAAA).view(np.int32)).all()  # negative: int32
    assert (o[:, 3] == -1).all() and (o[:, 4] == 1).all()


@cuda.jit
def dot_rows(a, b, out, squares):
    i = cuda.grid(1)
    if i < out.size:
        acc = 0.0  # numba types this float64, whatever the arrays hold
        for k in range(a.shape[1]):
            acc += a[i, k] * b[i, k]
        out[i] = acc
        x = squares[i]
        squares[i] = x * x // 1000  # int32 * int32 is computed in int64
    scaled = 0.1 * (i + 1)  # float literal: float64
    if i < out.size and scaled > float32(0.1) * (i + 1):
        out[i] += 1


def test_float64_accumulation_and_integer_widening_follow_numba():
    a = (np.random.RandomState(1).rand(6, 400) * 100).astype(np.float32)
    b = (np.random.RandomState(2).rand(6, 400) * 100).astype(np.float32)
    squares = np.full(6, 100_000, np.int32)  # 1e10 overflows int32
    out = assert_agree(run_both(dot_rows, 1, 8, lambda: [
        dev(a), dev(b), cuda.device_array(6, np.float64), dev(squares)]))
    exact = np.zeros(6)
    for k in range(400):
        exact += (a[:, k] * b[:, k]).astype(np.float64)
    plus = np.array([0.1 * (i + 1) > np.float64(np.float32(0.1)) * (i + 1) for i in range(6)])
    np.testing.assert_array_equal(out[2], exact + plus)
    assert (out[3] == 10_000_000).all()


def test_without_numba_cuda_inference_the_record_says_so(monkeypatch):
    """Where numba's type inference is unavailable, the per-thread executor runs the code as
    written and the launch record says why."""
    from grader.sim.simt import typing as simt_typing
    from grader.sim.simt.unsupported import SimtUnsupported

    def unavailable(*args, **kwargs):
        raise SimtUnsupported("lockstep typing needs numba-cuda, which is not installed")

    monkeypatch.setattr(simt_typing, "infer", unavailable)
    x = np.arange(8, dtype=np.float32)
    with sim.installed(executor="thread"), sim.trace() as records:
        out = cuda.device_array_like(x)
        vector_add[1, 8](dev(x), dev(x), out)
    assert (out.copy_to_host() == 2 * x).all()
    assert "numba-cuda" in records[0].typing_note and "numpy" in records[0].typing_note


def test_typed_code_keeps_the_students_file_and_lines():
    from grader.sim.simt import typing as simt_typing

    func = dot_rows.py_func
    argtypes = (simt_typing.array_type(np.dtype(np.float32), 2),) * 2 + (
        simt_typing.array_type(np.dtype(np.float64), 1),
        simt_typing.array_type(np.dtype(np.int32), 1))
    code, _ = thread_rewrite.typed_code(func, simt_typing.infer(func, argtypes), "kernel")
    assert code.co_filename == func.__code__.co_filename
    original = {line for _, _, line in func.__code__.co_lines() if line}
    assert {line for _, _, line in code.co_lines() if line} <= original | {
        func.__code__.co_firstlineno + 1}


# ---------------------------------------------------------------- buggy kernels
def raised_by_both(kernel, grid, block, make_args, shared=0, compiled=True):
    """{executor: the SimError raised}; both must raise, and so must the per-thread executor
    with compiled accesses (`compiled`: for findings of checkers it keeps on)."""
    errors = {}
    runs = [*((e, e, None) for e in EXECUTORS)] + \
        ([("compiled", "thread", COMPILED)] if compiled else [])
    for name, executor, checks in runs:
        with sim.installed(executor=executor, checks=checks):
            with pytest.raises(sim.SimError) as info:
                kernel[grid, block, 0, shared](*make_args())
        errors[name] = info.value
    return errors


def assert_same_finding(errors, cls, line_text):
    """Same class, and all name the same line: the one holding `line_text`."""
    s = errors["simt"]
    for name, t in errors.items():
        assert type(s) is type(t) is cls, (name, type(s), type(t))
        assert s.line == t.line and s.filename == t.filename, (name, s.line, t.line)
    with open(s.filename) as f:
        assert line_text in f.read().splitlines()[s.line - 1]


@cuda.jit
def unguarded_copy(a, out):
    i = cuda.grid(1)
    out[i] = a[i] * 2  # no bounds guard
    

def test_out_of_bounds_read():
    errors = raised_by_both(unguarded_copy, 2, 32, lambda: [
        dev(np.ones(40, np.float32)), cuda.device_array(64, np.float32)])
    assert_same_finding(errors, sim.OutOfBoundsError, "out[i] = a[i] * 2")


@cuda.jit
def tree_sum_missing_barrier(a, out):
    sh = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    sh[t] = a[t]
    cuda.syncthreads()
    s = 32
    while s > 0:
        if t < s:
            sh[t] += sh[t + s]
        s //= 2  # missing cuda.syncthreads() in the loop
    if t == 0:
        out[0] = sh[0]


def test_shared_race_from_a_missing_syncthreads():
    errors = raised_by_both(tree_sum_missing_barrier, 1, 64, lambda: [
        dev(np.ones(64, np.float32)), cuda.device_array(1, np.float32)], compiled=False)
    assert_same_finding(errors, sim.RaceError, "sh[t] += sh[t + s]")


@cuda.jit
def racy_total(a, out):
    i = cuda.grid(1)
    v = a[i]
    out[0] += v


def test_global_race_on_one_accumulator():
    errors = raised_by_both(racy_total, 1, 32, lambda: [
        dev(np.ones(32, np.float32)), dev(np.zeros(1, np.float32))], compiled=False)
    assert_same_finding(errors, sim.RaceError, "out[0] += v")


@cuda.jit
def reads_unwritten_shared(out):
    tile = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    out[t] = tile[t]


def test_uninitialised_shared_read():
    errors = raised_by_both(reads_unwritten_shared, 1, 32, lambda: [
        cuda.device_array(32, np.float32)], compiled=False)
    assert_same_finding(errors, sim.UninitialisedReadError, "out[t] = tile[t]")


@cuda.jit
def reads_unwritten_local(x, y):
    loc = cuda.local.array(4, float32)
    i = cuda.grid(1)
    for j in range(3):  # loc[3] is never written
        loc[j] = x[i] * j
    y[i] = loc[0] + loc[1] + loc[2] + loc[3]


@cuda.jit
def reads_another_threads_local(out):
    spare = cuda.local.array(2, int32)  # same shape and type: its own name and flags
    loc = cuda.local.array(2, int32)
    i = cuda.grid(1)
    spare[0] = i
    if i == 0:
        loc[0] = 7  # thread 0's copy only
    out[i] = loc[0] + spare[0]


@cuda.jit
def writes_local_before_reading(x, y):
    loc = cuda.local.array((2, 3), float32)
    i = cuda.grid(1)
    for r in range(2):
        for c in range(3):
            loc[r, c] = x[i] + r * c
    y[i] = loc[1, 2] + loc[0, 0]


@pytest.mark.parametrize("checks", [None, sim.Checks(off={"races"})])
def test_uninitialised_local_read(checks):
    """The simulator zero-fills a local array; a GPU does not: a read of an element the thread
    never wrote is reported by both executors (compiled per-thread accesses included), naming
    the array, the index and what to do."""
    errors = {}
    for executor in EXECUTORS:
        with sim.installed(executor=executor, checks=checks), pytest.raises(sim.UninitialisedReadError) as info:
            reads_unwritten_local[1, 32](cuda.to_device(np.ones(32, np.float32)),
                                         cuda.device_array(32, np.float32))
        errors[executor] = info.value
    assert_same_finding(errors, sim.UninitialisedReadError, "loc[3]")
    for err in errors.values():
        assert "local array 'loc' at index 3" in str(err) and "set every element of 'loc'" in str(err)


def test_uninitialised_local_read_is_per_thread():
    """Each thread has its own local array: thread 0's store leaves thread 1's unwritten."""
    errors = raised_by_both(reads_another_threads_local, 1, 32, lambda: [cuda.device_array(32, np.int32)],
                            compiled=False)
    assert_same_finding(errors, sim.UninitialisedReadError, "out[i] = loc[0]")
    for err in errors.values():
        assert "local array 'loc' at index 0" in str(err) and err.thread == (1, 0, 0)


def test_local_array_written_before_read_is_no_finding():
    results = run_both(writes_local_before_reading, 2, 32, lambda: [
        cuda.to_device(np.arange(64, dtype=np.float32)), cuda.device_array(64, np.float32)])
    assert_agree(results)
    np.testing.assert_array_equal(results["simt"][0][1], 2 * np.arange(64) + 2)
    assert not results["simt"][1].warnings and not results["thread"][1].warnings


@cuda.jit
def shift_into(src, dst):
    i = cuda.grid(1)
    if i + 1 < dst.size:
        dst[i + 1] = src[i] * 2


@cuda.jit
def double_in_place(src, dst):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i] * 2


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_race_through_one_array_passed_twice_names_both_parameters(executor):
    """Audit M4: `k(x, x)` raced on 'dst' with a load the message never tied to `src`."""
    with sim.installed(executor=executor):
        x = dev(np.arange(64, dtype=np.float32))
        with pytest.raises(sim.RaceError) as info:
            shift_into[2, 32](x, x)
        launched = line_of_call("shift_into[2, 32](x, x)")
        assert f"src and dst are the same array, passed twice at line {launched}" in str(info.value)
        y = dev(np.arange(64, dtype=np.float32))
        double_in_place[2, 32](y, y)  # in place, each thread its own element: no race, no note
        np.testing.assert_array_equal(y.copy_to_host()[:3], [0, 2, 4])
        a, b = dev(np.arange(64, dtype=np.float32)), cuda.device_array(64, np.float32)
        shift_into[2, 32](a, b)  # separate arrays: no finding
        with pytest.raises(sim.RaceError) as info:
            shift_into[2, 32](x[:32], x[16:48])
        assert "src and dst are views of one array" in str(info.value)


def line_of_call(text):
    """Line of this file holding `text` (a launch in a test)."""
    with open(__file__) as f:
        return next(k for k, src in enumerate(f, 1) if text in src and "line_of_call" not in src)


@cuda.jit
def check_then_store_max(x, out):
    i = cuda.grid(1)
    v = x[i]
    if out[0] < v:
        out[0] = v


@cuda.jit
def check_then_store_min(x, out):
    i = cuda.grid(1)
    v = x[i]
    if v < out[0]:
        out[0] = v


@cuda.jit
def atomic_max(x, out):
    i = cuda.grid(1)
    cuda.atomic.max(out, 0, x[i])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_check_then_store_race_in_one_block_advises_an_atomic(executor):
    """Audit M3: `if out[0] < v: out[0] = v` by a block's threads was told to add a barrier,
    which cannot make the check and the store one step."""
    x = np.random.default_rng(1).random(128).astype(np.float32)
    with sim.installed(executor=executor):
        for kernel, start, call in ((check_then_store_max, 0, "cuda.atomic.max(out, 0, v)"),
                                    (check_then_store_min, 2, "cuda.atomic.min(out, 0, v)")):
            with pytest.raises(sim.RaceError) as info:
                kernel[1, 128](dev(x), dev(np.full(1, start, np.float32)))
            msg = str(info.value)
            assert "check-then-store" in msg and call in msg and "syncthreads" not in msg, msg
        out = dev(np.zeros(1, np.float32))
        atomic_max[1, 128](dev(x), out)
        assert out.copy_to_host()[0] == x.max()


def test_barrier_divergence():
    errors = raised_by_both(barrier_in_branch, 1, 32, lambda: [cuda.device_array(32, np.int64)])
    assert_same_finding(errors, sim.BarrierDivergenceError, "cuda.syncthreads()")


@cuda.jit
def dynamic_views(out):
    f = cuda.shared.array(0, float32)
    d = cuda.shared.array(0, float64)
    n = cuda.shared.array(0, int32)
    i = cuda.threadIdx.x
    f[2 * i] = 0.0
    f[2 * i + 1] = 1.875  # with the word before: the double 1.0
    cuda.syncthreads()
    out[cuda.grid(1)] = d[i] + n[(2 * i + 1) % 64]


def test_dynamic_shared_views_agree():
    """Views of one dynamic shared memory: same values and counters (8-byte items take two
    wavefronts) from both executors."""
    results = run_both(dynamic_views, 2, 32, lambda: [cuda.device_array(64, np.float64)],
                       shared=256)
    assert_agree(results)
    expected = 1.0 + np.float32(1.875).view(np.int32)
    assert (results["simt"][0][0] == expected).all()


def same_message(errors):
    """Every executor's message, the same text (paths included)."""
    messages = {name: str(e) for name, e in errors.items()}
    assert len(set(messages.values())) == 1, messages


@cuda.jit
def barrier_then_exit_in_loop(out):
    t = cuda.threadIdx.x
    for k in range(t % 3 + 1):
        cuda.syncthreads()
    out[t] = t


@cuda.jit
def barrier_skipped_to_the_next(out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    out[t] = t
    cuda.syncthreads()  # the others wait here: two different barriers


@cuda.jit
def barrier_skipped_by_return(out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    else:
        return
    out[t] = t


def test_barrier_skipped_exited_or_elsewhere_same_verdict():
    """Threads that exit without a barrier the others wait at (undefined, passes on current
    GPUs) and threads at another barrier: one verdict, one message, from both executors."""
    make = lambda: [cuda.device_array(32, np.int64)]  # noqa: E731
    for kernel, line_text, phrase in (
            (barrier_in_branch, "cuda.syncthreads()", "finished the kernel without reaching"),
            (barrier_then_exit_in_loop, "cuda.syncthreads()", "finished the kernel"),
            (barrier_skipped_to_the_next, "the others wait here", "different syncthreads()")):
        errors = raised_by_both(kernel, 1, 32, make)
        assert_same_finding(errors, sim.BarrierDivergenceError, line_text)
        same_message(errors)
        assert phrase in str(errors["simt"])
    for executor in EXECUTORS:  # an explicit return is no finding, as before
        with sim.installed(executor=executor):
            out = cuda.device_array(32, np.int64)
            barrier_skipped_by_return[1, 32](out)
            assert (out.copy_to_host()[:16] == np.arange(16)).all()


@cuda.jit
def reads_previous(a, out):
    i = cuda.threadIdx.x
    out[i] = a[i - 1] + a[i]


def test_negative_index_same_message():
    errors = raised_by_both(reads_previous, 1, 32, lambda: [
        dev(np.ones(32, np.float32)), cuda.device_array(32, np.float32)])
    assert_same_finding(errors, sim.OutOfBoundsError, "a[i - 1] + a[i]")
    same_message(errors)
    assert "element 31 instead" in str(errors["simt"])


def test_shuffle_reading_an_exited_lane():
    errors = raised_by_both(shuffle_from_exited_lane, 1, 32, lambda: [
        cuda.device_array(32, np.int64)])
    assert_same_finding(errors, sim.WarpOpError, "shfl_down_sync(0xFFFF, t, 8)")


@cuda.jit
def shuffle_in_a_guard(x, out):
    i = cuda.grid(1)
    if i < x.size:  # lanes past the end skip the full-mask shuffle
        v = x[i]
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 16)
        if cuda.laneid == 0:
            out[i // 32] = v


@cuda.jit
def shuffle_with_the_value_guarded(x, out):
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0.0)  # every lane reaches the shuffle
    v += cuda.shfl_down_sync(0xFFFFFFFF, v, 16)
    if cuda.laneid == 0:
        out[i // 32] = v


def test_a_shuffle_reading_a_lane_that_does_not_take_part_says_what_to_do():
    """Audit M5: the finding said the value is undefined, not how to fix it."""
    errors = raised_by_both(shuffle_in_a_guard, 1, 64, lambda: [
        dev(np.ones(40, np.float32)), cuda.device_array(2, np.float32)])
    assert_same_finding(errors, sim.WarpOpError, "shfl_down_sync(0xFFFFFFFF, v, 16)")
    errors.update(raised_by_both(shuffle_from_exited_lane, 1, 32, lambda: [cuda.device_array(32, np.int64)]))
    for err in errors.values():
        msg = str(err)
        assert "outside the `if` and guard the value, not the call" in msg, msg
        assert "full mask 0xFFFFFFFF only when all 32 lanes" in msg, msg
    results = run_both(shuffle_with_the_value_guarded, 1, 64, lambda: [
        dev(np.ones(40, np.float32)), cuda.device_array(2, np.float32)])
    assert_agree(results)
    np.testing.assert_array_equal(results["simt"][0][1], [2, 1])
    assert not results["simt"][1].warnings and not results["thread"][1].warnings


@cuda.jit
def shuffle_mask_without_caller(out):
    t = cuda.threadIdx.x
    out[t] = cuda.shfl_sync(0x0000FFFF, t, 0)


def test_shuffle_with_a_mask_that_excludes_the_caller():
    errors = raised_by_both(shuffle_mask_without_caller, 1, 32, lambda: [
        cuda.device_array(32, np.int64)])
    assert_same_finding(errors, sim.WarpOpError, "shfl_sync(0x0000FFFF, t, 0)")


# ---------------------------------------------------------------- kernels numba refuses
@cuda.jit
def count_with_bool(out):
    t = cuda.threadIdx.x
    out[t] = cuda.syncthreads_count(t % 3 == 0)


@cuda.jit
def inc_on_int64(counter):
    cuda.atomic.inc(counter, 0, 10)


@pytest.mark.parametrize("kernel, make_args, line_text", [
    (count_with_bool, lambda: [dev(np.zeros(32, np.int32))], "syncthreads_count(t % 3 == 0)"),
    (inc_on_int64, lambda: [dev(np.zeros(1, np.int64))], "atomic.inc(counter, 0, 10)"),
], ids=["syncthreads_count_of_a_bool", "atomic_inc_on_int64"])
def test_kernels_numba_refuses_are_refused_by_both_with_one_message(kernel, make_args, line_text):
    """Regression: SIMT refused these (numba's typing does) and the launcher then ran them on
    the per-thread executor; now every executor refuses them with the compile check's message."""
    messages = []
    for executor in ("auto", "simt", "thread"):
        with sim.installed(executor=executor):
            out = make_args()
            with pytest.raises(CompileError) as info:
                kernel[1, 32](*out)
            assert not out[0].copy_to_host().any()  # nothing ran
        messages.append(str(info.value))
        err = info.value
        with open(err.filename) as f:
            assert line_text in f.read().splitlines()[err.line - 1]
    assert messages[0] == messages[1] == messages[2]
    assert "would not compile for a GPU" in messages[0] and "No implementation" in messages[0]


def test_refusal_matches_the_compile_check_report():
    from grader.sim.compile_check import compile_check, toolchain_status

    if not toolchain_status().compile_ptx:
        pytest.skip("numba-cuda's compile_ptx is not available")
    report = compile_check(count_with_bool, (np.zeros(32, np.int32),), use_cache=False)
    with sim.installed(executor="thread"):
        with pytest.raises(CompileError) as info:
            count_with_bool[1, 32](cuda.device_array(32, np.int32))
    assert str(info.value).endswith(report.message)


def test_int64_local_is_not_narrowed():
    @cuda.jit
    def big(out):
        x = int64(1) << 40
        out[0] = x + cuda.threadIdx.x

    res = assert_agree(run_both(big, 1, 1, lambda: [cuda.device_array(1, np.int64)]))
    assert res[0][0] == 1 << 40



@cuda.jit(device=True)
def scaled(x, factor=2.0, offset=0):
    return x * factor + offset



@cuda.jit
def calls_with_keywords_and_defaults(a, out):
    i = cuda.grid(1)
    if i < a.size:
        y = scaled(a[i], offset=1)
        out[i, 0] = y
        out[i, 1] = scaled(a[i])


def test_device_function_keywords_and_defaults_under_the_per_thread_executor():
    """Typed per signature as numba folds the arguments (the SIMT executor leaves keyword
    arguments and defaults of device functions to the per-thread one)."""
    a = np.arange(8, dtype=np.float32)
    with sim.installed(executor="thread"), sim.trace() as records:
        out = cuda.device_array((8, 2), np.float64)
        calls_with_keywords_and_defaults[1, 8](dev(a), out)
    assert records[0].typing_note is None
    np.testing.assert_array_equal(out.copy_to_host()[:, 0], a.astype(np.float64) * 2 + 1)
    np.testing.assert_array_equal(out.copy_to_host()[:, 1], a.astype(np.float64) * 2)


@cuda.jit
def grid_stride_copy(src, dst):
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[i] = src[i]


@cuda.jit
def grid_dim_copy(src, dst):
    stride = cuda.blockDim.x * cuda.gridDim.x  # (spelled out: the same loop)
    for i in range(cuda.grid(1), src.size, stride):
        dst[i] = src[i]


def test_a_kernel_that_reads_its_grid_size_is_marked_so_the_model_keeps_its_grid():
    """`reads_grid_size`: the grid-stride loop's mark (grader/sim/grid_aware.py); a kernel sized to
    its data (one element per thread) has none, on every executor."""
    a = np.arange(1000, dtype=np.float32)
    for kernel, mark in ((grid_stride_copy, 1), (grid_dim_copy, 1), (atomic_own_bin, 0)):
        make = (lambda: [dev(a), dev(np.zeros_like(a))]) if mark else (lambda: [dev(np.zeros(128, np.int64))])
        results = run_both(kernel, 2, 64, make)
        assert {name: record.counters["reads_grid_size"] for name, (_, record) in results.items()} == \
            dict.fromkeys(results, mark), kernel
