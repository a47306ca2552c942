"""Grading tests for the vector_add exercise (run by `gpugrade`, never by a bare `pytest`).

Inputs are drawn from a secret per-run seed; the reference is computed here, in the judge.
"""

import numpy as np
import pytest

from grader.judge.correctness import WrongAnswer, expect_close, expect_inputs_unchanged
from grader.judge import Returns, require_kernel_launch
from grader.judge.grid import expect_one_grid, on_the_stock_grid
from grader.judge.perf import expect_gpu_speed, expect_performance

# Sizes that are not a multiple of any block size: a missing bounds guard shows here.
EDGE_SIZES = [1, 31, 32, 33, 1000, 1025]
LARGE = 1 << 18
STOCK_LARGE = 1 << 14                   # on numba's stock simulator (the gpu path without a GPU): still 64 blocks
GPU_PERF_N = 1 << 24                    # on a GPU: big enough to time the kernels, not the launch


def _timed_on_the_gpu(student, reference, stage_spec, rng, function, n, alpha=None):
    """A performance test on a GPU: the student's kernels timed against the reference's on the
    same inputs (outputs re-checked), the stage's speed threshold on the medians."""
    size = min(n, 4096) if student.stock_simulator else GPU_PERF_N  # the stock simulator is slow
    pairs = [_inputs(rng, size) for _ in range(2)]
    if alpha is None:
        sets = pairs
        check = lambda args, out: expect_close(out, args[0] + args[1], rtol=1e-6, what=f"{function}, timed")  # noqa: E731
    else:
        sets = [(float(alpha), x, y) for x, y in pairs]
        check = lambda args, out: expect_close(out, (np.float32(args[0]) * args[1] + args[2]).astype(np.float32),  # noqa: E731
                                               rtol=1e-5, atol=1e-6, what=f"{function}, timed")
    expect_gpu_speed(student, reference, stage_spec, function, sets, check, bytes_moved=12.0 * size,
                     returns=Returns((size,), np.dtype(np.float32)))


def _inputs(rng, n):
    return (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32))


def _check_add(student, backend, rng, n, inputs=None):
    a, b = inputs or _inputs(rng, n)
    result = student.call("vector_add", a, b, returns=Returns.like(a))
    what = f"vector_add(a, b) with n={n}"
    # (the check judges the answer first, then the data flow and the replay)
    require_kernel_launch(result, backend, check=lambda args, out: expect_close(out, args[0] + args[1], rtol=1e-6,
                                                                                what=what))
    expect_inputs_unchanged(what, {"a": a, "b": b}, result.args)
    return result


@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", EDGE_SIZES, ids=[f"n={n}" for n in EDGE_SIZES])
def test_edge_sizes(student, backend, rng, n):
    """Every element is computed, and no thread touches memory past the end."""
    _check_add(student, backend, rng, n)


@pytest.mark.stage(1)
@pytest.mark.points(2)
def test_large(student, backend, rng):
    """A size with many blocks of many warps."""
    _check_add(student, backend, rng, STOCK_LARGE if student.stock_simulator else LARGE)


@pytest.mark.stage(1)
@pytest.mark.points(2)
@pytest.mark.perf
def test_keeps_up_with_the_reference(student, reference, stage_spec, backend, rng):
    """The time is within the stage's threshold of the reference's: on the simulator the modelled
    time at full load (a kernel doing more work per element, or several launches, is slower), on
    a GPU the measured time."""
    if backend != "sim":
        return _timed_on_the_gpu(student, reference, stage_spec, rng, "vector_add", LARGE)
    a, b = _inputs(rng, LARGE)
    result = _check_add(student, backend, rng, LARGE, (a, b))
    expect_performance(stage_spec, result.launches, reference.call("vector_add", a, b).launches)


@pytest.mark.stage(1)
@pytest.mark.points(1)
def test_special_values(student, backend, rng):
    """Infinities and NaN propagate as IEEE arithmetic says (NaN never passes as a number)."""
    a, b = _inputs(rng, 300)
    a[:3] = [np.inf, -np.inf, np.nan]
    result = student.call("vector_add", a, b, returns=Returns.like(a))
    require_kernel_launch(result, backend, check=lambda args, got: _expect_ieee_sum(got, *args))
    expect_inputs_unchanged("vector_add(a, b) with inf and nan inputs", {"a": a, "b": b}, result.args)


def _expect_ieee_sum(got, a, b):
    expected = a + b
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        raise WrongAnswer(f"vector_add: expected an array of shape {expected.shape}")
    if not np.array_equal(np.isnan(got), np.isnan(expected)):
        i = int(np.flatnonzero(np.isnan(got) != np.isnan(expected))[0])
        raise WrongAnswer(f"vector_add: at index {i} expected {expected[i]} ({a[i]} + {b[i]}), got {got[i]}"
                          + (" (NaN where the inputs are numbers: never written?)" if np.isnan(got[i]) else ""))
    finite = ~np.isnan(expected)
    expect_close(got[finite], expected[finite], rtol=1e-6, what="vector_add(a, b) with inf and nan inputs")


