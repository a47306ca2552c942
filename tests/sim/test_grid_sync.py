"""Cooperative groups: `cuda.cg.this_grid().sync()` under both executors (every block resident
at once, memory ordered across blocks for the race checker, divergence findings), the
cooperative launch limit (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), and `.overloads` entries
of eager and lazily compiled kernels (`max_cooperative_grid_blocks`)."""

import numpy as np
import pytest
from numba import cuda, int32
from numba.cuda.cg import this_grid

import grader.sim as sim
from grader.sim.compile_check import toolchain
from grader.sim.cooperative import uses_grid_sync


def _launch(kernel, grid, block, *args):
    with sim.trace() as launches:
        kernel[grid, block](*args)
    return launches[-1]


# ---------------------------------------------------------------- kernels
@cuda.jit
def rotate(a):
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    a[i] = i
    g.sync()
    left = a[(i + 1) % a.size]  # another block's element at each block's last thread
    g.sync()
    a[i] = left


@cuda.jit
def rotate_chained(a):
    i = cuda.grid(1)
    a[i] = i
    cuda.cg.this_grid().sync()
    left = a[(i + 1) % a.size]
    this_grid().sync()
    a[i] = left


@cuda.jit(device=True)
def _grid_barrier():
    cuda.cg.this_grid().sync()


@cuda.jit
def rotate_device_sync(a):
    i = cuda.grid(1)
    a[i] = i
    _grid_barrier()
    left = a[(i + 1) % a.size]
    _grid_barrier()
    a[i] = left


@cuda.jit
def sweep(rows):
    """Each step reads the previous row written by another block (the numba docs' shape)."""
    col = cuda.grid(1)
    g = cuda.cg.this_grid()
    n = rows.shape[1]
    for r in range(1, rows.shape[0]):
        rows[r, col] = rows[r - 1, n - col - 1] + 1
        g.sync()


@cuda.jit
def steps_with_early_exit(buf, n, steps):
    i = cuda.grid(1)
    if i >= n:
        return  # exited threads do not take part, as in numba's laplace example
    g = cuda.cg.this_grid()
    for _ in range(steps):
        v = buf[(i + 1) % n]
        g.sync()
        buf[i] = v
        g.sync()


@cuda.jit
def rotate_no_second_sync(a):
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    a[i] = i
    g.sync()
    left = a[(i + 1) % a.size]
    a[i] = left  # races with the load of another block's thread


@cuda.jit
def sync_in_branch(a):
    i = cuda.grid(1)
    if a[i] > 0:
        a[i] = 2
        cuda.cg.this_grid().sync()


@cuda.jit
def last_block_leaves(a):
    if cuda.blockIdx.x == cuda.gridDim.x - 1:
        return
    a[cuda.grid(1)] = 1
    cuda.cg.this_grid().sync()


@cuda.jit
def rotate_block_barrier(a):
    i = cuda.grid(1)
    a[i] = i
    cuda.syncthreads()
    left = a[(i + 1) % a.size]
    cuda.syncthreads()
    a[i] = left


@cuda.jit
def waits_for_the_last_block(flag, out):
    """Block 0 spins on a flag the grid's last block sets: legal in a cooperative launch, whose
    blocks CUDA keeps resident together (the simulator runs block 0 first)."""
    g = cuda.cg.this_grid()
    if cuda.blockIdx.x == cuda.gridDim.x - 1 and cuda.threadIdx.x == 0:
        out[0] = 42
        cuda.threadfence()
        cuda.atomic.exch(flag, 0, 1)
    if cuda.blockIdx.x == 0:
        while cuda.atomic.add(flag, 0, 0) == 0:
            pass
        out[1 + cuda.threadIdx.x] = out[0]
    g.sync()


@cuda.jit
def every_block_waits_for_a_flag_nobody_sets(flag):
    g = cuda.cg.this_grid()
    while flag[0] == 0:
        pass
    g.sync()


