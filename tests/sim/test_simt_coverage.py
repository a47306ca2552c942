"""Constructs the lockstep executor runs without falling back (issue 15): print, array views
and slices, complex numbers, `cuda.blockIdx` (etc.) as values, array attributes. Each runs
lockstep (no fallback reason) and agrees with the per-thread executor: outputs, counters,
per-thread tables, findings."""

import cmath

import numpy as np
import pytest
from numba import cuda, float32, uint32

import grader.sim as sim
from test_executor_agreement import (assert_agree, assert_same_finding, dev, raised_by_both,
                                     run_both)


def lockstep(results):
    record = results["simt"][1]
    assert record.executor == "simt" and record.fallback_reason is None
    return assert_agree(results)


def runs_lockstep_under_auto(kernel, grid, block, make_args):
    with sim.installed(executor="auto"), sim.trace() as records:
        kernel[grid, block](*make_args())
    assert [(r.executor, r.fallback_reason) for r in records] == [("simt", None)]


# ---------------------------------------------------------------- print
@cuda.jit
def prints_per_thread(a):
    i = cuda.grid(1)
    if i < a.size and i % 3 != 1:
        print("lane", i, a[i], a[i] > 1.5)


def test_print_is_one_line_per_active_thread_in_thread_order(capsys):
    make = lambda: [dev(np.arange(6, dtype=np.float32) * 0.5)]  # noqa: E731
    printed = {}
    for executor in ("simt", "thread"):
        with sim.installed(executor=executor), sim.trace() as records:
            prints_per_thread[2, 4](*make())
        assert records[0].executor == executor and records[0].fallback_reason is None
        printed[executor] = capsys.readouterr().out
    assert printed["simt"] == printed["thread"] == (
        "lane 0 0.0 False\nlane 2 1.0 False\nlane 3 1.5 False\nlane 5 2.5 True\n")


