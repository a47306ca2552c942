"""install()/uninstall() route real numba-cuda launches and host API calls to the simulator."""

import sys

import numba
import numpy as np
import pytest
from numba import cuda, float32

import grader.sim as sim
from grader.sim import patching
from sim_kernels import vector_add


@cuda.jit(device=True)
def twice(x):
    return x * 2


@cuda.jit(device=True)
def twice_plus_one(x):
    return twice(x) + 1


@cuda.jit
def vadd_noguard(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


@cuda.jit
def via_numba_module(out):
    i = numba.cuda.grid(1)
    if i < out.size:
        out[i] = twice_plus_one(float32(i))


@cuda.jit
def negative_index(out):
    i = cuda.threadIdx.x
    out[i - 1] = 1.0


def host_add(a, b, kernel=vector_add):
    d_a, d_b = cuda.to_device(a), cuda.to_device(b)
    d_out = cuda.device_array_like(a)
    kernel[(a.size + 127) // 128, 128](d_a, d_b, d_out)
    cuda.synchronize()
    return d_out.copy_to_host()


def test_vector_add_gives_the_right_answer(simulator):
    a = np.arange(1000, dtype=np.float32)
    b = np.full(1000, 0.5, np.float32)
    np.testing.assert_array_equal(host_add(a, b), a + b)


def test_missing_guard_raises_out_of_bounds_with_full_diagnostic(simulator):
    a = np.zeros(1000, np.float32)
    with pytest.raises(sim.OutOfBoundsError) as err:
        host_add(a, a, vadd_noguard)
    msg = str(err.value)
    assert "vadd_noguard" in msg
    assert f"{__file__}:{vadd_noguard.py_func.__code__.co_firstlineno + 3}" in msg
    assert "block (7, 0, 0)" in msg and "thread (104, 0, 0)" in msg
    assert "'a'" in msg and "index 1000" in msg


def test_negative_index_is_out_of_bounds(simulator):
    out = cuda.device_array(4, np.float32)
    with pytest.raises(sim.OutOfBoundsError, match="index -1"):
        negative_index[1, 4](out)


def test_numba_module_prefix_and_nested_device_functions(simulator):
    out = cuda.device_array(40, np.float32)
    via_numba_module[2, 32, 0, 0](out)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(40) * 2 + 1)


def test_host_numpy_arguments_are_copied_back(simulator):
    a = np.arange(10, dtype=np.float64)
    out = np.zeros(10)
    vector_add[1, 16](a, a, out)
    np.testing.assert_array_equal(out, 2 * a)


def test_a_grid_of_zero_blocks_is_told_to_round_the_block_count_up(simulator):
    """`n // 256` blocks is 0 for n < 256: the advice is to round up (the beginner audit's
    student was told only to skip the launch, which returns memory never written)."""
    a = np.zeros(100, np.float32)
    with pytest.raises(sim.LaunchConfigError) as refused:
        vector_add[a.size // 256, 256](a, a, a)
    assert "every grid dimension must be >= 1, got (0,)" in str(refused.value)
    assert "round it up, (n + threads - 1) // threads" in str(refused.value), str(refused.value)


def test_a_python_list_or_string_argument_is_refused_at_the_launch_line(simulator):
    """numba types a list (a reflected list) but no kernel takes one: the launch is refused naming
    the kernel, the argument and the student's line, not with an error from inside the simulator."""
    a = np.zeros(4, np.float32)
    for value in ([1.0, 2.0, 3.0, 4.0], "abcd"):
        with pytest.raises(sim.LaunchConfigError) as refused:
            line = sys._getframe().f_lineno + 1
            vector_add[1, 4](a, value, a)
        assert f"kernel 'vector_add' launched at {__file__}:{line}: argument 'b' is a " \
               f"{type(value).__name__}, which cannot be passed to a GPU" in str(refused.value), str(refused.value)
        assert "np.array(...) makes an array of a list" in str(refused.value)
    # refused before the compile check, whose numba error would speak of memory allocation
    with sim.installed(compile_check=True):
        with pytest.raises(sim.LaunchConfigError, match="argument 'b' is a list, which cannot be passed to a GPU"):
            vector_add[1, 4](a, [1.0, 2.0, 3.0, 4.0], a)


def test_a_trace_keeps_what_it_is_told_of_each_launch(simulator):
    """`gpugrade run` keeps each launch's summary only: a loop of large launches held every launch's
    per-thread tables (16 MB a launch of 2^20 threads) until the script's end."""
    d = cuda.to_device(np.zeros(1024, np.float32))
    with sim.trace(keep=sim.LaunchRecord.summary) as kept, sim.trace() as records:
        vector_add[4, 256](d, d, d)
    assert isinstance(kept[0], dict) and "threads" not in kept[0] and kept[0]["kernel"] == "vector_add"
    assert kept[0] == records[0].summary()


def test_stream_and_shared_bytes_in_launch_config(simulator):
    s = cuda.stream()
    a = cuda.to_device(np.ones(64, np.float32))
    out = cuda.device_array(64, np.float32)
    vector_add[2, 32, s, 128](a, a, out)
    s.synchronize()
    assert (out.copy_to_host() == 2).all()


def test_is_available_while_installed():
    with sim.installed():
        assert cuda.is_available()


def test_module_globals_are_never_rebound(simulator):
    out = cuda.device_array(4, np.float32)
    vector_add[1, 4](out, out, out) if False else None
    assert vector_add.py_func.__globals__["cuda"] is cuda


def _snapshot():
    snap = {}
    for cls in patching.dispatcher_classes():
        snap[cls] = dict(cls.__dict__)
    snap["cuda"] = dict(vars(patching.cuda_module()))
    for cls in patching.dispatcher_classes():
        snap[cls.__module__] = dict(vars(sys.modules[cls.__module__]))
    return snap


def test_uninstall_restores_numba_exactly():
    before = _snapshot()
    sim.install(devices=2)
    assert patching.cuda_module().to_device is not before["cuda"]["to_device"]
    sim.uninstall()
    after = _snapshot()
    assert after.keys() == before.keys()
    for key in before:
        assert after[key] == before[key], key


def test_install_twice_then_uninstall_restores():
    before = _snapshot()
    sim.install()
    sim.install(devices=3)
    sim.uninstall()
    assert _snapshot() == before


def test_unconfigured_launch_still_errors(simulator):
    with pytest.raises(ValueError):
        vector_add[1](np.zeros(1))


def test_two_host_threads_launch_at_once(simulator):
    import threading

    results, errors = {}, []

    def work(k):
        try:
            a = np.full(3000, k, np.float32)
            results[k] = host_add(a, a)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (results[1] == 2).all() and (results[2] == 4).all()


def test_eagerly_typed_kernel_and_closure_device_function(simulator):
    @cuda.jit(device=True)
    def add_one(x):
        return x + 1

    @cuda.jit("void(float32[:], float32[:])")
    def typed(a, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = add_one(a[i])

    out = cuda.device_array(4, np.float32)
    typed[1, 4](cuda.to_device(np.ones(4, np.float32)), out)
    assert (out.copy_to_host() == 2).all()
