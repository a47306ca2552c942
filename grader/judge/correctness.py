"""The correctness protocol the grading tests use: compare a student's output with the judge's
reference, with guards against the known ways a wrong output slips through a tolerance check."""

from __future__ import annotations

import numpy as np


class WrongAnswer(AssertionError):
    """A student's output is wrong; the message is what the student reads."""


def _fmt(x) -> str:
    return np.format_float_positional(x, precision=7, trim="-") if isinstance(x, (float, np.floating)) else repr(x)


def expect_close(got, expected: np.ndarray, *, rtol: float = 1e-5, atol: float = 0.0, what: str = "output") -> None:
    """Raise WrongAnswer unless `got` matches `expected` elementwise within tolerance.

    Never passes NaN or infinity where the reference is finite, a wrong shape or dtype, or an
    all-zero/untouched output when the reference is not all zero (atol alone would let it pass).
    """
    expected = np.asarray(expected)
    if not isinstance(got, np.ndarray):
        raise WrongAnswer(f"{what}: expected a NumPy array of shape {expected.shape}, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise WrongAnswer(f"{what}: shape {got.shape}, expected {expected.shape}")
    if got.dtype != expected.dtype:
        raise WrongAnswer(f"{what}: dtype {got.dtype}, expected {expected.dtype}")
    if got.size and np.any(expected != 0) and not np.any(got != 0):
        raise WrongAnswer(f"{what}: all zeros (was it ever written?)")
    if got.dtype.kind in "iub":
        bad = got != expected
    else:
        finite = np.isfinite(expected)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
            bad = ~(err <= atol + rtol * np.abs(expected.astype(np.float64))) & (got != expected)
        bad |= finite & ~np.isfinite(got)  # NaN never passes where a number is expected
    if np.any(bad):
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        index = first[0] if len(first) == 1 else first
        raise WrongAnswer(
            f"{what}: {int(np.count_nonzero(bad))} of {got.size} elements wrong; first at index {index}: "
            f"expected {_fmt(expected[first])}, got {_fmt(got[first])}{_where(bad, got)}"
        )


def _where(bad: np.ndarray, got: np.ndarray) -> str:
    """What the wrong elements have in common: never written (NaN: the simulator fills fresh
    device memory with NaN bytes), or, for a matrix, the block of rows and columns they fill
    (a missed tile or edge shows as one)."""
    notes = []
    if got.dtype.kind == "f" and np.all(np.isnan(got[bad])):
        notes.append("every wrong element is NaN: never written (the simulator fills fresh device memory with "
                     "NaN; on a GPU it holds whatever was there)")
    if bad.ndim == 2:
        rows, cols = np.flatnonzero(bad.any(axis=1)), np.flatnonzero(bad.any(axis=0))
        r0, r1, c0, c1 = rows[0], rows[-1], cols[0], cols[-1]
        if bad[r0:r1 + 1, c0:c1 + 1].all() and bad.sum() == (r1 - r0 + 1) * (c1 - c0 + 1):
            shape = bad.shape
            edge = [side for side, hit in (("last rows", r1 == shape[0] - 1 and r0 > 0),
                                           ("last columns", c1 == shape[1] - 1 and c0 > 0)) if hit]
            notes.append(f"the wrong elements are exactly rows {r0}..{r1}, columns {c0}..{c1}"
                         + (f" (the {' and '.join(edge)}: a missed tile or edge?)" if edge else ""))
    return f" ({'; '.join(notes)})" if notes else ""


def reduction_rtol(n: int, eps: float = float(np.finfo(np.float32).eps)) -> float:
    """Relative tolerance for a float32 sum of n terms: grows with sqrt(n) as rounding errors do."""
    return max(1e-5, 4 * eps * float(np.sqrt(max(n, 1))))
