"""Arrays no thread of a launch can write (grader/sim/read_only.py): which parameters a kernel's
source may write, what the launch then spares their loads, and that nothing else changes: the
same findings, outputs and counters as with every load checked."""

import types

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
import grader.sim.launch as launch_module
from grader.sim.errors import NotSimulatedError, RaceError, UninitialisedReadError
from grader.sim.read_only import read_only_buffers, written_params
from sim_kernels import tiled_matmul, uses_device_functions, vector_add


# ---------------------------------------------------------------- kernels (module level: their
# source is what the analysis reads)
@cuda.jit
def grid_stride_sum(x, out):
    acc = 0.0
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        acc += x[i]
    cuda.atomic.add(out, 0, acc)


@cuda.jit
def rows_through_a_view(A, out):
    row = A[cuda.grid(1)]  # a view of a 2-D array: storing through it writes A
    row[0] = out[0]


@cuda.jit
def element_of_a_matrix(A, out):
    v = A[cuda.grid(1), 0]  # an element: v is a number
    v += 1.0
    out[cuda.grid(1)] = v


@cuda.jit
def alias_by_assignment(x, out):
    y = x
    y[cuda.grid(1)] = out[0]


@cuda.jit
def slice_of_x(x, out):
    tail = x[1:]
    tail[0] = out[0]


@cuda.jit
def rebinds_a_parameter(x, out):
    x = out
    x[cuda.grid(1)] = 1.0


@cuda.jit
def atomic_by_keyword(x, out):
    cuda.atomic.add(ary=x, idx=0, val=out[0])


@cuda.jit
def atomic_reads_x(x, out):
    cuda.atomic.add(out, 0, x[cuda.grid(1)])


@cuda.jit(device=True)
def store_into(target, i, value):
    target[i] = value


@cuda.jit(device=True)
def pick_first(a, b):
    return a


@cuda.jit
def through_device_functions(x, y, out):
    i = cuda.grid(1)
    store_into(out, i, x[i] + y[i])


@cuda.jit(device=True)
def leaves_it_alone(target, i, value):
    return value


rebindable = leaves_it_alone


@cuda.jit(device=True)
def middle(target, i, value):
    rebindable(target, i, value)


@cuda.jit
def calls_through_a_device_function(x, out):
    middle(x, cuda.grid(1), out[0])


helpers = types.ModuleType("helpers")  # a student's helper module, its function named as `helpers.fn`
helpers.fn = leaves_it_alone


@cuda.jit
def calls_a_module_attribute(x, out):
    helpers.fn(x, cuda.grid(1), out[0])


@cuda.jit
def device_function_by_keyword(x, y, out):
    i = cuda.grid(1)
    store_into(value=y[i], i=i, target=x)


@cuda.jit
def returned_alias(x, out):
    pick_first(x, out)[cuda.grid(1)] = 1.0


@cuda.jit
def returned_alias_in_a_name(x, out):
    z = pick_first(x, out)
    z[cuda.grid(1)] = 1.0


@cuda.jit
def tuple_of_arrays(x, out):
    pair = (x, out)
    pair[0][cuda.grid(1)] = 2.0


@cuda.jit
def shared_tile(x, out):
    tile = cuda.shared.array(32, np.float32)
    tile[cuda.threadIdx.x] = x[cuda.grid(1)]
    cuda.syncthreads()
    out[cuda.grid(1)] = tile[31 - cuda.threadIdx.x]


@cuda.jit
def record_field(x, out):
    r = x[cuda.grid(1)]  # an element of a record array is a reference into it
    r.a = out[0]


@cuda.jit
def numpy_ufunc_with_an_output(x, out):
    np.sqrt(x, out)


@cuda.jit
def a_lambda_inside(x, out):
    f = lambda v: v  # noqa: E731
    out[0] = f(x[0])


@cuda.jit
def in_place_on_a_name(x, out):
    x += out  # (arrays: in place)


@cuda.jit
def neighbours_of_the_next_block(x, out):
    i = cuda.grid(1)
    if i + 1 < x.size:
        x[i] = x[i + 1] + out[0]  # reads an element the next block's thread writes


@cuda.jit
def reads_the_tail_it_never_initialised(x, out):
    i = cuda.grid(1)
    out[i] = x[i]


