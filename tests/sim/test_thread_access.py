"""Compiled element accesses of the per-thread executor (grader/sim/thread/access.py): with the
race and uninitialised-read checkers off, the accesses numba types as full integer indices of
an array local run inline. They must give what the recorded path gives: the same outputs,
counters, per-thread table and per-line costs, and the same findings for what stays checked."""

import numpy as np
import pytest
from numba import cuda, float32, float64, int32

import grader.sim as sim
from grader.sim.thread import rewrite as thread_rewrite
from grader.sim.simt import typing as simt_typing
from test_executor_agreement import tree_sum_missing_barrier  # (tests/sim is on sys.path)

COMPILED = sim.Checks(off={"races", "uninitialised"})


def run(kernel, grid, block, make_args, executor="thread", checks=COMPILED, shared=0):
    with sim.installed(executor=executor, checks=checks), sim.trace() as records:
        args = make_args()
        kernel[grid, block, 0, shared](*args)
        outputs = [a.copy_to_host() for a in args if hasattr(a, "copy_to_host")]
    (record,) = records
    assert record.executor == executor, record.fallback_reason
    return outputs, record


def assert_same_as_recorded(kernel, grid, block, make_args, shared=0, simt=True):
    """Compiled == recorded (per-thread executor, the same checks off) == SIMT."""
    runs = {"compiled": run(kernel, grid, block, make_args, shared=shared),
            "recorded": run(kernel, grid, block, make_args, checks=_recorded(), shared=shared)}
    if simt:
        runs["simt"] = run(kernel, grid, block, make_args, "simt", shared=shared)
    out_c, rec_c = runs["compiled"]
    for name, (out, rec) in runs.items():
        for a, b in zip(out_c, out):
            np.testing.assert_array_equal(a, b, err_msg=name)
        counters = {k: v for k, v in rec.counters.items() if k != "threads"}
        assert {k: v for k, v in rec_c.counters.items() if k != "threads"} == counters, name
        for key, table in rec.threads.items():
            np.testing.assert_array_equal(rec_c.threads[key], table, err_msg=f"{name} {key}")
    return out_c


@pytest.fixture(autouse=True)
def _recorded_means_recorded(monkeypatch):
    """`_recorded()`: the same checkers off, accesses through the recorders."""
    from grader.sim.thread import executor as thread_executor

    original = thread_executor.ThreadExecutor.__init__

    def init(self, launch):
        if isinstance(launch.instrument.checks, _NotCompiled):
            self.compile_accesses = False
        original(self, launch)

    monkeypatch.setattr(thread_executor.ThreadExecutor, "__init__", init)


class _NotCompiled(sim.Checks):
    pass


def _recorded():
    return _NotCompiled(off={"races", "uninitialised"})


def dev(x):
    return cuda.to_device(np.ascontiguousarray(x))


# ---------------------------------------------------------------- it is compiled
@cuda.jit
def scale(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * 2


def test_the_typed_code_compiles_the_accesses():
    arr = simt_typing.array_type(np.dtype(np.float32), 1)
    types = simt_typing.infer(scale.py_func, (arr, arr))
    counted, _ = thread_rewrite.typed_code(scale.py_func, types, "kernel", access="count")
    recorded, _ = thread_rewrite.typed_code(scale.py_func, types, "kernel", access="record")
    plain, _ = thread_rewrite.typed_code(scale.py_func, types, "kernel")
    assert "__gg_unpack" in counted.co_names and "__gg_thread_id" not in counted.co_names
    assert {"__gg_unpack", "__gg_thread_id"} <= set(recorded.co_names)  # checkers need the id
    assert "__gg_unpack" not in plain.co_names
    assert counted.co_filename == recorded.co_filename == scale.py_func.__code__.co_filename


def test_vector_kernel_with_a_partial_block():
    a = np.arange(100, dtype=np.float32)
    _, out = assert_same_as_recorded(scale, 4, 32, lambda: [
        dev(a), cuda.device_array(100, np.float32)])
    np.testing.assert_array_equal(out, a * 2)


# ---------------------------------------------------------------- arrays of every kind
@cuda.jit
def rows_through_a_view(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        row = a[i]
        acc = float32(0)
        for j in range(row.shape[0]):
            acc += row[j]
        out[i] = acc


def test_a_view_bound_to_a_name():
    a = np.random.rand(40, 7).astype(np.float32)
    _, out = assert_same_as_recorded(rows_through_a_view, 2, 32, lambda: [
        dev(a), cuda.device_array(40, np.float32)])
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5)
    # the SIMT executor runs views too: "auto" needs no fallback
    with sim.installed(), sim.trace() as records:
        out = cuda.device_array(40, np.float32)
        rows_through_a_view[2, 32](dev(a), out)
    assert records[0].executor == "simt" and records[0].fallback_reason is None
    np.testing.assert_allclose(out.copy_to_host(), a.sum(1), rtol=1e-5)


@cuda.jit
def strided_copy(a, out):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j] + 1


