"""The correctness protocol the grading tests use: compare a student's output with the judge's
reference, with guards against the known ways a wrong output slips through a tolerance check."""

from __future__ import annotations

import numpy as np

from ..wire.parallel import spread

CHUNK = 1 << 18  # elements compared at a time, on a few threads, past which a comparison is split


class WrongAnswer(AssertionError):
    """A student's output is wrong; the message is what the student reads. `wrong`: for a
    matrix, where its wrong elements are (`wrong_mask`), for the feedback's picture."""

    def __init__(self, message: str, wrong: dict | None = None, right_prefix: int | None = None,
                 right_corner: tuple[int, int] | None = None, size: int | None = None):
        super().__init__(message)
        self.size = size  # the elements of a wrong vector (what its right prefix is out of)
        self.wrong = wrong
        # a vector whose wrong elements are exactly its end: how many from 0 are right; a matrix whose
        # right elements are exactly its first rows and columns: how many of each (what `short_grid`
        # compares with the launch's threads)
        self.right_prefix = right_prefix
        self.right_corner = right_corner


# the note on a vector wrong from some index to its end, when the launches are not known
STOPS_SHORT = " (the end of the array: a missed block, or a grid or bounds guard that stops short?)"
# the same for a matrix wrong in its last rows or columns (or both)
EDGE_MISSED = ": a missed tile or edge?"


# the most cells a side of the wrong-element picture has (a bigger matrix is coarsened)
MASK_CELLS = 64


