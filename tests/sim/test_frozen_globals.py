"""Global and closure values are constants of a kernel's compile, as numba freezes them
(grader/sim/frozen.py): arrays read-only in constant memory, captured at the first launch of
each argument-type signature (at decoration for a declared signature), per function."""

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
from grader.sim.errors import CompileError

TABLE = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
GRID = np.arange(12, dtype=np.float32).reshape(3, 4)
WEIGHTS = (0.25, 0.5, 0.75)
SCALE = 2


@pytest.fixture
def table():
    saved = TABLE.copy()
    yield TABLE
    TABLE[:] = saved


def test_a_global_array_is_frozen_at_the_first_launch(executor, table):
    @cuda.jit
    def kernel(out):
        i = cuda.grid(1)
        out[i] = TABLE[i]

    out = np.zeros(4, np.float32)
    with sim.trace() as records:
        kernel[1, 4](out)
        table[0] = 50.0  # too late: numba compiled the kernel with the old contents
        kernel[1, 4](out)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    assert [r.executor for r in records] == [executor] * 2


def test_a_new_signature_compiles_with_the_values_of_its_moment(executor, table):
    @cuda.jit
    def kernel(out):
        out[0] = TABLE[0]

    out32, out64 = np.zeros(1, np.float32), np.zeros(1, np.float64)
    kernel[1, 1](out32)
    table[0] = 50.0
    kernel[1, 1](out32)
    kernel[1, 1](out64)  # float64 output: another specialization, compiled now
    assert out32[0] == 1.0 and out64[0] == 50.0


def test_a_closure_array_is_frozen_too(executor):
    def make():
        coeffs = np.array([10, 20], np.int32)

        @cuda.jit
        def kernel(out):
            out[0] = coeffs[1]
        return kernel, coeffs

    kernel, coeffs = make()
    out = np.zeros(1, np.int32)
    kernel[1, 1](out)
    coeffs[1] = 99
    kernel[1, 1](out)
    assert out[0] == 20


def test_a_device_function_freezes_at_its_own_first_compile(executor, table):
    @cuda.jit(device=True)
    def lookup(i):
        return TABLE[i] * SCALE

    @cuda.jit
    def first(out):
        out[0] = lookup(1)

    @cuda.jit
    def second(out):
        out[0] = lookup(1)

    out = np.zeros(1, np.float32)
    first[1, 1](out)
    table[1] = 50.0
    second[1, 1](out)  # another kernel, the same device-function compile
    assert out[0] == 4.0


def test_a_declared_signature_freezes_at_decoration(executor, table):
    kernel = cuda.jit("void(float32[:])")(_copy_table)
    table[2] = 50.0  # after the compile at decoration
    out = np.zeros(4, np.float32)
    kernel[1, 4](out)
    assert out[2] == 3.0


def _copy_table(out):
    i = cuda.grid(1)
    out[i] = TABLE[i]


def test_a_store_into_a_global_array_does_not_compile(executor, table):
    @cuda.jit
    def kernel(out):
        TABLE[0] = 7.0
        out[0] = TABLE[0]

    with pytest.raises(CompileError, match="readonly array"):
        kernel[1, 1](np.zeros(1, np.float32))
    assert table[0] == 1.0


def test_reading_past_a_global_array_is_out_of_bounds(executor):
    @cuda.jit
    def kernel(out):
        i = cuda.grid(1)
        out[i] = TABLE[i + 1]

    with pytest.raises(sim.OutOfBoundsError, match="'TABLE' of shape 4 at index 4"):
        kernel[1, 4](np.zeros(4, np.float32))


def test_global_tables_index_per_lane(executor):
    """A 2-D global array, a global tuple of numbers and cuda.const.array_like of a global,
    indexed by each thread: lockstep runs them itself."""
    @cuda.jit
    def kernel(out):
        i = cuda.grid(1)
        c = cuda.const.array_like(GRID)
        out[i] = GRID[i % 3, i % 4] + WEIGHTS[i % 3] + c[i % 3][i % 4]

    out = np.zeros(12, np.float32)
    with sim.trace() as records:
        kernel[1, 12](out)
    i = np.arange(12)
    expected = 2 * GRID[i % 3, i % 4] + np.array(WEIGHTS, np.float32)[i % 3]
    np.testing.assert_allclose(out, expected)
    assert records[0].executor == executor


def test_a_view_of_a_global_array_falls_back_with_its_reason():
    sim.install(executor="auto")
    try:
        @cuda.jit
        def kernel(out):
            i = cuda.grid(1)
            row = GRID[1]
            out[i] = row[i]

        out = np.zeros(4, np.float32)
        with sim.trace() as records:
            kernel[1, 4](out)
    finally:
        sim.uninstall()
    np.testing.assert_array_equal(out, GRID[1])
    assert records[0].executor == "thread"
    assert "partial indexing" in records[0].fallback_reason


def test_an_array_of_another_module_is_frozen_too(executor, tmp_path, monkeypatch):
    """`tables.WEIGHTS[i]`: numba resolves the attribute at compile time and freezes the array."""
    import importlib
    import sys

    (tmp_path / "frozen_tables_mod.py").write_text(
        "import numpy as np\nWEIGHTS = np.array([1.0, 2.0, 3.0], np.float32)\n")
    (tmp_path / "frozen_kernels_mod.py").write_text(
        "from numba import cuda\nimport frozen_tables_mod as tables\n\n\n"
        "@cuda.jit(device=True)\ndef weight(i):\n    return tables.WEIGHTS[i]\n\n\n"
        "@cuda.jit\ndef kernel(out):\n    i = cuda.grid(1)\n"
        "    out[i] = tables.WEIGHTS[i] + weight(i)\n\n\n"
        "@cuda.jit\ndef past_the_end(out):\n    out[0] = tables.WEIGHTS[3]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        kernels = importlib.import_module("frozen_kernels_mod")
        out = np.zeros(3, np.float32)
        kernels.kernel[1, 3](out)
        kernels.tables.WEIGHTS[:] = 100.0
        kernels.kernel[1, 3](out)
        np.testing.assert_array_equal(out, [2, 4, 6])
        with pytest.raises(sim.OutOfBoundsError, match="'tables.WEIGHTS' of shape 3 at index 3"):
            kernels.past_the_end[1, 1](out)
    finally:
        sys.modules.pop("frozen_tables_mod", None)
        sys.modules.pop("frozen_kernels_mod", None)