def test_a_non_contiguous_argument():
    base = np.arange(12 * 20, dtype=np.float64).reshape(12, 20)
    _, out = assert_same_as_recorded(strided_copy, (2, 3), (8, 8), lambda: [
        cuda.to_device(base[:, ::2]), cuda.device_array((12, 10), np.float64)])
    np.testing.assert_array_equal(out, base[:, ::2] + 1)


@cuda.jit
def cube_sum(a, out):
    i = cuda.grid(1)
    if i < a.shape[0]:
        s = 0.0
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                s += a[i, j, k]
        out[i] = s


def test_three_dimensions_and_a_float64_accumulator():
    a = np.random.rand(9, 3, 5).astype(np.float32)
    _, out = assert_same_as_recorded(cube_sum, 1, 32, lambda: [
        dev(a), cuda.device_array(9, np.float64)])
    np.testing.assert_allclose(out, a.astype(np.float64).sum((1, 2)), rtol=1e-12)


CONST = np.arange(8, dtype=np.int32)


@cuda.jit
def local_and_const(out):
    t = cuda.threadIdx.x
    tbl = cuda.const.array_like(CONST)
    buf = cuda.local.array(4, int32)
    for k in range(4):
        buf[k] = tbl[(t + k) % 8]
    buf[1] += buf[0]
    out[t] = buf[1] + buf[3]


def test_local_and_constant_arrays_are_not_counted():
    (out,) = assert_same_as_recorded(local_and_const, 1, 32, lambda: [
        cuda.device_array(32, np.int32)])
    t = np.arange(32)
    np.testing.assert_array_equal(out, (t % 8) + ((t + 1) % 8) + ((t + 3) % 8))


@cuda.jit
def writes_const(out):
    tbl = cuda.const.array_like(CONST)
    tbl[0] = 1
    out[0] = tbl[0]


def test_a_store_to_a_constant_array_is_still_refused():
    with sim.installed(executor="thread", checks=COMPILED):
        with pytest.raises(sim.SimError, match="would not compile for a GPU.*readonly array"):
            writes_const[1, 1](cuda.device_array(1, np.int32))


@cuda.jit(device=True)
def dot_row(a, b, i):
    acc = float32(0)
    for k in range(a.shape[1]):
        acc += a[i, k] * b[k]
    return acc


@cuda.jit
def matvec(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] += dot_row(a, b, i)


def test_device_function_with_array_parameters_and_augmented_store():
    a = np.random.rand(50, 16).astype(np.float32)
    b = np.random.rand(16).astype(np.float32)
    _, _, out = assert_same_as_recorded(matvec, 2, 32, lambda: [
        dev(a), dev(b), dev(np.ones(50, np.float32))])
    np.testing.assert_allclose(out, 1 + a @ b, rtol=1e-5)


@cuda.jit
def transpose_tile(a, out):
    tile = cuda.shared.array((32, 33), float64)  # padded: no bank conflicts on the column read
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    if x < a.shape[1] and y < a.shape[0]:
        tile[ty, tx] = a[y, x]
    cuda.syncthreads()
    x2 = cuda.blockIdx.y * 32 + tx
    y2 = cuda.blockIdx.x * 32 + ty
    if x2 < out.shape[1] and y2 < out.shape[0]:
        out[y2, x2] = tile[tx, ty]


def test_shared_float64_tiles_count_wavefronts_of_two_words():
    a = np.random.rand(40, 70)
    _, out = assert_same_as_recorded(transpose_tile, (3, 2), (32, 32), lambda: [
        dev(a), cuda.device_array((70, 40), np.float64)])
    np.testing.assert_array_equal(out, a.T)


