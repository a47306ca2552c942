"""One int64 key per row of several integer columns: numpy's `unique` and `sort` take one
vector, and grouping by (request, sector) or (thread, site, line) is what the counters do."""

from __future__ import annotations

import numpy as np


def combine(*cols: np.ndarray) -> np.ndarray:
    """One int64 key per row of several non-negative int columns (dense re-coding first when
    the plain product of ranges could overflow)."""
    key = np.zeros(cols[0].shape[0], np.int64)
    span = 1
    for col in cols:
        col = col - col.min(initial=0)
        hi = int(col.max(initial=0)) + 1
        if span * hi >= 1 << 62:
            col = np.unique(col, return_inverse=True)[1].reshape(-1)
            key = np.unique(key, return_inverse=True)[1].reshape(-1)
            span, hi = int(key.max(initial=0)) + 1, int(col.max(initial=0)) + 1
        key = key * hi + col
        span *= hi
    return key
