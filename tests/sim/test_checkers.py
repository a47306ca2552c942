"""A zoo of buggy kernels: each checker fires with a message naming kernel, line, block, thread,
array and index; the fixed twin of each passes cleanly. Correct classics never trigger a
checker."""

import numpy as np
import pytest
from numba import cuda, float32, int32

import grader.sim as sim
from sim_kernels import barrier_in_branch, tiled_matmul

TPB = 16


def line_of(kernel, text):
    """Absolute line number of the first source line of `kernel` (or a host function) containing `text`."""
    import inspect

    lines, first = inspect.getsourcelines(getattr(kernel, "py_func", kernel))
    for k, src in enumerate(lines):
        if text in src:
            return first + k
    raise AssertionError(text)


# ---------------------------------------------------------------- races on shared memory
@cuda.jit
def reduce_missing_barrier(inp, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    stride = 32
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


@cuda.jit
def reduce_fixed(inp, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    stride = 32
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


def test_shared_race_in_tree_reduction(simulator):
    inp = cuda.to_device(np.ones(128, np.float32))
    out = cuda.device_array(2, np.float32)
    with pytest.raises(sim.RaceError) as err:
        reduce_missing_barrier[2, 64](inp, out)
    msg = str(err.value)
    assert f":{line_of(reduce_missing_barrier, 's[t] += s[t + stride]')}," in msg
    assert "shared array 's'" in msg and "block (0, 0, 0)" in msg
    assert "no syncthreads() (or cuda.syncwarp(), where one warp's threads alone take part) in between" in msg
    reduce_fixed[2, 64](inp, out)
    assert (out.copy_to_host() == 64).all()


UNCALLED_BARRIER = """
from numba import cuda, float32


@cuda.jit
def tree(inp, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads
    stride = 32
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]
"""


def test_a_barrier_named_without_calling_it_is_pointed_at(simulator, tmp_path):
    # `cuda.syncthreads` with no parentheses is no barrier: the race found is real, and the note
    # sends the student to the line they believe synchronises
    import importlib.util

    path = tmp_path / "uncalled.py"
    path.write_text(UNCALLED_BARRIER)
    spec = importlib.util.spec_from_file_location("uncalled_barrier_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(sim.UninitialisedReadError) as err:
        module.tree[2, 64](cuda.to_device(np.ones(128, np.float32)), cuda.device_array(2, np.float32))
    assert ("uncalled.py:14, block (0, 0, 0), thread (0, 0, 0): read of uninitialised shared array 's' at index 32 "
            "(never written since allocation) (note: uncalled.py:10 and uncalled.py:15 name cuda.syncthreads without calling it, no "
            "parentheses, so no barrier is there: write cuda.syncthreads())") in str(err.value)


@cuda.jit
def reduce_last_warp_unsynchronised(inp, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    if t < 32:  # the classic unrolled last warp, written before Volta: no syncwarp between steps
        s[t] += s[t + 32]
        s[t] += s[t + 16]
        s[t] += s[t + 8]
        s[t] += s[t + 4]
        s[t] += s[t + 2]
        s[t] += s[t + 1]
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_race_between_threads_of_one_warp_asks_for_syncwarp(executor):
    """A syncthreads() inside `if t < 32:` is a barrier the other warps never reach: the race
    of two threads of one warp names cuda.syncwarp()."""
    with sim.installed(executor=executor):
        with pytest.raises(sim.RaceError) as found:
            reduce_last_warp_unsynchronised[1, 64](cuda.to_device(np.ones(64, np.float32)),
                                                   cuda.device_array(1, np.float32))
    message = str(found.value)
    if executor == "simt":  # the conflict is with one other thread, of the same warp
        assert "with no cuda.syncwarp() between lines" in message and "not in lockstep since Volta" in message, message
    else:  # one thread at a time: a store meets several earlier readers, whose warps are not kept
        assert "(or cuda.syncwarp(), where one warp's threads alone take part)" in message, message


@cuda.jit
def tiled_matmul_no_barrier_after_loads(A, B, C):
    sA = cuda.shared.array((TPB, TPB), float32)
    sB = cuda.shared.array((TPB, TPB), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for k in range(A.shape[1] // TPB):
        sA[ty, tx] = A[y, k * TPB + tx]
        sB[ty, tx] = B[k * TPB + ty, x]
        for j in range(TPB):  # (the syncthreads() after the loads is missing)
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    C[y, x] = acc


def test_a_tile_shared_by_several_warps_asks_for_syncthreads():
    """The first conflict (on sA: each row is stored and read by one warp) is within a warp,
    but sB's columns cross warps: a syncwarp() would only move the race, so the advice is
    syncthreads() (the audit's mutation M1, which said cuda.syncwarp()). Lockstep only: the
    per-thread executor runs thread 0 ahead and finds an uninitialised read instead."""
    with sim.installed(executor="simt"):
        A = cuda.to_device(np.ones((TPB, TPB), np.float32))
        with pytest.raises(sim.RaceError) as found:
            tiled_matmul_no_barrier_after_loads[(1, 1), (TPB, TPB)](
                A, A, cuda.device_array((TPB, TPB), np.float32))
    message = str(found.value)
    assert "with no syncthreads() between lines" in message, message
    assert "syncwarp" not in message, message


# ---------------------------------------------------------------- races on global memory
@cuda.jit
def sum_plain(inp, out):
    i = cuda.grid(1)
    if i < inp.size:
        out[0] += inp[i]


@cuda.jit
def sum_atomic(inp, out):
    i = cuda.grid(1)
    if i < inp.size:
        cuda.atomic.add(out, 0, inp[i])


def test_global_race_on_accumulator(simulator):
    inp = cuda.to_device(np.ones(100, np.float32))
    out = cuda.to_device(np.zeros(1, np.float32))
    with pytest.raises(sim.RaceError, match=r"global array 'out' at index 0"):
        sum_plain[2, 64](inp, out)
    out = cuda.to_device(np.zeros(1, np.float32))
    sum_atomic[2, 64](inp, out)
    assert out.copy_to_host()[0] == 100


@cuda.jit
def block_writes_same_slot(out):
    if cuda.threadIdx.x == 0:
        out[0] = cuda.blockIdx.x


@cuda.jit
def block_writes_own_slot(out):
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = cuda.blockIdx.x


def test_cross_block_race(simulator):
    out = cuda.device_array(4, np.int64)
    with pytest.raises(sim.RaceError, match="from another block"):
        block_writes_same_slot[4, 32](out)
    block_writes_own_slot[4, 32](out)
    assert list(out.copy_to_host()) == [0, 1, 2, 3]


@cuda.jit
def read_by_two_warps_then_written(x, out, barrier):
    t = cuda.threadIdx.x
    v = float32(0.0)
    if t == 0:
        v = x[0]
    if t == 32:  # a second reader of x[0]: another warp of the same block, same barrier interval
        v = x[0]
    if barrier:
        cuda.syncthreads()
    if t == 32:
        x[0] = v + float32(1.0)
    out[cuda.grid(1)] = v


@cuda.jit
def read_by_one_warp_in_turn_then_written(x):
    t = cuda.threadIdx.x
    v = float32(0.0)
    if t == 0:
        v = x[0]
    cuda.syncwarp()
    if t == 1:  # ordered after thread 0's read: it becomes the one reader
        v = x[0]
        x[0] = v + float32(1.0)


@cuda.jit
def grid_stride_sum_by_block(x, out):
    """Each thread reads the elements of its block's turn: x[i] passes from block to block."""
    acc = float32(0.0)
    for i in range(cuda.grid(1), x.size, cuda.blockDim.x):
        acc += x[i]
    cuda.atomic.add(out, 0, acc)


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_write_after_reads_by_two_warps_races_with_the_first_reader(executor):
    """Thread 32 reads x[0] after thread 0 of another warp did: the record keeps both ("several
    readers of the block"), so thread 32's own write still meets thread 0's read; a barrier
    before the write orders them, and so does a syncwarp between two readers of one warp.
    Elements that every block reads in turn leave no finding."""
    with sim.installed(executor=executor):
        out = cuda.device_array(64, np.float32)
        with pytest.raises(sim.RaceError, match="global array 'x' at index 0"):
            read_by_two_warps_then_written[1, 64](cuda.to_device(np.ones(4, np.float32)), out, False)
        read_by_two_warps_then_written[1, 64](cuda.to_device(np.ones(4, np.float32)), out, True)
        read_by_one_warp_in_turn_then_written[1, 64](cuda.to_device(np.ones(4, np.float32)))
        total = cuda.to_device(np.zeros(1, np.float32))
        grid_stride_sum_by_block[4, 32](cuda.to_device(np.ones(256, np.float32)), total)
        # block b adds x[32 b:]: 256 - 32 b ones each
        assert total.copy_to_host()[0] == sum(256 - 32 * b for b in range(4))


@cuda.jit
def add_right_neighbour_in_place(x, out, separate_output):
    # correct within a block (the barrier orders each read before its neighbour's write); across
    # blocks, the last thread of block b reads x[i + 1], which block b + 1 reads and then writes
    i = cuda.grid(1)
    v = x[i + 1] if i + 1 < x.size else float32(0)
    cuda.syncthreads()
    if separate_output:
        out[i] = x[i] + v
    else:
        x[i] = x[i] + v


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_write_races_with_a_read_of_another_block_though_its_own_block_read_it_since(executor):
    """Block 1 reads x[32] and writes it after block 0's last thread read it: the record keeps the
    reader of another block when a reader of a new block takes its place, so the write still meets
    it (a GPU may run block 1 first). The same kernel writing a separate output leaves no finding."""
    load = line_of(add_right_neighbour_in_place, "v = x[i + 1]")
    with sim.installed(executor=executor):
        x = cuda.to_device(np.arange(64, dtype=np.float32))
        out = cuda.device_array(64, np.float32)
        with pytest.raises(sim.RaceError, match=rf"global array 'x' at index 32: store conflicts with a load "
                                                rf"at line {load} by thread \(31, 0, 0\) of block \(0, 0, 0\) "
                                                rf"from another block"):
            add_right_neighbour_in_place[2, 32](x, out, False)
        add_right_neighbour_in_place[2, 32](cuda.to_device(np.arange(64, dtype=np.float32)), out, True)
        assert (out.copy_to_host()[:63] == 2 * np.arange(63) + 1).all()


# ---------------------------------------------------------------- uninitialised reads
@cuda.jit
def stencil_missing_halo(inp, out):
    s = cuda.shared.array(33, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = inp[i]
    cuda.syncthreads()
    out[i] = s[t] + s[t + 1]


@cuda.jit
def stencil_with_halo(inp, out):
    s = cuda.shared.array(33, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = inp[i]
    if t == 0:
        s[32] = inp[i + 32] if i + 32 < inp.size else 0.0
    cuda.syncthreads()
    out[i] = s[t] + s[t + 1]


def test_uninitialised_shared_read(simulator):
    inp = cuda.to_device(np.arange(64, dtype=np.float32))
    out = cuda.device_array(64, np.float32)
    with pytest.raises(sim.UninitialisedReadError) as err:
        stencil_missing_halo[2, 32](inp, out)
    msg = str(err.value)
    assert "shared array 's' at index 32" in msg and "thread (31, 0, 0)" in msg
    stencil_with_halo[2, 32](inp, out)
    expect = np.arange(64) + np.r_[np.arange(1, 64), 0]
    np.testing.assert_array_equal(out.copy_to_host(), expect)


@cuda.jit
def accumulate_into(out, inp):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += inp[i]


def test_uninitialised_device_array_read(simulator):
    inp = cuda.to_device(np.ones(8, np.float32))
    out = cuda.device_array(8, np.float32)
    with pytest.raises(sim.UninitialisedReadError, match="device array 'out' at index 0"):
        accumulate_into[1, 8](out, inp)
    out = cuda.to_device(np.zeros(8, np.float32))
    accumulate_into[1, 8](out, inp)
    assert (out.copy_to_host() == 1).all()


def _add_chunk(dst, src):
    accumulate_into[(dst.size + 31) // 32, 32](dst, src)


def _add_the_wrong_chunk(dst, scratch, sent):
    """An all-reduce's step as a student wrote it: 250 elements were sent into scratch, the
    chunk added is 251 long (the host's chunk arithmetic is off, not the kernel)."""
    _add_chunk(dst[:sent + 1], scratch[:sent + 1])


def test_an_uninitialised_read_says_where_the_host_launched_it_and_what_was_written(simulator):
    """The audit's all-reduce student was told the kernel's line only (`dst[i] += src[i]`), for a
    chunk the host chose one element too long: the finding says the launch's host frames (the
    helper's and its caller's) and which elements of the view had been written."""
    scratch = cuda.device_array(251, np.float32)
    scratch[:250].copy_to_device(np.ones(250, np.float32))
    dst = cuda.to_device(np.zeros(251, np.float32))
    with pytest.raises(sim.UninitialisedReadError) as err:
        _add_the_wrong_chunk(dst, scratch, 250)
    first, _, detail = str(err.value).partition("\n")
    launch, call = line_of(_add_chunk, "accumulate_into["), line_of(_add_the_wrong_chunk, "_add_chunk(")
    assert first.startswith(f"kernel 'accumulate_into' at {__file__}:{line_of(accumulate_into, 'out[i] +=')}"), first
    assert (f"device array 'inp' at index 250 (never written since allocation), launched at {__file__}:{launch} in "
            f"_add_chunk, called at {__file__}:{call} in _add_the_wrong_chunk, called at") in first, first
    assert detail == "'inp' (251 elements): 250 had been written ([0, 250)), the rest never", detail


# ---------------------------------------------------------------- barrier divergence
@cuda.jit
def barriers_on_two_lines(out):
    t = cuda.threadIdx.x
    if t % 2 == 0:
        cuda.syncthreads()
    else:
        cuda.syncthreads()
    out[t] = t


@cuda.jit
def early_exit_then_barrier(inp, out):
    s = cuda.shared.array(64, float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    if i >= inp.size:
        return
    s[t] = inp[i]
    cuda.syncthreads()
    out[i] = s[t] * 2


def test_barrier_divergence(simulator):
    out = cuda.device_array(64, np.int64)
    with pytest.raises(sim.BarrierDivergenceError) as err:
        barrier_in_branch[1, 64](out)
    assert f":{line_of(barrier_in_branch, 'cuda.syncthreads()')}," in str(err.value)
    with pytest.raises(sim.BarrierDivergenceError, match="different syncthreads"):
        barriers_on_two_lines[1, 64](out)


def test_early_return_before_barrier_is_fine(simulator):
    inp = cuda.to_device(np.ones(40, np.float32))
    out = cuda.device_array(40, np.float32)
    early_exit_then_barrier[1, 64](inp, out)
    assert (out.copy_to_host() == 2).all()


# ---------------------------------------------------------------- what a GPU would do
@cuda.jit
def barrier_in_guard(a, n):
    i = cuda.grid(1)
    if i < n:
        cuda.syncthreads()
        a[i] = 1


def test_one_thread_waiting_at_a_skipped_barrier_is_told_in_the_singular(simulator):
    """The learner's 1x1 tiled matmul read "that 1 other threads of its block wait at"."""
    with pytest.raises(sim.BarrierDivergenceError) as err:
        barrier_in_guard[1, 64](np.zeros(1, np.int32), 1)
    assert "syncthreads() at " in str(err.value) and "that 1 other thread of its block waits at" in str(err.value)


@cuda.jit
def barrier_skipped_then_another(out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    cuda.syncthreads()
    out[t] = t


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_barrier_skipped_by_exited_threads_is_undefined_not_a_deadlock(executor):
    """Threads that skip a barrier and exit: undefined in CUDA, passes on current GPUs (exited
    threads no longer count since Volta); threads at two barriers: a mismatch, said as such."""
    with sim.installed(executor=executor):
        with pytest.raises(sim.BarrierDivergenceError) as err:
            barrier_in_guard[1, 64](np.zeros(40, np.int32), 40)
        msg = str(err.value)
        assert err.value.line == line_of(barrier_in_guard, "cuda.syncthreads()")
        assert "thread (40, 0, 0)" in msg and "undefined behaviour in CUDA" in msg, msg
        assert "finished the kernel without reaching the syncthreads()" in msg
        assert "40 other threads" in msg and "current GPUs let the waiting threads pass" in msg
        assert "deadlock" not in msg and "only some threads" not in msg
        with pytest.raises(sim.BarrierDivergenceError) as err:
            barrier_skipped_then_another[1, 32](np.zeros(32, np.int64))
        msg = str(err.value)
        assert "wait at different syncthreads() calls" in msg and "deadlock" not in msg, msg
        assert err.value.line == line_of(barrier_skipped_then_another, "if t < 16") + 2


@cuda.jit
def previous_element(a, out):
    i = cuda.threadIdx.x
    out[i] = a[i - 1]


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_negative_index_says_numba_wraps_it(executor):
    a = np.arange(32, dtype=np.float32)
    with sim.installed(executor=executor):
        with pytest.raises(sim.OutOfBoundsError) as err:
            previous_element[1, 32](a, np.zeros(32, np.float32))
    msg = str(err.value)
    assert "thread (0, 0, 0)" in msg and "'a' of shape 32 at index -1" in msg, msg
    assert "numba wraps a negative index around" in msg and "element 31" in msg
    assert "CUDA C would access memory before the array" in msg and "if i > 0" in msg


# ---------------------------------------------------------------- warp-op misuse
@cuda.jit
def shuffle_mask_excludes_caller(out):
    v = cuda.shfl_sync(0x1, cuda.threadIdx.x, 0)
    out[cuda.threadIdx.x] = v


@cuda.jit
def half_warp_reads_outside(out):
    t = cuda.threadIdx.x
    if t < 16:
        out[t] = cuda.shfl_down_sync(0xFFFF, t, 8)


@cuda.jit
def half_warp_fixed(out):
    t = cuda.threadIdx.x
    if t < 16:
        v = cuda.shfl_down_sync(0xFFFF, t, 8)
        out[t] = v if t < 8 else t


def test_warp_op_misuse(simulator):
    out = cuda.device_array(32, np.int64)
    with pytest.raises(sim.WarpOpError, match="does not include the calling lane 1"):
        shuffle_mask_excludes_caller[1, 32](out)
    with pytest.raises(sim.WarpOpError, match="reads lane 16, which does not take part"):
        half_warp_reads_outside[1, 32](out)


@cuda.jit
def partial_warp_reduce(inp, out):
    i = cuda.grid(1)
    v = inp[i]
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


def test_partial_warp_shuffle_reads_missing_lane(simulator):
    inp = cuda.to_device(np.ones(48, np.float32))
    out = cuda.to_device(np.zeros(1, np.float32))
    with pytest.raises(sim.WarpOpError, match=r"block \(0, 0, 0\), thread \(32, 0, 0\)"):
        partial_warp_reduce[1, 48](inp, out)


# ---------------------------------------------------------------- deadlock, never a hang
@cuda.jit
def waits_for_later_block(flag, out):
    if cuda.blockIdx.x == 0:
        while cuda.atomic.add(flag, 0, 0) == 0:
            pass
    elif cuda.threadIdx.x == 0:
        cuda.atomic.exch(flag, 0, 1)


@cuda.jit
def spin_on_plain_load(flag):
    while flag[0] == 0:
        pass


@cuda.jit
def counts_forever(out):
    s = 1
    while s > 0:  # (s only grows: the condition never turns false)
        s = s + 1 if cuda.threadIdx.x < out.size else 0
    out[0] = s


@cuda.jit
def shuffle_waits_for_barrier(out):
    t = cuda.threadIdx.x
    if t == 0:
        cuda.syncthreads()
    else:
        out[t] = cuda.shfl_sync(0xFFFFFFFF, t, 0)


def test_deadlocks_are_reported(simulator, monkeypatch):
    from grader.sim.thread import executor as thread_executor

    monkeypatch.setattr(thread_executor, "IDLE_LOAD_YIELDS", 64)
    flag = cuda.to_device(np.zeros(1, np.int32))
    out = cuda.to_device(np.zeros(1, np.int32))
    with pytest.raises(sim.DeadlockError, match="no forward progress") as err:
        waits_for_later_block[2, 1](flag, out)
    # a GPU may run both blocks at once: the message says so rather than "never happens"
    assert "only while they fit on it together" in str(err.value)
    assert "never happens" not in str(err.value)
    with pytest.raises(sim.DeadlockError, match=f":{line_of(spin_on_plain_load, 'flag[0]')},"):
        spin_on_plain_load[1, 1](flag)
    with pytest.raises(sim.WarpOpError, match="waits at syncthreads"):
        shuffle_waits_for_barrier[1, 32](cuda.device_array(32, np.int64))
    # a loop that never ends, waiting on nothing: the message names that case too, at the loop's line
    with pytest.raises(sim.DeadlockError, match=f":{line_of(counts_forever, 'while s > 0')},") as err:
        counts_forever[1, 32](cuda.device_array(32, np.int64))
    assert "or in a loop whose condition never turns false" in str(err.value)


@cuda.jit
def spin_lock_counter(lock, counter):
    if cuda.threadIdx.x % 32 == 0:
        while cuda.atomic.cas(lock, 0, 0, 1) != 0:
            pass
        cuda.threadfence()
        counter[0] += 1
        cuda.threadfence()
        cuda.atomic.exch(lock, 0, 0)


def test_spin_lock_makes_progress(simulator):
    lock = cuda.to_device(np.zeros(1, np.int32))
    counter = cuda.to_device(np.zeros(1, np.int32))
    with pytest.raises(sim.RaceError):  # a lock is invisible to the race checker: say so
        spin_lock_counter[2, 64](lock, counter)
    with sim.installed(executor="thread", checks=sim.Checks(warn={"races"})):
        lock = cuda.to_device(np.zeros(1, np.int32))
        counter = cuda.to_device(np.zeros(1, np.int32))
        with pytest.warns(sim.SimWarning):
            spin_lock_counter[2, 64](lock, counter)
        assert counter.copy_to_host()[0] == 4


@cuda.jit
def loops_forever(out):
    i = 0
    while True:
        i += 1
    out[0] = i


def test_loop_that_never_ends_is_reported_not_a_hang(thread_sim, monkeypatch):
    from grader.sim.thread import executor as thread_executor

    monkeypatch.setattr(thread_executor, "IDLE_LOAD_YIELDS", 64)
    with pytest.raises(sim.DeadlockError, match=f":{line_of(loops_forever, 'while True')},"):
        loops_forever[1, 1](cuda.device_array(1, np.int64))


def test_spin_loops_with_compiled_accesses(monkeypatch):
    """Compiled accesses do not count loads: a `while` loop yields every few iterations."""
    from grader.sim.thread import executor as thread_executor

    monkeypatch.setattr(thread_executor, "IDLE_LOAD_YIELDS", 64)
    with sim.installed(executor="thread", checks=sim.Checks(off={"races", "uninitialised"})):
        flag = cuda.to_device(np.zeros(1, np.int32))
        with pytest.raises(sim.DeadlockError,
                           match=f":{line_of(spin_on_plain_load, 'flag[0]')},"):
            spin_on_plain_load[1, 1](flag)
        lock = cuda.to_device(np.zeros(1, np.int32))
        counter = cuda.to_device(np.zeros(1, np.int32))
        spin_lock_counter[2, 64](lock, counter)
        assert counter.copy_to_host()[0] == 4


# ---------------------------------------------------------------- downgrade to warnings
def test_checks_downgrade_to_warnings():
    with sim.installed(executor="thread", checks=sim.Checks(warn={"races"})):
        inp = cuda.to_device(np.ones(64, np.float32))
        out = cuda.to_device(np.zeros(1, np.float32))
        with sim.trace() as launches, pytest.warns(sim.SimWarning, match="data race"):
            sum_plain[1, 64](inp, out)
        assert launches[0].warnings and "data race" in launches[0].warnings[0]


def test_checks_reject_unknown_names():
    with pytest.raises(ValueError, match="unknown checker"):
        sim.Checks(warn={"racez"})


# ---------------------------------------------------------------- no false positives
@cuda.jit
def shuffle_block_sum(inp, out):
    warp_sums = cuda.shared.array(32, float32)
    i = cuda.grid(1)
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    v = inp[i] if i < inp.size else float32(0)
    for off in (16, 8, 4, 2, 1):
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
    if lane == 0:
        warp_sums[warp] = v
    cuda.syncthreads()
    if warp == 0:
        v = warp_sums[lane] if lane < cuda.blockDim.x // 32 else float32(0)
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        if lane == 0:
            cuda.atomic.add(out, 0, v)


@cuda.jit
def histogram(data, bins):
    local = cuda.shared.array(8, int32)
    t = cuda.threadIdx.x
    if t < 8:
        local[t] = 0
    cuda.syncthreads()
    for i in range(cuda.grid(1), data.size, cuda.gridsize(1)):
        cuda.atomic.add(local, data[i] % 8, 1)
    cuda.syncthreads()
    if t < 8:
        cuda.atomic.add(bins, t, local[t])


@cuda.jit
def last_block_sums(inp, partial, count, out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    if t == 0:
        acc = float32(0)
        for k in range(32):
            acc += s[k]
        partial[cuda.blockIdx.x] = acc
        cuda.threadfence()
        if cuda.atomic.inc(count, 0, cuda.gridDim.x) == cuda.gridDim.x - 1:
            total = float32(0)
            for b in range(cuda.gridDim.x):
                total += partial[b]
            out[0] = total


@pytest.mark.parametrize("seed", [None, 7])
def test_correct_classics_trigger_no_checker(seed):
    with sim.installed(executor="thread", seed=seed):
        A = np.random.default_rng(0).random((20, 24), np.float32)
        B = np.random.default_rng(1).random((24, 18), np.float32)
        C = cuda.device_array((20, 18), np.float32)
        tiled_matmul[(2, 2), (TPB, TPB)](cuda.to_device(A), cuda.to_device(B), C)
        np.testing.assert_allclose(C.copy_to_host(), A @ B, rtol=1e-5)

        inp = cuda.to_device(np.arange(200, dtype=np.float32))
        out = cuda.to_device(np.zeros(1, np.float32))
        shuffle_block_sum[2, 128](inp, out)
        assert out.copy_to_host()[0] == np.arange(200).sum()

        data = cuda.to_device(np.arange(300, dtype=np.int32))
        bins = cuda.to_device(np.zeros(8, np.int32))
        histogram[2, 64](data, bins)
        np.testing.assert_array_equal(bins.copy_to_host(), np.bincount(np.arange(300) % 8))

        inp = cuda.to_device(np.ones(96, np.float32))
        partial = cuda.device_array(3, np.float32)
        count = cuda.to_device(np.zeros(1, np.uint32))
        total = cuda.device_array(1, np.float32)
        last_block_sums[3, 32](inp, partial, count, total)
        assert total.copy_to_host()[0] == 96

        inp = cuda.to_device(np.ones(128, np.float32))
        red = cuda.device_array(2, np.float32)
        reduce_fixed[2, 64](inp, red)
        assert (red.copy_to_host() == 64).all()


def test_barrier_and_warp_checks_can_be_turned_off():
    with sim.installed(executor="thread", checks=sim.Checks(off={"barriers", "warps"})):
        out = cuda.device_array(64, np.int64)
        barrier_in_branch[1, 64](out)
        assert (out.copy_to_host() == np.arange(64)).all()
        out = cuda.device_array(32, np.int64)
        half_warp_reads_outside[1, 32](out)


@cuda.jit
def reverse_in_place(a):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = a[t]
    cuda.syncthreads()
    v = s[63 - t]
    s[t] = v  # BUG: another thread may not have read s[t] yet
    a[t] = v


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_race_names_the_line_of_both_accesses_and_where_the_barrier_goes(executor):
    read, write = line_of(reverse_in_place, "v = s[63 - t]"), line_of(reverse_in_place, "s[t] = v")
    with sim.installed(executor=executor):
        with pytest.raises(sim.RaceError) as found:
            reverse_in_place[1, 64](np.arange(64, dtype=np.float32))
    message = str(found.value)
    other = read if found.value.line == write else write  # which access comes first is the executor's
    assert found.value.line in (read, write) and f"at line {other} by thread" in message, message
    assert f"with no syncthreads() between lines {read} and {write}" in message, message


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_race_within_one_line_says_that_line_does_both(executor):
    line = line_of(reduce_missing_barrier, "s[t] += s[t + stride]")
    with sim.installed(executor=executor):
        with pytest.raises(sim.RaceError) as found:
            reduce_missing_barrier[1, 64](np.ones(64, np.float32), np.zeros(1, np.float32))
    assert f"(line {line} does both: one pass's" in str(found.value), str(found.value)


# ---------------------------------------------------------------- warp-synchronous code with syncwarp
@cuda.jit
def per_warp_sums_with_syncwarp(inp, out):
    """Each warp sums its 32 values in shared memory, as NVIDIA's Volta guide writes it: read the
    neighbour's element, syncwarp, store one's own, syncwarp (two readers of an element per step)."""
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    lane, base = t % 32, t - t % 32
    s[t] = inp[cuda.grid(1)]
    cuda.syncwarp()
    offset = 16
    while offset > 0:
        v = s[t] + s[base + (lane + offset) % 32]
        cuda.syncwarp()
        s[t] = v
        cuda.syncwarp()
        offset //= 2
    if lane == 0:
        out[cuda.blockIdx.x * 2 + t // 32] = s[t]


@cuda.jit
def neighbour_sums_across_warps_with_syncwarp(inp, out):
    """The same steps, but thread 31 reads thread 32's element: another warp's, which a
    syncwarp does not order."""
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    v = s[t] + s[(t + 1) % 64]
    cuda.syncwarp()
    s[t] = v
    cuda.syncthreads()
    out[cuda.grid(1)] = s[t]


@cuda.jit
def warp_leader_updates_a_value_its_warp_read(inp, out, across_warps):
    """Every lane reads its warp's first value (one load instruction, 32 lanes on one element),
    syncwarp, then lane 0 replaces it; with `across_warps` every warp reads element 0, which
    warp 0's lane 0 replaces: the other warps' reads are not ordered before it."""
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    first = 0 if across_warps else t - t % 32
    v = s[first]
    cuda.syncwarp()
    if t % 32 == 0:
        s[t] = v * 2
    cuda.syncthreads()
    out[cuda.grid(1)] = s[t] + v


def test_warp_synchronous_steps_with_syncwarp_do_not_race(executor):
    """The audit's false positive: a correct per-warp reduction with syncwarp between the reads
    and the store was a race (several readers of an element were kept as 'of the block', which
    only a syncthreads() ordered), and a reduction stage written so lost 7 of 8 points."""
    values = np.arange(8 * 64, dtype=np.float32)
    with sim.installed(executor=executor):
        out = cuda.device_array(16, np.float32)
        per_warp_sums_with_syncwarp[8, 64](cuda.to_device(values), out)
        np.testing.assert_allclose(out.copy_to_host(), values.reshape(16, 32).sum(axis=1))
        leader = cuda.device_array(8 * 64, np.float32)
        warp_leader_updates_a_value_its_warp_read[8, 64](cuda.to_device(values), leader, False)


def test_syncwarp_does_not_order_a_read_of_another_warps_element(executor):
    with sim.installed(executor=executor):
        with pytest.raises(sim.RaceError) as found:
            neighbour_sums_across_warps_with_syncwarp[2, 64](cuda.to_device(np.ones(128, np.float32)),
                                                             cuda.device_array(128, np.float32))
        assert f":{line_of(neighbour_sums_across_warps_with_syncwarp, 's[t] = v')}," in str(found.value)
        with pytest.raises(sim.RaceError) as found:
            warp_leader_updates_a_value_its_warp_read[2, 64](cuda.to_device(np.ones(128, np.float32)),
                                                             cuda.device_array(128, np.float32), True)
        assert f":{line_of(warp_leader_updates_a_value_its_warp_read, 's[t] = v * 2')}," in str(found.value)


@cuda.jit
def tree_of_256_missing_barrier(inp, out):
    s = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    s[t] = inp[cuda.grid(1)]
    cuda.syncthreads()
    stride = 128
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


def test_a_block_wide_loop_missing_its_barrier_is_not_told_to_syncwarp():
    """The beginner audit's tree reduction with n = 31: past the data the other warps add zeros
    (silent stores), so the race found is between threads of warp 0; but the line runs on 4 warps
    of the block, so the advice is syncthreads(), not 'warp-synchronous code needs syncwarp'."""
    values = np.zeros(256, np.float32)
    values[:31] = 1.0
    with sim.installed():
        with pytest.raises(sim.RaceError) as found:
            tree_of_256_missing_barrier[1, 256](cuda.to_device(values), cuda.device_array(1, np.float32))
    message = str(found.value)
    assert "with no syncthreads() (or cuda.syncwarp(), where one warp's threads alone take part)" in message, message
    assert "not in lockstep since Volta" not in message, message


# ---------------------------------------------------------------- a silent store against atomics
@cuda.jit
def sum_resetting_its_accumulator(x, out):
    i = cuda.grid(1)
    if i == 0:
        out[0] = 0.0  # <- the reset: the host zeroed out already, so here it changes nothing
    cuda.syncthreads()  # (orders block 0 only)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])


def test_an_accumulator_reset_in_the_kernel_that_adds_into_it_races_with_other_blocks_atomics(executor):
    """The audit's false negative (a reduction stage written so scored 27/27): the reset stores
    the value memory holds, a silent store, which the race rule leaves out; but on a GPU a block
    may add before block 0 resets, and lose its sum. Atomics meet silent stores nothing orders."""
    with sim.installed(executor=executor):
        out = cuda.to_device(np.zeros(1, np.float32))
        with pytest.raises(sim.RaceError) as found:
            sum_resetting_its_accumulator[4, 64](cuda.to_device(np.ones(256, np.float32)), out)
    message = str(found.value)
    assert f"atomic conflicts with a store at line {line_of(sum_resetting_its_accumulator, 'out[0] = 0.0')}" \
        in message, message
    assert "Set it before the launch (on the host, or in a kernel of its own)" in message


# ---------------------------------------------------------------- a tile some threads never load
@cuda.jit
def tile_loaded_inside_the_bounds_check(a, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < a.size:  # the loads, barrier and reads inside the check: the threads past the edge load nothing
        s[t] = a[i]
        cuda.syncthreads()
        out[i] = s[(t + 1) % 64]


def test_an_uninitialised_shared_read_says_threads_of_the_warp_skipped_the_code():
    """The beginner audit's matmul with its whole tile loop inside `if row < M and col < N`: the
    read of an element a skipping thread would have loaded said only 'never written since
    allocation', and the student would add zero-fill code instead of moving the `if`."""
    with sim.installed():
        with pytest.raises(sim.UninitialisedReadError) as found:
            tile_loaded_inside_the_bounds_check[1, 64](cuda.to_device(np.ones(40, np.float32)),
                                                       cuda.device_array(40, np.float32))
    message = str(found.value)
    assert "24 threads of its warp are not running this code (an `if` they skipped, or a return)" in message, message
    assert "Keep every thread in the block's shared-memory loads and barriers" in message


# ---------------------------------------------------------------- what a race's advice says
@cuda.jit
def two_threads_store_one_element(out):
    i = cuda.grid(1)
    out[i // 2] = i  # threads 2j and 2j + 1 store different values to out[j]


@cuda.jit
def racy_max(x, out):
    i = cuda.grid(1)
    if i < x.size and x[i] > out[0]:
        out[0] = x[i]  # check, then store: no atomic


def test_race_advice_names_an_atomic_where_no_barrier_can_help(executor):
    """Two threads' stores of one statement, and a store after other blocks' loads: the audit's
    messages asked for a barrier (one that cannot order either), and said 'other threads of block
    (7, 0, 0)' with syncthreads() advice for a load of another block."""
    with sim.installed(executor=executor):
        with pytest.raises(sim.RaceError) as found:
            two_threads_store_one_element[1, 64](cuda.device_array(32, np.int32))
        if executor == "simt":  # (one thread at a time: the second store is of another pass to it)
            assert "at the same line: no barrier orders two threads' stores of one statement" in str(found.value)
        assert "is the index right?" in str(found.value) or executor != "simt", str(found.value)
        x = np.arange(1024, dtype=np.float32)
        with pytest.raises(sim.RaceError) as found:
            racy_max[8, 128](cuda.to_device(x), cuda.to_device(np.zeros(1, np.float32)))
    if executor == "simt":  # (one thread at a time meets block 0's own threads first)
        assert "from another block (use an atomic, or a separate launch)" in str(found.value), str(found.value)
