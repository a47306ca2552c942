"""CPU-jitted helpers called from kernels, records, and numba.cuda.random on the simulator.

numba-cuda compiles a `@numba.jit` / `@njit` function that a kernel calls as a device function
of the kernel (`CUDATypingContext.resolve_value_type`); numba.cuda.random is written that way,
on arrays of records (`states[i]["s0"]`, a reference to the element). Each test runs under
both executors; the lockstep one must run these kernels itself (no fallback)."""

import numba
import numpy as np
import pytest
from numba import cuda
from numba.cuda import random as nbrandom
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float32

import grader.sim as sim
from grader.sim import patching


@numba.njit
def _scaled(x, i, factor):
    return x[i] * factor


@numba.jit(nopython=True)
def _doubled_sum(x, i):
    return _scaled(x, i, 2) + _scaled(x, i, 1)  # a helper calling another


def test_a_jit_helper_with_an_array_argument_is_a_device_function(executor):
    @cuda.jit
    def kernel(a, b):
        i = cuda.grid(1)
        if i < a.size:
            b[i] = _doubled_sum(a, i)

    a = np.arange(40, dtype=np.float32)
    b = np.zeros_like(a)
    with sim.trace() as records:
        kernel[2, 32](a, b)
    np.testing.assert_array_equal(b, 3 * a)
    assert records[0].executor == executor
    assert records[0].counters["global_loads"] == 2 * 40  # the helper's loads are the thread's


def test_typing_a_kernel_leaves_no_stand_in_overload_on_the_helper(executor):
    """numba-cuda caches the device twin of a CPU-jitted function on it: what typing compiles
    there for the stand-in device is removed after, as for a @cuda.jit device function."""
    @cuda.jit
    def kernel(a, b):
        b[0] = _doubled_sum(a, 0)

    kernel[1, 1](np.ones(2, np.float32), np.zeros(1, np.float32))
    for helper in (_doubled_sum, _scaled):
        twin = patching._compiled_for(helper)
        assert twin is not None and not twin.overloads


_PAIR = np.dtype([("x", np.float32), ("n", np.int32)], align=True)


def test_record_fields_are_read_and_written_through_the_element(executor):
    @cuda.jit
    def kernel(a, out):
        i = cuda.grid(1)
        if i < a.size:
            a[i]["x"] = a[i]["x"] * 2
            a[i].n += 1
            out[i] = a[i].x + a[i]["n"]

    a = np.zeros(40, _PAIR)
    a["x"], a["n"] = np.arange(40), 3
    out = np.zeros(40, np.float32)
    with sim.trace() as records:
        kernel[2, 32](a, out)
    np.testing.assert_array_equal(a["x"], 2 * np.arange(40))
    np.testing.assert_array_equal(a["n"], 4)
    np.testing.assert_array_equal(out, 2 * np.arange(40) + 4)
    assert records[0].executor == executor
    assert records[0].counters["global_loads"] == 4 * 40
    assert records[0].counters["global_stores"] == 3 * 40


# ---------------------------------------------------------------- numba.cuda.random
@cuda.jit
def _draw(states, u32, n32, u64, n64):
    i = cuda.grid(1)
    if i < u32.size:
        u32[i] = nbrandom.xoroshiro128p_uniform_float32(states, i)
        n32[i] = nbrandom.xoroshiro128p_normal_float32(states, i)
        u64[i] = nbrandom.xoroshiro128p_uniform_float64(states, i)
        n64[i] = nbrandom.xoroshiro128p_normal_float64(states, i)


def test_numba_cuda_random_gives_numbas_own_sequence(executor):
    """The states made on the host, then drawn from in a kernel: the values of numba's own
    algorithm (its functions run on the CPU as plain numba code), the states advanced alike.
    Uniform draws are exact; normal ones go through float32 log/cos, which differ in the last
    bit between libm, numpy and a GPU's libdevice."""
    n = 50
    states = nbrandom.create_xoroshiro128p_states(n, seed=7)
    reference = states.copy_to_host()
    outs = [cuda.device_array(n, t) for t in (np.float32, np.float32, np.float64, np.float64)]
    with sim.trace() as records:
        _draw[2, 32](states, *outs)
    assert records[0].executor == executor
    expected = [np.zeros(n, o.dtype) for o in outs]
    draws = (nbrandom.xoroshiro128p_uniform_float32, nbrandom.xoroshiro128p_normal_float32,
             nbrandom.xoroshiro128p_uniform_float64, nbrandom.xoroshiro128p_normal_float64)
    for i in range(n):
        for column, draw in zip(expected, draws):
            column[i] = draw(reference, i)
    got = [o.copy_to_host() for o in outs]
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[2], expected[2])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[3], expected[3], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(states.copy_to_host(), reference)
    assert 0 <= got[0].min() and got[0].max() < 1 and len(set(got[0].tolist())) == n