class _Lazy(types.ModuleType):
    """A module whose missing attributes run code (PEP 562's `__getattr__`, as a student's helper
    module may have): the analysis must not run it."""

    ran = False

    def __getattr__(self, name):
        type(self).ran = True
        raise AttributeError(name)


lazy_module = _Lazy("lazy_module")


@cuda.jit
def calls_into_a_lazy_module(x, out):
    lazy_module.scale(x, out)


def _written(kernel, ndims):
    return written_params(kernel.py_func, ndims)


@pytest.mark.parametrize("kernel, ndims, written", [
    (vector_add, {"a": 1, "b": 1, "out": 1}, {"out"}),
    (tiled_matmul, {"A": 2, "B": 2, "C": 2}, {"C"}),
    (grid_stride_sum, {"x": 1, "out": 1}, {"out"}),
    (element_of_a_matrix, {"A": 2, "out": 1}, {"out"}),
    (atomic_reads_x, {"x": 1, "out": 1}, {"out"}),
    (shared_tile, {"x": 1, "out": 1}, {"out"}),
    (through_device_functions, {"x": 1, "y": 1, "out": 1}, {"out"}),
    (uses_device_functions, {"inp": 1, "out": 1}, {"out"}),
    (device_function_by_keyword, {"x": 1, "y": 1, "out": 1}, {"x"}),
])
def test_the_parameters_a_kernel_writes_and_no_others(kernel, ndims, written):
    assert _written(kernel, ndims) == written


@pytest.mark.parametrize("kernel, ndims", [
    (rows_through_a_view, {"A": 2, "out": 1}),
    (alias_by_assignment, {"x": 1, "out": 1}),
    (slice_of_x, {"x": 1, "out": 1}),
    (rebinds_a_parameter, {"x": 1, "out": 1}),
    (atomic_by_keyword, {"x": 1, "out": 1}),
    (returned_alias, {"x": 1, "out": 1}),
    (returned_alias_in_a_name, {"x": 1, "out": 1}),
    (tuple_of_arrays, {"x": 1, "out": 1}),
    (record_field, {"out": 1}),  # (a record array's dimensions are not given: see read_only_buffers)
    (numpy_ufunc_with_an_output, {"x": 1, "out": 1}),
    (in_place_on_a_name, {"x": 1, "out": 1}),
])
def test_every_way_of_writing_through_x_counts_as_writing_x(kernel, ndims):
    written = _written(kernel, ndims)
    assert written is None or "x" in written or "A" in written, written


def test_an_element_is_told_from_a_view_only_by_known_dimensions():
    # `acc += x[i]`: with x's dimensions unknown, x[i] may be a row, and acc an alias of it
    fresh = cuda.jit(grid_stride_sum.py_func)  # (the same function: its answers are joined)
    assert _written(fresh, {}) == {"x", "out"}


def test_a_device_function_rebound_since_the_last_launch_is_read_again(monkeypatch):
    """`rebindable`, two calls down, and `helpers.fn`, an attribute of a module, rebound to one that
    writes its first argument: the kernel's own references are the same objects, the answer still
    changes."""
    assert _written(calls_through_a_device_function, {"x": 1, "out": 1}) == frozenset()
    monkeypatch.setitem(globals(), "rebindable", store_into)
    assert _written(calls_through_a_device_function, {"x": 1, "out": 1}) == {"x"}
    assert _written(calls_a_module_attribute, {"x": 1, "out": 1}) == frozenset()
    monkeypatch.setattr(helpers, "fn", store_into)  # (the module is the same object)
    assert _written(calls_a_module_attribute, {"x": 1, "out": 1}) == {"x"}


def test_what_it_cannot_follow_is_not_told():
    assert _written(a_lambda_inside, {"x": 1, "out": 1}) is None


def test_a_call_it_cannot_resolve_may_write_all_it_is_given_and_no_student_code_runs():
    _Lazy.ran = False  # (pytest's collection looked into the test module's names)
    assert _written(calls_into_a_lazy_module, {"x": 1, "out": 1}) == {"x", "out"}
    assert not _Lazy.ran