@cuda.jit
def dynamic_block_sums(a, out):
    buf = cuda.shared.array(0, float64)
    t = cuda.threadIdx.x
    buf[t] = a[cuda.grid(1)]
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            buf[t] += buf[t + half]
        cuda.syncthreads()
        half //= 2
    if t == 0:
        out[cuda.blockIdx.x] = buf[0]


def test_dynamic_shared_memory_and_a_while_loop():
    a = np.random.rand(4 * 64)
    _, out = assert_same_as_recorded(dynamic_block_sums, 4, 64, lambda: [
        dev(a), cuda.device_array(4, np.float64)], shared=64 * 8)
    np.testing.assert_allclose(out, a.reshape(4, 64).sum(1), rtol=1e-12)


@cuda.jit
def gather(idx, a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[idx[i]]  # the outer index is a load: not compiled, the inner one is


def test_an_index_that_is_itself_a_load():
    idx = np.random.permutation(64).astype(np.int64)
    a = np.random.rand(64).astype(np.float32)
    _, _, out = assert_same_as_recorded(gather, 2, 32, lambda: [
        dev(idx), dev(a), cuda.device_array(64, np.float32)])
    np.testing.assert_array_equal(out, a[idx])


@cuda.jit
def divergent_halves(a, out):
    i = cuda.grid(1)
    if i % 2 == 0:
        out[i] = a[i] * 2
    else:
        v = a[i]
        out[i] = v + a[i - 1]


def test_divergent_warps_take_the_general_count():
    a = np.random.rand(96).astype(np.float32)
    _, out = assert_same_as_recorded(divergent_halves, 3, 32, lambda: [
        dev(a), cuda.device_array(96, np.float32)])
    expect = np.where(np.arange(96) % 2 == 0, a * 2, a + np.roll(a, 1))
    np.testing.assert_array_equal(out, expect)


# ---------------------------------------------------------------- what stays checked
@cuda.jit
def negative_index(a, out):
    i = cuda.threadIdx.x
    out[i] = a[i - 1]


def test_out_of_bounds_is_reported_with_the_line():
    with sim.installed(executor="thread", checks=COMPILED):
        with pytest.raises(sim.OutOfBoundsError, match=r"index \(-1,\)|index -1") as info:
            negative_index[1, 4](dev(np.ones(4, np.float32)), cuda.device_array(4, np.float32))
    assert "out[i] = a[i - 1]" in open(info.value.filename).read().splitlines()[info.value.line - 1]


def test_a_downgraded_out_of_bounds_read_counts_as_the_recorded_path_does():
    checks = sim.Checks(off={"races", "uninitialised"}, warn={"bounds"})
    with sim.installed(executor="thread", checks=checks), sim.trace() as records, \
            pytest.warns(sim.SimWarning):
        negative_index[1, 4](dev(np.ones(4, np.float32)), cuda.device_array(4, np.float32))
    assert records[-1].counters["global_loads"] == 4


@cuda.jit
def reads_unwritten(out):
    tile = cuda.shared.array(32, float32)
    out[cuda.threadIdx.x] = tile[cuda.threadIdx.x]


@pytest.mark.parametrize("kernel, make_args, cls, line_text", [
    (tree_sum_missing_barrier, lambda: [dev(np.ones(64, np.float32)),
                                        cuda.device_array(1, np.float32)],
     sim.RaceError, "sh[t] += sh[t + s]"),
    (reads_unwritten, lambda: [cuda.device_array(32, np.float32)],
     sim.UninitialisedReadError, "out[cuda.threadIdx.x] = tile[cuda.threadIdx.x]"),
])
def test_checked_accesses_report_what_the_recorders_report(monkeypatch, kernel, make_args, cls,
                                                           line_text):
    """With the checkers on, compiled accesses call the arrays' checkers with a Site for the
    frame: the same finding, on the same line, as through ThreadArray."""
    from grader.sim.thread import executor as thread_executor

    found = {}
    for compiled in (True, False):
        monkeypatch.setattr(thread_executor.ThreadExecutor, "compile_accesses", compiled)
        with sim.installed(executor="thread"), pytest.raises(sim.SimError) as info:
            kernel[1, 64 if kernel is tree_sum_missing_barrier else 32](*make_args())
        found[compiled] = info.value
    assert type(found[True]) is type(found[False]) is cls
    assert found[True].line == found[False].line
    assert str(found[True]) == str(found[False])
    with open(found[True].filename) as f:
        assert line_text in f.read().splitlines()[found[True].line - 1]