# ---------------------------------------------------------------- the grid sync
@pytest.mark.parametrize("kernel", [rotate, rotate_chained, rotate_device_sync])
def test_grid_sync_waits_for_every_block(executor, kernel):
    a = cuda.to_device(np.zeros(256, np.int32))
    rec = _launch(kernel, 4, 64, a)
    np.testing.assert_array_equal(a.copy_to_host(), (np.arange(256) + 1) % 256)
    assert rec.executor == executor and rec.fallback_reason is None
    assert rec.counters["barriers"] == 2 * 4  # a grid sync is a barrier of every block


def test_rows_written_across_blocks(executor):
    rows = np.zeros((24, 128), np.int32)
    _launch(sweep, 4, 32, rows)
    np.testing.assert_array_equal(rows, np.tile(np.arange(24)[:, None], (1, 128)))


def test_threads_that_exited_do_not_hold_the_grid_sync(executor):
    buf = np.arange(100, dtype=np.int32)
    _launch(steps_with_early_exit, 4, 32, buf, 100, 3)
    np.testing.assert_array_equal(buf, np.roll(np.arange(100), -3))


def test_per_thread_executor_in_shuffled_order():
    with sim.installed(executor="thread", seed=7):
        a = np.zeros(256, np.int32)
        rotate[4, 64](a)
    np.testing.assert_array_equal(a, (np.arange(256) + 1) % 256)


def test_without_the_grid_sync_the_blocks_race(executor):
    a = np.zeros(256, np.int32)
    with pytest.raises(sim.RaceError, match="another block"):
        rotate_block_barrier[4, 64](a)  # a block barrier orders nothing between blocks
    with pytest.raises(sim.RaceError):
        rotate_no_second_sync[4, 64](a)  # a grid sync orders only what comes before it


def test_grid_sync_skipped_by_some_threads_is_a_finding(executor):
    a = np.where(np.arange(128) % 3 == 0, 1, 0).astype(np.int32)
    with pytest.raises(sim.BarrierDivergenceError, match="grid sync"):
        sync_in_branch[2, 64](a)


def test_a_block_that_finishes_without_the_grid_sync_is_a_finding(executor):
    a = np.zeros(128, np.int32)
    with pytest.raises(sim.BarrierDivergenceError, match="every block"):
        last_block_leaves[4, 32](a)


def test_finding_downgraded_the_launch_completes():
    with sim.installed(executor="thread", checks=sim.Checks(warn={"barriers"})):
        a = np.zeros(128, np.int32)
        with sim.trace() as launches, pytest.warns(sim.SimWarning):
            last_block_leaves[4, 32](a)
    assert (a[:96] == 1).all() and launches[0].warnings


# ---------------------------------------------------------------- the cooperative launch limit
def test_grid_larger_than_what_is_resident_is_refused(executor):
    @cuda.jit("void(int32[:])")
    def k(a):
        cuda.cg.this_grid().sync()

    sig = next(iter(k.overloads))
    # 100 KiB of dynamic shared memory per block: 2 blocks per SM (228 KiB) on 132 SMs
    assert k.overloads[sig].max_cooperative_grid_blocks(128, 100 * 1024) == 2 * 132
    a = cuda.to_device(np.zeros(1, np.int32))
    with pytest.raises(sim.LaunchConfigError, match="COOPERATIVE_LAUNCH_TOO_LARGE"):
        k[265, 128, 0, 100 * 1024](a)
    limit = k.overloads[sig].max_cooperative_grid_blocks(1024)
    assert limit == 2 * 132  # 64 warps per SM
    with pytest.raises(sim.LaunchConfigError, match=f"at most {limit} blocks"):
        k[limit + 1, 1024](a)


def test_kernels_that_do_not_sync_the_grid_are_not_cooperative():
    assert uses_grid_sync(rotate.py_func) and uses_grid_sync(rotate_chained.py_func)
    assert uses_grid_sync(rotate_device_sync.py_func)
    assert not uses_grid_sync(rotate_block_barrier.py_func)