def test_a_record_array_and_an_array_given_twice_are_not_read_only():
    with sim.installed(executor="simt"):
        rec = np.zeros(4, np.dtype([("a", np.float32)]))
        d_rec, d_out = cuda.to_device(rec), cuda.to_device(np.ones(1, np.float32))
        bound = launch_module.bind_args(sim.current(), launch_module.KernelSource(record_field), [d_rec, d_out], 0)
        assert read_only_buffers(record_field.py_func, ["x", "out"], bound) == {bound[1].buffer_id}  # out only
        d_x = cuda.to_device(np.ones(8, np.float32))
        bound = launch_module.bind_args(sim.current(), launch_module.KernelSource(atomic_reads_x), [d_x, d_x], 0)
        assert read_only_buffers(atomic_reads_x.py_func, ["x", "out"], bound) == set()
        bound = launch_module.bind_args(sim.current(), launch_module.KernelSource(atomic_reads_x), [d_x, d_out], 0)
        assert read_only_buffers(atomic_reads_x.py_func, ["x", "out"], bound) == {bound[0].buffer_id}


def _unchecked(monkeypatch):
    """Every load checked again: no array is known read-only or initialised throughout."""
    monkeypatch.setattr(launch_module, "_expected", lambda checks, kernel, bound: (set(), set()))


WORKLOADS = [
    (vector_add, 8, 64, lambda rng: [rng.random(500, np.float32), rng.random(500, np.float32),
                                      np.zeros(500, np.float32)]),
    (grid_stride_sum, 4, 64, lambda rng: [rng.random(3000, np.float32), np.zeros(1, np.float32)]),
    (tiled_matmul, (3, 3), (16, 16), lambda rng: [rng.random((40, 40), np.float32), rng.random((40, 40), np.float32),
                                                  np.zeros((40, 40), np.float32)]),
]


@pytest.mark.parametrize("executor", ["simt", "thread"])
@pytest.mark.parametrize("kernel, grid, block, make", WORKLOADS, ids=["vector_add", "grid_stride_sum", "tiled_matmul"])
def test_sparing_the_checks_changes_no_output_and_no_counter(monkeypatch, executor, kernel, grid, block, make):
    results = []
    for spared in (True, False):
        if not spared:
            _unchecked(monkeypatch)
        with sim.installed(executor=executor), sim.trace() as records:
            args = [cuda.to_device(a) for a in make(np.random.default_rng(7))]
            kernel[grid, block](*args)
            results.append(([a.copy_to_host() for a in args], records[-1]))
    (out_a, rec_a), (out_b, rec_b) = results
    for a, b in zip(out_a, out_b):
        np.testing.assert_array_equal(a, b)
    assert rec_a.summary() == rec_b.summary()  # counters, lines, the arrays read and written, ...
    assert rec_a.threads.keys() == rec_b.threads.keys()
    for key, table in rec_a.threads.items():
        np.testing.assert_array_equal(table, rec_b.threads[key])


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_read_of_what_another_block_writes_is_still_a_race(executor):
    with sim.installed(executor=executor):
        x, out = cuda.to_device(np.ones(512, np.float32)), cuda.to_device(np.ones(1, np.float32))
        with pytest.raises(RaceError, match="data race on global array 'x'"):
            neighbours_of_the_next_block[4, 128](x, out)


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_an_input_never_fully_initialised_still_has_its_reads_checked(executor):
    with sim.installed(executor=executor):
        x = cuda.device_array(256, np.float32)
        x[:200].copy_to_device(np.ones(200, np.float32))
        out = cuda.device_array(256, np.float32)
        with pytest.raises(UninitialisedReadError, match="read of uninitialised device array 'x' at index 200"):
            reads_the_tail_it_never_initialised[2, 128](x, out)


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_a_store_into_an_array_found_read_only_is_refused_not_unchecked(monkeypatch, executor):
    """Were the analysis ever wrong (here: made to say nothing is written), the store is refused by
    name; the races of that array's loads are never silently left unchecked."""
    monkeypatch.setattr(launch_module, "read_only_buffers",
                        lambda func, params, bound: {b.buffer_id for b in bound if hasattr(b, "buffer_id")})
    with sim.installed(executor=executor):
        x, out = cuda.to_device(np.ones(512, np.float32)), cuda.to_device(np.ones(1, np.float32))
        with pytest.raises(NotSimulatedError, match="wrote .x. at line .* read its source .* as never writing"):
            neighbours_of_the_next_block[4, 128](x, out)