def wrong_mask(bad: np.ndarray) -> dict:
    """A matrix's wrong elements, coarsened to at most MASK_CELLS cells a side (a cell is wrong
    when any element in it is): shape, cell (elements a cell covers per axis), rows ('#'/'.')."""
    rows, cols = bad.shape
    cell_r, cell_c = -(-rows // MASK_CELLS), -(-cols // MASK_CELLS)
    padded = np.zeros((-(-rows // cell_r) * cell_r, -(-cols // cell_c) * cell_c), bool)
    padded[:rows, :cols] = bad
    cells = padded.reshape(padded.shape[0] // cell_r, cell_r, -1, cell_c).any(axis=(1, 3))
    return {"shape": [int(rows), int(cols)], "cell": [int(cell_r), int(cell_c)],
            "rows": ["".join("#" if x else "." for x in row) for row in cells]}


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
        raise WrongAnswer(f"{what}: all zeros (never written, or only zeros written: a loop that never ran?)")
    if got.dtype.kind in "iub":
        bad = got != expected
    elif got.dtype.kind == "f" and got.size > CHUNK:  # (a GPU timing's answers: 2^24 elements a call)
        bad = np.empty(got.shape, bool)
        flat_got, flat_expected, flat_bad = got.reshape(-1), expected.reshape(-1), bad.reshape(-1)
        # a tolerance per element (a matrix product's grows with its terms) is cut like the arrays
        rtols, atols = (np.broadcast_to(t, got.shape).reshape(-1) if np.ndim(t) else t for t in (rtol, atol))

        def part(start: int) -> None:
            stop = start + CHUNK
            flat_bad[start:stop] = _beyond(flat_got[start:stop], flat_expected[start:stop],
                                           rtols[start:stop] if np.ndim(rtols) else rtols,
                                           atols[start:stop] if np.ndim(atols) else atols)

        spread(part, range(0, got.size, CHUNK))
    else:
        bad = _beyond(got, expected, rtol, atol)
    if np.any(bad):
        corner = _right_corner(bad)
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        index = first[0] if len(first) == 1 else first
        raise WrongAnswer(
            f"{what}: {int(np.count_nonzero(bad))} of {got.size} elements wrong; first at index {index}: "
            f"expected {_fmt(expected[first])}, got {_fmt(got[first])}{_where(bad, got, corner)}",
            wrong_mask(bad) if bad.ndim == 2 else None, _right_prefix(bad), corner, int(got.size),
        )


def _beyond(got: np.ndarray, expected: np.ndarray, rtol, atol) -> np.ndarray:
    """Which elements are beyond the tolerance (in float64), or not finite where the reference is."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        bad = ~(err <= atol + rtol * np.abs(expected.astype(np.float64))) & (got != expected)
    bad |= np.isfinite(expected) & ~np.isfinite(got)  # NaN never passes where a number is expected
    return bad


def _where(bad: np.ndarray, got: np.ndarray, corner: tuple[int, int] | None) -> str:
    """What the wrong elements have in common: never written (NaN: the simulator fills fresh
    device memory with NaN bytes), or the run of indices (a vector) or block of rows and columns
    (a matrix) they fill, or the last rows and columns past a right `corner` (`_right_corner`): a
    missed block, tile or edge shows as one."""
    notes = []
    if got.dtype.kind == "f" and np.all(np.isnan(got[bad])):
        notes.append("every wrong element is NaN: never written (the simulator fills fresh device memory with "
                     "NaN; on a GPU it holds whatever was there)")
    if bad.ndim == 1:
        at = np.flatnonzero(bad)
        i0, i1 = int(at[0]), int(at[-1])
        if 0 < at.size < bad.size and at.size == i1 - i0 + 1:
            span = f"the only wrong element is index {i0}" if i0 == i1 else f"the wrong elements are exactly indices {i0}..{i1}"
            # (the launches tell how many threads there were: proof.require_kernel_launch, short_grid)
            edge = STOPS_SHORT if i1 == bad.size - 1 else ""
            notes.append(span + edge)
    if bad.ndim == 2 and not bad.all():  # (every element wrong: the count says so)
        rows, cols = np.flatnonzero(bad.any(axis=1)), np.flatnonzero(bad.any(axis=0))
        r0, r1, c0, c1 = rows[0], rows[-1], cols[0], cols[-1]
        if bad[r0:r1 + 1, c0:c1 + 1].all() and bad.sum() == (r1 - r0 + 1) * (c1 - c0 + 1):
            shape = bad.shape
            edge = [side for side, hit in (("last rows", r1 == shape[0] - 1 and r0 > 0),
                                           ("last columns", c1 == shape[1] - 1 and c0 > 0)) if hit]
            notes.append(f"the wrong elements are exactly rows {r0}..{r1}, columns {c0}..{c1}"
                         + (f" (the {' and '.join(edge)}{EDGE_MISSED})" if edge else ""))
        elif corner is not None:  # the last rows and the last columns: an L
            notes.append(f"the right elements are exactly rows 0..{corner[0] - 1}, columns 0..{corner[1] - 1}; "
                         f"the last rows and columns are wrong{EDGE_MISSED}")
    return f" ({'; '.join(notes)})" if notes else ""


def _right_corner(bad: np.ndarray) -> tuple[int, int] | None:
    """(rows, columns) when the right elements of a matrix are exactly its first `rows` rows of its
    first `columns` columns, and some of its last rows or columns are wrong; else None."""
    if bad.ndim != 2 or bad.all() or not bad.any():
        return None
    rows_right, cols_right = ~bad.all(axis=1), ~bad.all(axis=0)  # (a row or column wholly wrong is past the corner)
    r = int(np.argmin(rows_right)) if not rows_right.all() else bad.shape[0]
    c = int(np.argmin(cols_right)) if not cols_right.all() else bad.shape[1]
    if r == 0 or c == 0 or bad[:r, :c].any() or not bad[r:, :].all() or not bad[:, c:].all():
        return None
    return r, c


def _right_prefix(bad: np.ndarray) -> int | None:
    if bad.ndim != 1 or not bad.any() or bad.all():
        return None
    i0 = int(np.argmax(bad))
    return i0 if bad[i0:].all() else None


def short_grid(wrong: WrongAnswer, launches: list[dict]) -> WrongAnswer:
    """`wrong` with its note on a wrong end of a vector told from the call's one launch: when the
    right elements are as many as its threads, the grid stops short (rounded down), or, as many
    as one block's, every block computes the first block's elements; of a matrix, when its right
    corner is as many rows and columns as a 2-D launch's threads reach. Unchanged otherwise."""
    if wrong.right_corner is not None:
        return _short_grid_2d(wrong, launches)
    right = wrong.right_prefix
    if right is None or len(launches) != 1 or STOPS_SHORT not in str(wrong):
        return wrong
    grid, block = launches[0].get("grid") or [], launches[0].get("block") or []
    if not grid or not block or any(int(d) != 1 for d in [*grid[1:], *block[1:]]):
        return wrong  # (a 1-D launch only: the threads of a 2-D one map to elements somehow)
    blocks, threads = int(grid[0]), int(block[0])
    if blocks * threads == right:
        note = (f" (the launch's {blocks} block{'s' if blocks != 1 else ''} of {threads} threads cover {right} elements, and exactly "
                f"those are right: round the block count up, (n + {threads} - 1) // {threads}, or loop with "
                f"a grid stride)")
    elif threads == right and blocks > 1:
        note = (f" (only the first {right} are right, as many as one block of {threads} threads computes: "
                f"does every block compute the first block's elements? the global index is cuda.grid(1), "
                f"blockIdx.x * blockDim.x + threadIdx.x)")
    elif wrong.size and blocks * threads >= wrong.size and wrong.size - right < threads:  # (a few past a guard)
        last = wrong.size - right
        note = (f" (the launch's {blocks} block{'s' if blocks != 1 else ''} of {threads} threads reach all "
                f"{wrong.size} elements, yet {f'the last {last} are' if last > 1 else 'the last one is'} wrong: "
                f"does a bounds guard or a loop's bound stop short of n? `if i < n:`, n the array's size, keeps "
                f"exactly the threads past the end out)")
    else:
        return wrong
    return WrongAnswer(str(wrong).replace(STOPS_SHORT, note, 1), wrong.wrong, right, None, wrong.size)


def _short_grid_2d(wrong: WrongAnswer, launches: list[dict]) -> WrongAnswer:
    """`short_grid` for a matrix: a one-thread-per-element 2-D launch (x counting columns, as
    cuda.grid(2) gives (x, y)) whose threads reach exactly the right corner: its grid is rounded
    down, or its x and y are swapped; or whose grid covers C but whose kernel takes the row from x."""
    if len(launches) != 1 or EDGE_MISSED not in str(wrong):
        return wrong
    grid, block = launches[0].get("grid") or [], launches[0].get("block") or []
    if len(grid) < 2 or len(block) < 2 or any(int(d) != 1 for d in [*grid[2:], *block[2:]]):
        return wrong
    (gx, gy), (bx, by) = (int(d) for d in grid[:2]), (int(d) for d in block[:2])
    rows, cols = wrong.wrong["shape"]
    if (wrong.right_corner == (min(gx * bx, rows), min(gy * by, cols)) and gx * bx >= cols and gy * by >= rows
            and wrong.right_corner != (rows, cols)):
        # the grid covers C, yet exactly as many rows as x reaches and columns as y reaches are right: a kernel
        # that takes its row from x (row, col = cuda.grid(2)), not a missed tile
        r, c = wrong.right_corner
        note = (f": the launch's {gx} x {gy} blocks of {bx} x {by} threads cover all {rows} x {cols} elements, yet "
                f"only rows 0..{r - 1} (as many as x reaches) and columns 0..{c - 1} (as many as y reaches) are "
                f"right: does the kernel take the row from x? cuda.grid(2) gives (x, y), x counting columns: "
                f"col, row = cuda.grid(2)")
        return WrongAnswer(str(wrong).replace(EDGE_MISSED, note, 1), wrong.wrong, None, wrong.right_corner)
    if wrong.right_corner != (min(gy * by, rows), min(gx * bx, cols)):
        return wrong
    fix = f"grid = ((N + {bx} - 1) // {bx}, (M + {by} - 1) // {by}) for an M x N output"
    why = (f"are the grid's x and y swapped? x counts the columns (N), y the rows (M): {fix}"
           if gx * bx >= rows and gy * by >= cols else f"round the block counts up: {fix}")
    note = (f": the launch's {gx} x {gy} blocks of {bx} x {by} threads reach {gy * by} rows and {gx * bx} columns "
            f"of the {rows} x {cols} output, x counting columns as cuda.grid(2) gives (x, y); {why}")
    return WrongAnswer(str(wrong).replace(EDGE_MISSED, note, 1), wrong.wrong, None, wrong.right_corner)


def expect_inputs_unchanged(call: str, given: dict[str, np.ndarray], after) -> None:
    """Raise WrongAnswer unless each input array is as it was passed: `given` maps each input's
    name to it as sent, `after` is them as the call left them, in the same order. The message
    names each changed input and its first changed element, so the student can find the store."""
    changed = []
    for (name, before), now in zip(given.items(), after):
        now = np.asarray(now)
        if now.shape != before.shape or now.dtype != before.dtype:
            changed.append(f"{name}: now {now.dtype}{list(now.shape)}, was {before.dtype}{list(before.shape)}")
            continue
        # (equal_nan: an input holding NaN on purpose is unchanged when its NaN are still there)
        diff = ~((now == before) | (np.isnan(now) & np.isnan(before))) if before.dtype.kind in "fc" else now != before
        if diff.any():
            first = tuple(int(i) for i in np.argwhere(diff)[0])
            index = first[0] if len(first) == 1 else ", ".join(map(str, first))
            changed.append(f"{name}: {int(np.count_nonzero(diff))} of {before.size} elements, first {name}[{index}]: "
                           f"was {_fmt(before[first])}, now {_fmt(now[first])}")
    if changed:
        raise WrongAnswer(f"{call} changed its input{'s' if len(changed) > 1 else ''} {' and '.join(changed)} "
                          f"(a kernel or the host wrote into it: inputs must only be read; write the result into "
                          f"an array of its own, e.g. cuda.device_array_like)")


def reduction_rtol(n: int, eps: float = float(np.finfo(np.float32).eps)) -> float:
    """Relative tolerance for a float32 sum of n terms: grows with sqrt(n) as rounding errors do."""
    return max(1e-5, 4 * eps * float(np.sqrt(max(n, 1))))