# ---------------------------------------------------------------- views and slices
@cuda.jit
def row_sums(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        row = a[i]  # a view per lane
        acc = float32(0)
        for j in range(row.shape[0]):
            acc += row[j]
        out[i] = acc + a[i, :][1] + len(row)


def test_a_row_view_per_lane():
    a = np.random.default_rng(0).random((40, 7), dtype=np.float32)
    out = lockstep(run_both(row_sums, 2, 32, lambda: [dev(a), cuda.device_array(40, np.float32)]))
    np.testing.assert_allclose(out[1], a.sum(1) + a[:, 1] + 7, rtol=1e-5)


@cuda.jit
def slices_of_slices(a, out):
    i = cuda.grid(1)
    tail = a[1:]
    every_other = tail[::2]
    if i < tail.size:
        out[i] = tail[i] + every_other[i // 2] + a[2:5][0] + a[::-1][i]


def test_slices_and_slices_of_slices():
    a = np.arange(9, dtype=np.float64)
    out = lockstep(run_both(slices_of_slices, 1, 32,
                            lambda: [dev(a), cuda.device_array(8, np.float64)]))
    i = np.arange(8)
    np.testing.assert_array_equal(out[1], a[1:] + a[1:][::2][i // 2] + 2 + a[::-1][i])


@cuda.jit
def column_views(a, out):
    i = cuda.grid(1)
    if i < a.shape[1]:
        col = a[:, i]
        below = col[1:]
        below[0] = below[1] * 10 + col.size  # a store through a view of a view
        out[i] = col[1]


def test_stores_through_column_views():
    a = np.arange(12, dtype=np.float64).reshape(4, 3)
    out = lockstep(run_both(column_views, 1, 32, lambda: [dev(a), cuda.device_array(3)]))
    np.testing.assert_array_equal(out[1], a[2] * 10 + 4)


@cuda.jit
def view_chosen_in_a_loop(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:  # the view is reassigned under a partial mask: merged per lane
        acc = 0.0
        for j in range(3):
            r = a[(i + j) % a.shape[0]]
            acc += r[j]
        out[i] = acc


def test_a_view_reassigned_in_a_divergent_loop():
    a = np.arange(15, dtype=np.float64).reshape(5, 3)
    lockstep(run_both(view_chosen_in_a_loop, 1, 32, lambda: [dev(a), cuda.device_array(5)]))


@cuda.jit
def views_in_shared_memory(a, out):
    tile = cuda.shared.array((4, 8), float32)
    t = cuda.threadIdx.x
    tile[t // 8, t % 8] = a[t]
    cuda.syncthreads()
    row = tile[t % 4]
    out[t] = row[t // 4]


def test_views_of_shared_arrays():
    a = np.arange(32, dtype=np.float32)
    lockstep(run_both(views_in_shared_memory, 1, 32,
                      lambda: [dev(a), cuda.device_array(32, np.float32)]))


@cuda.jit
def view_index_past_its_end(a, out):
    i = cuda.grid(1)
    row = a[1]
    out[i] = row[i]  # row has 3 elements


def test_an_index_past_a_views_end_is_the_same_finding():
    from grader.sim.errors import OutOfBoundsError

    errors = raised_by_both(view_index_past_its_end, 1, 8, lambda: [
        dev(np.zeros((4, 3))), cuda.device_array(8)])
    assert_same_finding(errors, OutOfBoundsError, "out[i] = row[i]")
    assert {str(e) for e in errors.values()} == {str(errors["simt"])}


# ---------------------------------------------------------------- complex numbers
@cuda.jit
def complex_arithmetic(a, out, z_out):
    i = cuda.grid(1)
    if i < a.size:
        z = complex(a[i], a[i] * 2)
        w = cmath.exp(z) * z.conjugate() - 1.5 + 1j
        z_out[i] = w
        out[i] = abs(z) + w.imag + w.real


def test_complex_numbers():
    a = np.linspace(-1, 1, 20).astype(np.float32)
    lockstep(run_both(complex_arithmetic, 1, 32, lambda: [
        dev(a), cuda.device_array(20, np.float32), cuda.device_array(20, np.complex64)]))


# ---------------------------------------------------------------- special registers as values
@cuda.jit
def dims_as_values(out):
    b = cuda.blockIdx
    t = cuda.threadIdx
    d = cuda.blockDim
    g = cuda.gridDim
    i = (b.x * d.x + t.x) * d.y + t.y
    out[i] = b.x * 1000 + t.y * 100 + g.x * 10 + d.y


def test_block_and_thread_indices_used_as_values():
    lockstep(run_both(dims_as_values, 3, (4, 2), lambda: [cuda.device_array(24, np.int64)]))


# ---------------------------------------------------------------- array attributes
@cuda.jit
def array_attributes(a, out):
    scratch = cuda.local.array(2, a.dtype)
    i = cuda.grid(1)
    if i < a.shape[0]:
        scratch[0] = a[i, 0]
        scratch[1] = a[i, 1]
        out[i] = scratch[0] * scratch[1] + a.ndim + a.size + a.shape[1]


def test_dtype_ndim_size_and_shape_of_an_argument():
    a = np.arange(10, dtype=np.float32).reshape(5, 2)
    lockstep(run_both(array_attributes, 1, 32, lambda: [dev(a), cuda.device_array(5, np.float32)]))


@pytest.mark.parametrize("kernel,make", [
    (prints_per_thread, lambda: [dev(np.zeros(3, np.float32))]),
    (row_sums, lambda: [dev(np.zeros((3, 2), np.float32)), cuda.device_array(3, np.float32)]),
    (complex_arithmetic, lambda: [dev(np.zeros(3, np.float32)), cuda.device_array(3, np.float32),
                                  cuda.device_array(3, np.complex64)]),
    (dims_as_values, lambda: [cuda.device_array(8, np.int64)]),
])
def test_auto_runs_them_lockstep(kernel, make, capsys):
    runs_lockstep_under_auto(kernel, 1, 8 if kernel is not dims_as_values else (4, 2), make)


# ---------------------------------------------------------------- per-lane warp masks
@cuda.jit
def shuffle_under_activemask(start, out):
    i = cuda.grid(1)
    n = start[i]
    total = 0
    while n != 1:  # lanes leave at different iterations, in every warp
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        total += cuda.shfl_down_sync(cuda.activemask(), n, 0)
    out[i] = total


def test_activemask_in_divergent_code_is_each_warps_own_mask():
    # each lane's mask names the lanes of its own warp (lockstep once OR-ed them over the
    # whole batch: a false "diverged" finding as soon as two warps ran)
    lockstep(run_both(shuffle_under_activemask, 1, 64, lambda: [
        dev(np.arange(1, 65, dtype=np.int64)), cuda.device_array(64, np.int64)]))


# ---------------------------------------------------------------- slices per lane, lambdas
@cuda.jit
def tails_per_lane(res, old, vals, lengths):
    gid = cuda.grid(1)
    if gid < res.size:
        tail = res[gid:]  # a view whose start and length differ between lanes
        lengths[gid] = len(tail) + tail[::2].size * 100
        mine = old[gid:]
        mine[0] = cuda.atomic.compare_and_swap(tail, 0, vals[gid])  # (element gid of each)


def test_a_slice_whose_bounds_differ_between_lanes():
    res = np.array([0, 1, 0, 3, 0, 5, 0, 7, 0], np.int64)
    out = lockstep(run_both(tails_per_lane, 1, 32, lambda: [
        dev(res), cuda.device_array(9, np.int64), dev(np.arange(10, 19, dtype=np.int64)),
        cuda.device_array(9, np.int64)]))
    lengths = np.arange(9, 0, -1)
    np.testing.assert_array_equal(out[3], lengths + (lengths + 1) // 2 * 100)


@cuda.jit
def tail_past_its_end(a, out):
    i = cuda.grid(1)
    tail = a[i:]
    out[i] = tail[3]  # past the end for the last lanes


def test_an_index_past_the_end_of_a_per_lane_slice_is_the_same_finding():
    from grader.sim.errors import OutOfBoundsError

    errors = raised_by_both(tail_past_its_end, 1, 8, lambda: [dev(np.zeros(8)), cuda.device_array(8)])
    assert_same_finding(errors, OutOfBoundsError, "out[i] = tail[3]")
    assert {str(e) for e in errors.values()} == {str(errors["simt"])}


cube = cuda.jit(device=True)(lambda x: x * x * x)


@cuda.jit
def calls_a_lambda(a, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = cube(a[i]) + 1


def test_a_lambda_device_function_and_cuda_reduce():
    a = np.arange(20, dtype=np.float32)
    lockstep(run_both(calls_a_lambda, 1, 32, lambda: [dev(a), cuda.device_array(20, np.float32)]))
    with sim.installed(executor="auto"), sim.trace() as records:
        total = cuda.reduce(lambda x, y: x + y)(np.arange(1000, dtype=np.float64))
    assert total == 499500
    assert records and all(r.executor == "simt" and r.fallback_reason is None for r in records)


@cuda.jit
def bit_counts(a, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i].bit_count()  # numba-cuda: cuda.popc


def test_int_bit_count_is_popc():
    a = np.array([0, 1, 7, 255, 1 << 40, 12345], np.int64)
    out = lockstep(run_both(bit_counts, 1, 32, lambda: [dev(a), cuda.device_array(6, np.int64)]))
    np.testing.assert_array_equal(out[1], [0, 1, 3, 8, 1, 6])


# ---------------------------------------------------------------- functions and types as values
@cuda.jit(device=True)
def as_index(x):
    return int(x)


@cuda.jit(device=True)
def scatter_with(op, ary, bins, dtype, n, cast, value):
    t = cuda.threadIdx.x
    tile = cuda.shared.array(n, dtype)  # n and dtype: a literal and a type passed in
    tile[t] = dtype(0)
    cuda.syncthreads()
    op(tile, cast(bins[t] % n), value)  # op: the atomic passed in
    cuda.syncthreads()
    ary[t] = tile[t]


@cuda.jit
def passes_functions(ary, bins):
    scatter_with(cuda.atomic.add, ary, bins, uint32, 32, as_index, 3)


@cuda.jit
def passes_another_atomic(ary, bins):
    scatter_with(cuda.atomic.max, ary, bins, uint32, 32, as_index, 5)


@pytest.mark.parametrize("kernel", [passes_functions, passes_another_atomic])
def test_atomics_device_functions_and_types_passed_as_values(kernel):
    bins = np.arange(32, dtype=np.int64) * 7 % 5
    out = lockstep(run_both(kernel, 1, 32, lambda: [cuda.device_array(32, np.uint32), dev(bins)]))
    expect = np.zeros(32, np.uint32)
    for b in bins:
        expect[b] = expect[b] + 3 if kernel is passes_functions else 5
    np.testing.assert_array_equal(out[0], expect)


# ---------------------------------------------------------------- an array chosen per step
@cuda.jit
def ping_pong(buf_0, buf_1, steps):
    i = cuda.grid(1)
    if i >= buf_0.size:
        return  # these lanes are gone: the choice below is uniform among the lanes left
    for step in range(steps):
        if step % 2 == 0:
            data, out = buf_0, buf_1
        else:
            data, out = buf_1, buf_0
        out[i] = data[i] + 1.0
        cuda.syncthreads()


@cuda.jit
def chosen_per_lane(buf_0, buf_1, out):
    i = cuda.grid(1)
    if i % 2 == 0:
        data = buf_0
    else:
        data = buf_1
    out[i] = data[i]


def test_an_array_chosen_in_a_branch_uniform_among_the_live_lanes_runs_lockstep():
    """Lanes that returned do not make a uniform choice of array divergent (numba-cuda's laplace
    example); a choice that really differs between lanes still falls back, saying so."""
    make = lambda: [dev(np.zeros(100, np.float32)), dev(np.zeros(100, np.float32)), 7]  # noqa: E731
    out = lockstep(run_both(ping_pong, 1, 128, make))
    assert (out[0] == 6).all() and (out[1] == 7).all()
    runs_lockstep_under_auto(ping_pong, 1, 128, make)
    with sim.installed(executor="auto"), sim.trace() as records:
        chosen_per_lane[1, 32](dev(np.zeros(32, np.float32)), dev(np.ones(32, np.float32)),
                               dev(np.zeros(32, np.float32)))
    assert records[0].executor == "thread" and "choosing an array per lane" in records[0].fallback_reason
