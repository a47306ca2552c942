"""Every change the simulator makes to numba goes through `grader.sim.patching`, in recorded
scopes that leave numba exactly as it was: the SIMT typing's stand-in device, the compile
check's stand-in device, and the installation itself."""

import pathlib
import sys
import threading

import numpy as np
import pytest
from numba import cuda, float32, int32

import grader.sim as sim
from grader.sim import kernel_graph, patching


SIM_DIR = pathlib.Path(sim.__file__).parent


def _dispatcher_modules():
    return [sys.modules[cls.__module__] for cls in patching.dispatcher_classes()]


def _snapshot(*device_functions):
    """Module, class and numba-context state a patch could leave behind."""
    from numba.cuda.descriptor import cuda_target

    snap = {"cuda": dict(vars(patching.cuda_module()))}
    for cls in patching.dispatcher_classes():
        snap[cls] = dict(cls.__dict__)
        snap[cls.__module__] = dict(vars(sys.modules[cls.__module__]))
    for d in device_functions:
        snap[("overloads", d.py_func.__name__)] = dict(d.overloads)
    snap["target_context_functions"] = set(cuda_target.target_context._defns)
    return snap


def _fresh_kernel():
    """A kernel and its device function that numba has never seen (no cached overloads)."""

    @cuda.jit(device=True)
    def halve(x):
        return x * 0.5

    @cuda.jit
    def calls_halve(a, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = halve(a[i])

    return calls_halve, halve


def _array(dtype):
    from grader.sim.simt import typing as simt_typing

    return simt_typing.array_type(np.dtype(dtype), 1)


@pytest.fixture(scope="module", autouse=True)
def warm_numba():
    """numba loads its registries lazily on first use: do that before any snapshot."""
    from grader.sim.simt import typing as simt_typing

    kernel, _ = _fresh_kernel()
    simt_typing.infer(kernel.py_func, (_array(np.float32), _array(np.float32)))


def test_only_patching_module_touches_numba():
    """Regression: simt/typing.py and compile_check.py used to replace
    numba.cuda.dispatcher.get_current_device themselves."""
    offenders = []
    for path in SIM_DIR.rglob("*.py"):
        if path.name == "patching.py":
            continue
        text = path.read_text()
        if "get_current_device =" in text or "PatchScope(" in text or \
                ".get_current_device\n" in text or "setattr(nd" in text:
            offenders.append(str(path.relative_to(SIM_DIR)))
    assert offenders == []


def test_simt_typing_of_a_device_function_call_leaves_numba_as_before():
    from grader.sim.simt import typing as simt_typing

    kernel, halve = _fresh_kernel()
    before = _snapshot(halve)
    types = simt_typing.infer(kernel.py_func, (_array(np.float32), _array(np.float32)))
    assert str(types.by_name["i"]) == "int64"
    assert _snapshot(halve) == before
    assert halve.overloads == {}


def test_compile_check_of_a_device_function_call_leaves_numba_as_before():
    from grader.sim.compile_check import toolchain_status

    if not toolchain_status().compile_ptx:
        pytest.skip("numba-cuda's compile_ptx is not available")
    from grader.sim.compile_check import compile_check

    kernel, halve = _fresh_kernel()
    before = _snapshot(halve)
    report = compile_check(kernel, (np.zeros(4, np.float32), np.zeros(4, np.float32)),
                           cc=(8, 0), use_cache=False)
    assert report.ok or not report.available, report.message
    assert _snapshot(halve) == before


def test_launch_with_device_functions_under_both_executors_leaves_numba_as_before():
    kernel, halve = _fresh_kernel()
    before = _snapshot(halve)
    for executor in ("simt", "thread"):
        with sim.installed(executor=executor):
            out = cuda.device_array(8, np.float32)
            kernel[1, 8](cuda.to_device(np.arange(8, dtype=np.float32)), out)
            assert (out.copy_to_host() == np.arange(8) * 0.5).all()
    assert _snapshot(halve) == before


def test_typing_device_answers_a_stand_in_then_restores():
    (module, *_) = _dispatcher_modules()
    original = module.get_current_device
    kernel, _ = _fresh_kernel()
    with patching.typing_device((7, 5), kernel.py_func):
        assert module.get_current_device is not original
        assert module.get_current_device().compute_capability == (7, 5)
        with patching.compile_check_device((8, 6), []):  # innermost scope wins
            assert module.get_current_device().compute_capability == (8, 6)
        assert module.get_current_device().compute_capability == (7, 5)
    assert module.get_current_device is original


def test_stand_in_device_is_for_the_scope_thread_only():
    (module, *_) = _dispatcher_modules()
    seen = []
    with sim.installed(devices=2) as s:
        s.devices.select(1) if hasattr(s.devices, "select") else cuda.select_device(1)
        inside = threading.Event()
        leave = threading.Event()

        def scoped():
            with patching.compile_check_device((6, 1), []):
                seen.append(("scope", module.get_current_device().compute_capability))
                inside.set()
                leave.wait(10)

        t = threading.Thread(target=scoped)
        t.start()
        inside.wait(10)
        seen.append(("main", module.get_current_device().id))  # the simulator's device
        leave.set()
        t.join()
        assert module.get_current_device().id == 1
    assert seen == [("scope", (6, 1)), ("main", 1)]


def test_scope_inside_an_installation_then_uninstall_restores_exactly():
    before = _snapshot()
    kernel, _ = _fresh_kernel()
    with sim.installed():
        (module, *_) = _dispatcher_modules()
        assert module.get_current_device().compute_capability == (9, 0)
        with patching.typing_device((7, 0), kernel.py_func):
            assert module.get_current_device().compute_capability == (7, 0)
        assert module.get_current_device().id == 0
    assert _snapshot() == before


def test_scope_restores_after_an_error_inside():
    before = _snapshot()
    kernel, _ = _fresh_kernel()
    with pytest.raises(RuntimeError):
        with patching.typing_device((9, 0), kernel.py_func):
            raise RuntimeError("boom")
    assert _snapshot() == before


def test_device_dispatchers_follow_globals_closures_and_modules():
    kernel, halve = _fresh_kernel()
    assert kernel_graph.device_dispatchers(kernel.py_func) == [halve]

    @cuda.jit(device=True)
    def inner(x):
        return x + int32(1)

    @cuda.jit(device=True)
    def outer(x):
        return inner(x) * float32(2)

    @cuda.jit
    def uses_outer(a):
        a[0] = outer(a[0])

    assert set(map(id, kernel_graph.device_dispatchers(uses_outer.py_func))) == {id(outer), id(inner)}


def test_a_launch_changes_nothing_process_wide():
    """Regression (issue 10): the first SIMT launch set glibc's malloc thresholds for the whole
    process. Only a process that is the simulator's own asks for that, at its start
    (`sim.tune_process()`: the device process, a runner, the benchmarks)."""
    import gc

    from grader.sim.simt import executor

    kernel, _ = _fresh_kernel()
    before = (executor._malloc_tuned, gc.isenabled())
    for name in ("simt", "thread"):
        with sim.installed(executor=name):
            out = cuda.device_array(64, np.float32)
            kernel[2, 32](cuda.to_device(np.ones(64, np.float32)), out)
            assert np.array_equal(out.copy_to_host(), np.full(64, 0.5, np.float32))
    assert (executor._malloc_tuned, gc.isenabled()) == before == (False, True)
    from numba.cuda.core.compiler_machinery import _pass_registry

    assert not any(v.pass_inst.name() == "simt_stop_after_typing" for v in _pass_registry._registry.values()), \
        "the SIMT typing's pass is in numba's registry only while a kernel is typed"


def test_each_simulator_keeps_its_own_launch_records():
    """Regression (issue 10): launch records went to a sink shared by every simulator of the process."""
    kernel, _ = _fresh_kernel()
    with sim.installed() as first, first.tracer.trace() as seen_by_first:
        with sim.installed() as second, sim.trace() as seen_by_second:
            assert sim.current() is second
            out = cuda.device_array(64, np.float32)
            kernel[2, 32](cuda.to_device(np.ones(64, np.float32)), out)
    assert len(seen_by_second) == 1 and seen_by_first == []
    with pytest.raises(RuntimeError, match="not installed"):
        sim.trace()


def test_the_simulators_memo_tables_are_bounded():
    """Regression (issue 10): per-kernel module caches grew for the life of the process."""
    from grader.sim import kernel_source
    from grader.sim.bounded import BoundedCache
    from grader.sim.compile_check import cache
    from grader.sim.simt import executor, typing
    from grader.sim.thread import rewrite

    for table in (kernel_source._marked_cache, rewrite._codes, cache._mem_cache, executor._compiled,
                  typing._inferred, typing._signatures):
        assert isinstance(table, BoundedCache)
    small = BoundedCache(3)
    for key in range(10):
        small[key] = key
    assert list(small) == [7, 8, 9] and small[9] == 9
    small[8] = "again"  # replacing a key evicts nothing
    assert list(small) == [7, 8, 9]


def test_a_rewritten_kernel_is_never_served_for_another_typing_at_a_reused_id():
    """Regression: the per-thread rewrite was cached by id() of its typing; once the bounded typing
    cache let that object go, a new typing at the same address got the old code (a uint64 brev
    run as a 32-bit one, under load). An entry left by another typing at this id is not a hit."""
    from grader.sim.simt import typing as simt_typing
    from grader.sim.thread import rewrite

    def brev_kernel(a, x):
        a[0] = cuda.brev(x)

    a = np.zeros(1, np.uint64)
    import numba

    types = simt_typing.infer(brev_kernel, (numba.typeof(a), numba.typeof(np.uint64(1))))
    stale = object()
    key = (brev_kernel.__code__, id(types), "kernel", False, None)
    rewrite._codes[key] = (object(), stale)  # what a freed typing at the same address left
    assert rewrite.typed_code(brev_kernel, types, "kernel") is not stale
    assert rewrite._codes[key][0] is types
