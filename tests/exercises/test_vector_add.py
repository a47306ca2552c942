"""Grading tests for the vector_add exercise (run by `gpugrade`, never by a bare `pytest`).

Inputs are drawn from a secret per-run seed; the reference is computed here, in the judge.
"""

import numpy as np
import pytest

from grader.correctness import WrongAnswer, expect_close
from grader.judge import require_kernel_launch

# Sizes that are not a multiple of any block size: a missing bounds guard shows here.
EDGE_SIZES = [1, 31, 32, 33, 1000, 1025]
LARGE = 1 << 18


def _inputs(rng, n):
    return (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32))


def _check_add(student, backend, rng, n):
    a, b = _inputs(rng, n)
    result = student.call("vector_add", a, b)
    require_kernel_launch(result, backend)
    expect_close(result.value, a + b, rtol=1e-6, what=f"vector_add(a, b) with n={n}")
    if not (np.array_equal(result.args[0], a) and np.array_equal(result.args[1], b)):
        raise WrongAnswer(f"vector_add(a, b) with n={n} changed its inputs")


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
    _check_add(student, backend, rng, LARGE)


@pytest.mark.stage(1)
@pytest.mark.points(1)
def test_special_values(student, backend, rng):
    """Infinities and NaN propagate as IEEE arithmetic says (NaN never passes as a number)."""
    a, b = _inputs(rng, 300)
    a[:3] = [np.inf, -np.inf, np.nan]
    result = student.call("vector_add", a, b)
    require_kernel_launch(result, backend)
    expected = a + b
    got = result.value
    if not isinstance(got, np.ndarray) or got.shape != expected.shape:
        raise WrongAnswer(f"vector_add: expected an array of shape {expected.shape}")
    if not np.array_equal(np.isnan(got), np.isnan(expected)):
        raise WrongAnswer("vector_add: NaN where there should be none, or a missing NaN")
    finite = ~np.isnan(expected)
    expect_close(got[finite], expected[finite], rtol=1e-6, what="vector_add(a, b) with inf and nan inputs")