# -- stage 2: grid-stride loop on a grid sized for the GPU---------------------------------------------
GRID_THREADS = 8 * 132 * 256            # grid_blocks() x THREADS_PER_BLOCK on the simulator's 132 SMs
MANY = 2 * GRID_THREADS + 7             # past the grid twice over (a wrong stride loops n / 256 times a thread)
STRIDE_SIZES = [1, 33, 1025, GRID_THREADS, MANY]


def _check_grid_stride(student, backend, rng, n):
    if student.stock_simulator:  # its grid is 16 blocks: n as far past it
        n = on_the_stock_grid(n, GRID_THREADS)
    a, b = _inputs(rng, n)
    result = student.call("vector_add_grid_stride", a, b, returns=Returns.like(a))
    what = f"vector_add_grid_stride(a, b) with n={n}"
    require_kernel_launch(result, backend, check=lambda args, out: expect_close(out, args[0] + args[1], rtol=1e-6,
                                                                                what=what))
    return result


@pytest.mark.stage(2)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", STRIDE_SIZES, ids=[f"n={n}" for n in STRIDE_SIZES])
def test_grid_stride_sizes(student, backend, rng, n):
    """Every element is computed, for sizes below, at and over twice the grid size."""
    _check_grid_stride(student, backend, rng, n)


@pytest.mark.stage(2)
@pytest.mark.points(1)
def test_grid_stride_uses_a_fixed_grid(student, backend, rng):
    """The launch configuration does not depend on n: the loop, not the grid, covers the data."""
    small = _check_grid_stride(student, backend, rng, 100)
    large = _check_grid_stride(student, backend, rng, MANY)
    expect_one_grid({100: small.launches, len(large.sent[0]): large.launches})  # (the simulator's, beside a GPU)


@pytest.mark.stage(2)
@pytest.mark.points(2)
@pytest.mark.perf
def test_grid_stride_is_coalesced(student, reference, stage_spec, backend, rng):
    """Neighbouring threads touch neighbouring elements (sectors per request, on the simulator; beside
    the GPU on a GPU machine), then the speed threshold: the modelled time on the simulator, the
    measured time on a GPU, against the reference's."""
    got = _check_grid_stride(student, backend, rng, MANY)
    a, b = got.sent
    expect_performance(stage_spec, got.launches, reference.call("vector_add_grid_stride", a, b).launches,
                       modelled=backend == "sim")
    if backend != "sim":
        _timed_on_the_gpu(student, reference, stage_spec, rng, "vector_add_grid_stride", MANY)


# -- stage 3: in-place SAXPY -----------------------------------------------------------------
SAXPY_SIZES = [1, 33, 1025, 40000]


def _check_saxpy(student, backend, rng, n):
    x, y = _inputs(rng, n)
    alpha = np.float32(rng.uniform(0.5, 2.0))
    result = student.call("saxpy_inplace", float(alpha), x, y, returns=Returns.like(y))

    def check(args, answers):  # what it returned and y after the call (y told first)
        want = (np.float32(args[0]) * args[1] + args[2]).astype(np.float32)
        returned, y_after = answers
        expect_close(y_after, want, rtol=1e-5, atol=1e-6, what=f"y after saxpy_inplace(alpha, x, y) with n={n}")
        expect_close(returned, want, rtol=1e-5, atol=1e-6, what=f"the array saxpy_inplace returned (n={n})")

    require_kernel_launch(result, backend, output=[result.value, result.args[2]], check=check)
    expect_inputs_unchanged(f"saxpy_inplace(alpha, x, y) with n={n}", {"x": x}, result.args[1:2])  # (y is the output)
    return result, (float(alpha), x, y)


@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", SAXPY_SIZES, ids=[f"n={n}" for n in SAXPY_SIZES])
def test_saxpy_sizes(student, backend, rng, n):
    """y <- alpha * x + y, left in the caller's y, for sizes that are not a multiple of the block."""
    _check_saxpy(student, backend, rng, n)


@pytest.mark.stage(3)
@pytest.mark.points(2)
@pytest.mark.perf
def test_saxpy_moves_the_fewest_bytes(student, reference, stage_spec, backend, rng):
    """No more global loads and stores than the reference, all coalesced (the simulator's counters,
    beside the GPU on a GPU machine), then the speed threshold: the modelled time on the simulator,
    the measured time on a GPU, against the reference's."""
    result, args = _check_saxpy(student, backend, rng, 40000)
    expect_performance(stage_spec, result.launches, reference.call("saxpy_inplace", *args).launches,
                       modelled=backend == "sim")
    if backend != "sim":
        _timed_on_the_gpu(student, reference, stage_spec, rng, "saxpy_inplace", 40000, alpha=1.5)
