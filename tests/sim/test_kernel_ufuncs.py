"""NumPy ufuncs inside kernels, as numba-cuda compiles them (grader/sim/ufuncs.py): with array
arguments element-wise over the output (broadcasting inputs, numba's loop types, each element a
load or store of the calling thread), on scalars as numba types them; a ufunc numba-cuda cannot
compile in a kernel is refused before anything runs. Both executors; lockstep runs them."""

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
from grader.sim.errors import CompileError


def _launch(kernel, grid, block, *args):
    with sim.trace() as records:
        kernel[grid, block](*args)
    return records[0]


def test_a_unary_ufunc_into_an_output_array(executor):
    @cuda.jit
    def kernel(x, out):
        np.sin(x, out)

    x = np.linspace(0, 3, 16).astype(np.float32)
    out = np.zeros_like(x)
    record = _launch(kernel, 1, 1, x, out)
    np.testing.assert_allclose(out, np.sin(x), rtol=1e-6)
    assert record.executor == executor
    assert record.counters["global_loads"] == 16 and record.counters["global_stores"] == 16


def test_a_binary_ufunc_returns_its_output_and_broadcasts(executor):
    @cuda.jit
    def kernel(a, row, out):
        r = np.arctan2(a, row, out)
        r[0, 0] = 7.0

    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    row = np.arange(1, 5, dtype=np.float64)
    out = np.zeros_like(a)
    _launch(kernel, 1, 1, a, row, out)
    expected = np.arctan2(a, row)
    expected[0, 0] = 7.0
    np.testing.assert_allclose(out, expected)


def test_loop_types_and_the_conversion_to_the_output(executor):
    """int32 inputs of sin take numba's float64 loop, the result stored as float32; a
    comparison with a scalar fills a boolean array."""
    @cuda.jit
    def kernel(ints, floats, half, flags):
        np.sin(ints, floats)
        np.less(floats, half, flags)

    ints = np.arange(-3, 5, dtype=np.int32)
    floats = np.zeros(8, np.float32)
    flags = np.zeros(8, np.bool_)
    _launch(kernel, 1, 1, ints, floats, 0.5, flags)
    np.testing.assert_array_equal(floats, np.sin(ints.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(flags, floats < 0.5)


def test_a_ufunc_over_shared_memory_per_block(executor):
    @cuda.jit
    def kernel(x, out):
        tile = cuda.shared.array(32, np.float32)
        i = cuda.threadIdx.x
        g = cuda.grid(1)
        tile[i] = x[g]
        cuda.syncthreads()
        if i == 0:
            np.cos(tile, tile)  # one thread transforms the whole tile
        cuda.syncthreads()
        out[g] = tile[i]

    x = np.linspace(0, 1, 64).astype(np.float32)
    out = np.zeros_like(x)
    record = _launch(kernel, 2, 32, x, out)
    np.testing.assert_allclose(out, np.cos(x), rtol=1e-6)
    assert record.executor == executor
    assert record.counters["shared_loads"] == 2 * (32 + 32)


@pytest.mark.filterwarnings("ignore:Passing more than 2 positional:DeprecationWarning")  # numpy
def test_every_thread_runs_the_whole_loop_so_a_shared_output_races(executor):
    """Threads writing one output array with different inputs: on a GPU the last writer
    wins, element by element."""
    @cuda.jit
    def kernel(x, out):
        i = cuda.grid(1)
        np.maximum(x, i, out)

    with pytest.raises(sim.RaceError):
        _launch(kernel, 1, 4, np.zeros(8, np.float32), np.zeros(8, np.float32))


def test_a_scalar_ufunc_numba_cuda_compiles(executor):
    @cuda.jit
    def kernel(x, out):
        i = cuda.grid(1)
        out[i] = np.maximum(x[i], np.float32(0.5)) + np.fmin(x[i], 0.25)

    x = np.linspace(0, 1, 32).astype(np.float32)
    out = np.zeros_like(x)
    record = _launch(kernel, 1, 32, x, out)
    np.testing.assert_allclose(out, np.maximum(x, 0.5) + np.fmin(x, 0.25), rtol=1e-6)
    assert record.executor == executor


@pytest.mark.parametrize("call, name, hint", [("np.sqrt(x[0])", "sqrt", "math.sqrt"),
                                              ("np.add(x, x, out)", "add", "operator \\+")])
def test_a_ufunc_numba_cuda_cannot_compile_is_refused(executor, call, name, hint, tmp_path):
    """numba types np.sqrt and np.add, but numba-cuda has no GPU implementation of them: the
    kernel would not compile, and nothing runs."""
    source = tmp_path / "kernel_with_ufunc.py"
    source.write_text(f"import numpy as np\n\ndef kernel(x, out):\n    out[0] = 1.0\n    {call}\n")
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    kernel = cuda.jit(namespace["kernel"])
    out = np.zeros(2, np.float32)
    with pytest.raises(CompileError, match=f"kernel_with_ufunc.py:5: np.{name} .*{hint}"):
        kernel[1, 1](np.ones(2, np.float32), out)
    assert out[0] == 0.0


@cuda.jit(device=True)
def _norm(x, y):
    return np.sqrt(x * x + y * y)  # numba-cuda has no GPU np.sqrt


def test_a_device_function_calling_such_a_ufunc_is_refused_at_its_line(executor):
    @cuda.jit
    def kernel(x, out):
        out[0] = _norm(x[0], x[1])

    with pytest.raises(CompileError, match=r"test_kernel_ufuncs.py:\d+: np.sqrt .*math.sqrt"):
        kernel[1, 1](np.ones(2, np.float32), np.zeros(1, np.float32))


def test_a_cuda_vectorize_ufunc_called_on_the_host_runs_its_kernel_lockstep():
    """`@vectorize(target="cuda")` launches a stager kernel numba-cuda writes from a template
    (no file holds it): its source is found again (grader/sim/generated_source.py)."""
    from numba import vectorize

    x = np.arange(100, dtype=np.float32)
    for executor in ("auto", "thread"):
        sim.install(executor=executor)
        try:
            @vectorize(["float32(float32, float32)"], target="cuda")  # compiles: needs a device
            def scaled_sum(a, b):
                return a + 2 * b

            with sim.trace() as records:
                got = scaled_sum(x, x[::-1].copy())
        finally:
            sim.uninstall()
        np.testing.assert_array_equal(got, x + 2 * x[::-1])
        assert records[0].executor == ("simt" if executor == "auto" else "thread")
        assert records[0].fallback_reason is None and records[0].typing_note is None
