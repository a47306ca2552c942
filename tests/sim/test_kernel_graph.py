"""grader.sim.kernel_graph: the one walk of a kernel's function graph, and its two kinds of
dispatcher (a `@cuda.jit` object; any numba-jitted function)."""

import types

import numba
from numba import cuda

from grader.sim import kernel_graph


@numba.njit
def twice(x):
    return x * 2


@cuda.jit(device=True)
def plus_one(x):
    return x + 1


@cuda.jit
def calls_both(a):
    a[0] = plus_one(twice(a[0]))


def test_the_two_kinds_of_dispatcher():
    assert kernel_graph.is_cuda_dispatcher(calls_both) and kernel_graph.is_cuda_dispatcher(plus_one)
    assert not kernel_graph.is_cuda_dispatcher(twice)
    assert kernel_graph.is_numba_dispatcher(twice) and kernel_graph.is_numba_dispatcher(plus_one)
    assert not kernel_graph.is_numba_dispatcher(calls_both.py_func)


def test_the_compile_check_and_the_stand_in_follow_njit_functions():
    """numba-cuda compiles an @njit function a kernel calls as a device function of the
    kernel: the compile check fingerprints it, and a stand-in compile adds overloads to the
    CUDA dispatcher numba-cuda makes of it."""
    graph = kernel_graph.user_functions(calls_both.py_func)
    assert {id(d) for d in graph.dispatchers} == {id(twice), id(plus_one)}
    assert [n.func for n in graph.functions][0] is calls_both.py_func
    assert {id(d) for d in kernel_graph.device_dispatchers(calls_both.py_func)} == \
        {id(twice), id(plus_one)}


def test_numbas_own_device_functions_are_not_the_users():
    helpers = types.ModuleType("numba.cuda.fake_library")
    exec("def f(x):\n    return x\n", helpers.__dict__)
    internal = cuda.jit(device=True)(helpers.f)

    def kernel(a):
        a[0] = internal(a[0])

    assert kernel_graph.user_functions(kernel).dispatchers == []
    assert kernel_graph.device_dispatchers(kernel) == [internal]


def test_code_names_include_nested_code_each_once():
    def f(a):
        def inner(x):
            return only_inside(x) + both(x)  # noqa: F821 - never called

        return inner(both(a))  # noqa: F821

    names = kernel_graph.code_names(f.__code__)
    assert sorted(names) == ["both", "only_inside"]