# ---------------------------------------------------------------- .overloads
def test_eager_kernel_has_an_overload_per_declared_signature(executor):
    @cuda.jit(["void(int32[:])", "void(float32[:])"])
    def k(a):
        x = a[0]
        a[0] = x + 1

    assert len(k.overloads) == 2
    sig = (int32[:],)
    ov = k.overloads[sig]
    assert ov.argument_types == sig and ov.signature.args == sig
    assert ov.max_cooperative_grid_blocks(256) == 8 * 132  # 64 warps per SM / 8 per block
    assert ov.max_cooperative_grid_blocks((16, 16)) == ov.max_cooperative_grid_blocks(256)
    assert ov._type_annotation.typemap["x"] == int32  # numba's own, compiled on the CPU
    regs = k.get_regs_per_thread(ov.signature)  # numba's own method, answered by ptxas
    if toolchain.status_for_check().ptxas:
        assert regs > 0 and k.get_shared_mem_per_block(ov.signature) == 0
    else:
        assert regs is None
    sim.uninstall()
    assert not k.overloads  # nothing simulated stays in numba's dispatcher


def test_lazy_kernel_gets_an_overload_when_launched(executor):
    @cuda.jit
    def k(a):
        a[cuda.grid(1)] += 1

    assert not k.overloads
    a = np.zeros(32, np.int32)
    k[1, 32](a)
    assert list(k.overloads) == [(int32[::1],)]
    assert k.overloads[(int32[::1],)].max_cooperative_grid_blocks(32) == 32 * 132


def test_grid_sync_kernel_passes_the_compile_check():
    """numba links cudadevrt for the grid group at load time: ptxas assembles the kernel as
    relocatable code instead of refusing it ('Unresolved extern function
    cudaCGGetIntrinsicHandle')."""
    with sim.installed(compile_check=True):
        a = np.zeros(128, np.int32)
        with sim.trace() as launches:
            rotate[2, 64](a)
    np.testing.assert_array_equal(a, (np.arange(128) + 1) % 128)
    compiled = launches[0].compiled
    assert compiled.get("available") is False or compiled["registers"] > 0, compiled


@cuda.jit
def sync_per_branch(a):
    g = cuda.cg.this_grid()
    if cuda.blockIdx.x == 0:
        a[cuda.grid(1)] = 1
        g.sync()
    else:
        a[cuda.grid(1)] = 2
        g.sync()


def test_blocks_at_different_grid_syncs_are_a_finding(executor):
    a = np.zeros(64, np.int32)
    with pytest.raises(sim.BarrierDivergenceError, match="grid sync"):
        sync_per_branch[2, 32](a)


def test_the_runner_of_a_device_process_fills_overloads_too():
    """With the simulated GPU in a device process of its own, the runner's patches record eager
    signatures (grader.device.client): the kernels get the same `.overloads` entries."""
    from grader.device.client import _Declared
    from grader.sim.devices import Devices

    def body(a):
        cuda.cg.this_grid().sync()

    k = cuda.jit(body)  # lazily compiled: nothing needs a driver
    declared = _Declared(lambda: Devices(1).current)
    declared.declare(k, "void(int32[:])")
    assert k.overloads[(int32[:],)].max_cooperative_grid_blocks(1024) == 2 * 132
    declared.remove_overloads()
    assert not k.overloads


@cuda.jit
def grid_sync_or_block_barrier(a):
    i = cuda.grid(1)
    if cuda.threadIdx.x < 16:
        a[i] = 1
        cuda.cg.this_grid().sync()
    else:
        a[i] = 2
        cuda.syncthreads()


def test_grid_sync_against_a_block_barrier_is_a_finding(executor):
    a = np.zeros(64, np.int32)
    with pytest.raises(sim.BarrierDivergenceError):
        grid_sync_or_block_barrier[2, 32](a)


def test_a_block_may_spin_on_another_resident_blocks_flag(executor):
    flag = cuda.to_device(np.zeros(1, np.int32))
    out = cuda.to_device(np.zeros(1 + 32, np.int32))
    _launch(waits_for_the_last_block, 4, 32, flag, out)
    np.testing.assert_array_equal(out.copy_to_host(), 42)


def test_a_grid_of_blocks_all_spinning_is_a_deadlock(simulator, monkeypatch):
    from grader.sim.thread import executor as thread_executor

    monkeypatch.setattr(thread_executor, "IDLE_LOAD_YIELDS", 256)
    with pytest.raises(sim.DeadlockError, match="none of them made progress"):
        every_block_waits_for_a_flag_nobody_sets[4, 32](cuda.to_device(np.zeros(1, np.int32)))
