"""Grading tests for the matmul exercise (run by `gpugrade`, never by a bare `pytest`).

Inputs are drawn from a secret per-run seed; the reference product is computed here, in the judge,
in float64. Performance tests compare the simulator's counters with the reference solution's on
the same input (criteria in course.toml) and count only when the stage's correctness tests pass.
"""

import numpy as np
import pytest

from grader.judge.correctness import expect_close
from grader.judge import Returns, require_kernel_launch
from grader.judge.perf import expect_performance

# (M, K, N): degenerate, one exact tile, odd sizes that are not multiples of 16 or 32 in any
# dimension, K a multiple of 16 but not of 32, non-square both ways.
SHAPES = [(1, 1, 1), (16, 16, 16), (33, 17, 65), (64, 48, 40), (70, 37, 50)]
PERF_SHAPE = (64, 80, 96)  # many blocks of many warps for every stage


def _ids(shapes):
    return [f"{m}x{k}x{n}" for m, k, n in shapes]


def _inputs(rng, m, k, n):
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


def _check(student, backend, rng, function, shape):
    A, B = _inputs(rng, *shape)
    result = student.call(function, A, B, returns=Returns((A.shape[0], B.shape[1]), np.dtype(np.float32)))
    require_kernel_launch(result, backend)
    expected = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    # float32 GEMM: rounding grows with K and with the magnitude of the terms, not of the sum
    scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    expect_close(result.value, expected, rtol=1e-5, atol=1e-5 * scale + 1e-6,
                 what=f"{function}(A, B) with A {A.shape}, B {B.shape}")
    return result, (A, B)


def _perf(student, reference, stage_spec, backend, rng, function):
    if backend != "sim":
        pytest.skip("performance on a real GPU is not graded by this version of gpugrade; the simulator backend grades it")
    result, args = _check(student, backend, rng, function, PERF_SHAPE)
    expect_performance(stage_spec, result.launches, reference.call(function, *args).launches)


# -- stage 1: naive ---------------------------------------------------------------------------
@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_naive(student, backend, rng, shape):
    """One thread per element of C, for any M, K, N."""
    _check(student, backend, rng, "matmul_naive", shape)


@pytest.mark.stage(1)
@pytest.mark.points(2)
@pytest.mark.perf
def test_naive_is_coalesced(student, reference, stage_spec, backend, rng):
    """On the simulator: a warp reads a row of B and writes a row of C (sectors per request)."""
    _perf(student, reference, stage_spec, backend, rng, "matmul_naive")


# -- stage 2: shared-memory tiles -------------------------------------------------------------
@pytest.mark.stage(2)
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_tiled(student, backend, rng, shape):
    """Tiles of A and B in shared memory, any M, K, N (partial tiles padded with zeros)."""
    _check(student, backend, rng, "matmul_tiled", shape)


@pytest.mark.stage(2)
@pytest.mark.points(3)
@pytest.mark.perf
def test_tiled_reuses_shared_memory(student, reference, stage_spec, backend, rng):
    """On the simulator: global loads about 1/TILE of the naive kernel's, no bank conflicts."""
    _perf(student, reference, stage_spec, backend, rng, "matmul_tiled")


# -- stage 3: coarsening, register blocking ---------------------------------------------------
@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_coarsened(student, backend, rng, shape):
    """COARSE outputs per thread from BIG_TILE x BIG_TILE tiles, any M, K, N."""
    _check(student, backend, rng, "matmul_coarsened", shape)


@pytest.mark.stage(3)
@pytest.mark.points(3)
@pytest.mark.perf
def test_coarsened_reuses_registers_without_bank_conflicts(student, reference, stage_spec, backend, rng):
    """On the simulator: fewer global and shared loads than tiling, every shared access conflict-free."""
    _perf(student, reference, stage_spec, backend, rng, "matmul_coarsened")