def test_every_thread_drawing_from_one_state_is_a_race(executor):
    """A classic mistake: all threads advance states[0]; on a GPU they read and write the same
    generator concurrently (repeated or lost draws)."""
    @cuda.jit
    def kernel(states, out):
        i = cuda.grid(1)
        out[i] = nbrandom.xoroshiro128p_uniform_float32(states, 0)

    states = nbrandom.create_xoroshiro128p_states(64, seed=1)
    with pytest.raises(sim.RaceError, match="'states' at index 0") as found:
        kernel[2, 32](states, cuda.device_array(64, np.float32))
    # the student's line that called numba's generator, not a line of numba's random.py
    line = kernel.py_func.__code__.co_firstlineno + 3
    assert (found.value.filename, found.value.line) == (__file__, line)
    assert f"{__file__}:{line}" in str(found.value) and "(in random.py:" in str(found.value)


def test_a_monte_carlo_estimate_of_pi(executor):
    @cuda.jit
    def hits(states, iterations, out):
        i = cuda.grid(1)
        inside = 0
        for _ in range(iterations):
            x = xoroshiro128p_uniform_float32(states, i)  # imported by name
            y = xoroshiro128p_uniform_float32(states, i)
            if x * x + y * y <= 1.0:
                inside += 1
        out[i] = 4.0 * inside / iterations

    states = create_xoroshiro128p_states(256, seed=42)
    out = np.zeros(256, np.float32)
    hits[4, 64](states, 100, out)
    assert abs(out.mean() - np.pi) < 0.05


def test_cuda_random_as_an_attribute_of_cuda(executor):
    import numba.cuda.random  # noqa: F401 - makes cuda.random an attribute of numba.cuda

    @cuda.jit
    def kernel(states, out):
        i = cuda.grid(1)
        out[i] = cuda.random.xoroshiro128p_uniform_float32(states, i)

    states = cuda.random.create_xoroshiro128p_states(32, seed=2)
    reference = states.copy_to_host()
    out = np.zeros(32, np.float32)
    kernel[1, 32](states, out)
    expected = [nbrandom.xoroshiro128p_uniform_float32(reference, i) for i in range(32)]
    np.testing.assert_array_equal(out, np.array(expected, np.float32))


def test_a_numba_type_called_as_a_conversion_wraps_like_c(executor):
    """numba.cuda.random converts with numba's types (`uint64(seed)`); on a GPU that is a C
    conversion: -1 becomes 2**64 - 1 (numba's type objects called in Python would refuse it)."""
    from numba.cuda import int32, uint64

    @cuda.jit
    def kernel(x, out, small):
        out[0] = uint64(x)
        small[0] = int32(x * 4294967297)  # wraps to the low 32 bits

    out, small = np.zeros(1, np.uint64), np.zeros(1, np.int32)
    kernel[1, 1](-1, out, small)
    assert out[0] == np.uint64(2**64 - 1) and small[0] == -1


def test_a_record_held_in_a_local_is_a_reference():
    """`r = a[i]` is a reference to the element in numba: writing r's fields writes the array.
    The per-thread executor models it; lockstep falls back, saying why."""
    @cuda.jit
    def kernel(a, out):
        i = cuda.grid(1)
        r = a[i]
        r["x"] = r["x"] * 2
        r.n += 1
        out[i] = r.x + r["n"]

    a = np.zeros(40, _PAIR)
    a["x"], a["n"] = np.arange(40), 3
    out = np.zeros(40, np.float32)
    sim.install(executor="auto")
    try:
        with sim.trace() as records:
            kernel[2, 20](a, out)
    finally:
        sim.uninstall()
    np.testing.assert_array_equal(a["x"], 2 * np.arange(40))
    np.testing.assert_array_equal(a["n"], 4)
    np.testing.assert_array_equal(out, 2 * np.arange(40) + 4)
    assert records[0].executor == "thread"
    assert "record element held in a local variable ('r')" in records[0].fallback_reason


def test_device_functions_reached_through_a_module_attribute(executor, tmp_path, monkeypatch):
    """`helpers.f(x)`: numba compiles f as the kernel's device function (the per-thread
    executor called the dispatcher itself, which asked for a launch configuration)."""
    import importlib
    import sys

    (tmp_path / "kernel_helpers_mod.py").write_text(
        "import numba\nfrom numba import cuda\n\n\n@cuda.jit(device=True)\ndef plus_one(x):\n"
        "    return x + 1\n\n\n@numba.njit\ndef twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("kernel_helpers_mod")
    try:
        @cuda.jit
        def kernel(a):
            i = cuda.grid(1)
            a[i] = helpers.twice(helpers.plus_one(a[i]))

        a = np.arange(8, dtype=np.float32)
        kernel[1, 8](a)
    finally:
        sys.modules.pop("kernel_helpers_mod", None)
    np.testing.assert_array_equal(a, 2 * (np.arange(8) + 1))


_multiply = cuda.declare_device("multiply_f32", "float32(float32, float32)")


@cuda.jit(device=True)
def _squared(x):
    return _multiply(x, x)


@cuda.jit
def _calls_a_foreign_function(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = _squared(a[i])


def test_a_foreign_function_is_refused_by_name_at_the_launch_line(executor):
    """`cuda.declare_device` declares CUDA C or PTX that numba links in: nothing the simulator
    can run (a bare TypeError from deep inside the executor before)."""
    a = cuda.to_device(np.ones(4, np.float32))
    with pytest.raises(sim.NotSimulatedError, match=r"launched at .*test_jit_helpers.py:\d+: it calls "
                                                      r"'multiply_f32', declared with cuda.declare_device"):
        _calls_a_foreign_function[1, 32](a)
