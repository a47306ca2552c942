"""Access patterns of the SIMT path: the index vectors of an access seen before in a launch.

A loop body indexes with the same vector objects over and over (`a[row, k]`: `row` one vector,
`k` a scalar), so the vector part of the flat positions is bounds-checked once and kept with
what the checkers and counters derive from it (sectors and wavefronts per alignment class,
lanes sharing an element, the gather's repetition); only scalar parts are checked per access.
"""

from __future__ import annotations

import numpy as np

PATTERNS = 32  # patterns kept per launch (each holds a few vectors over the lanes)


class Pattern:
    """An access pattern seen before: the vector part of the flat positions (the lanes' index
    vectors, bounds-checked once; scalar index parts are added per access) and its counters per
    alignment class."""

    __slots__ = ("refs", "vec_flat", "vec_within", "counted", "dups", "scalars", "nonneg",
                 "squeezed")

    def __init__(self, refs, vec_flat, vec_within, scalars=()):
        self.refs, self.vec_flat, self.vec_within = refs, vec_flat, vec_within
        self.counted: dict = {}
        self.dups = None  # races.duplicate_lanes
        self.scalars = scalars  # (position in the index, dimension, stride) of each scalar part
        self.nonneg = False  # every vec_flat entry >= 0 (no negative stride)
        self.squeezed = None  # squeeze(vec_flat), made on the pattern's first reuse


def pattern_key(handle, lanes, idx) -> tuple:
    """The key of an index among the patterns: the handle, the lanes, and each vector part by
    id (None for a scalar part)."""
    if len(idx) == 2:
        i, j = idx
        return (id(handle), id(lanes), id(i) if isinstance(i, np.ndarray) and i.ndim else None,
                id(j) if isinstance(j, np.ndarray) and j.ndim else None)
    if len(idx) == 1:
        i = idx[0]
        return (id(handle), id(lanes), id(i) if isinstance(i, np.ndarray) and i.ndim else None)
    return (id(handle), id(lanes)) + tuple(
        id(i) if isinstance(i, np.ndarray) and i.ndim else None for i in idx)


def squeeze(vec: np.ndarray):
    """(positions of shape (a, 1, c), the shape (a, r, c)) when `vec.reshape(a, r, c)` repeats
    its first row along axis 1 (r > 1: a tile row read by every row of threads, a tile column
    by every column, a global row by several blocks); else False. Then `vec`'s gather is the
    small one broadcast to (a, r, c)."""
    n = vec.shape[0]
    if n < 256:
        return False
    hits = np.flatnonzero(vec[1:] == vec[0])
    if hits.shape[0] == 0:
        return False
    c = int(hits[0]) + 1  # the period of the start
    differ = np.flatnonzero(vec[c:] != vec[:-c])
    rc = int(differ[0]) + c if differ.shape[0] else n  # how long the start repeats
    if rc % c or n % rc or rc // c < 2:
        return False
    m = vec.reshape(-1, rc // c, c)
    first = m[:, :1, :]
    if not (m == first).all():
        return False
    return np.ascontiguousarray(first), m.shape
