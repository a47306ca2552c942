"""Coalescing: a warp's request to global memory costs one transaction per distinct 32-byte
sector its lanes touch (32 consecutive float32s: 4 sectors; a stride of 32 bytes or more: 32)."""

from __future__ import annotations

import numpy as np

from ..geometry import WARP, Lanes
from .row_keys import combine

SECTOR_BYTES = 32
SECTOR_SHIFT = SECTOR_BYTES.bit_length() - 1  # x >> shift == x // SECTOR_BYTES (int64)


def sectors_of_requests(req: np.ndarray, addr: np.ndarray) -> int:
    """Sectors of requests in any order: distinct (request number, sector of byte address)."""
    return int(np.unique(combine(req, addr // SECTOR_BYTES)).shape[0])


def sectors_of_rows(addr: np.ndarray) -> int:
    """Sectors of requests given one a row (the last axis of `addr`, byte addresses)."""
    s = np.sort(addr // SECTOR_BYTES, axis=-1)
    return int((1 + (s[..., 1:] != s[..., :-1]).sum(-1)).sum())


def distinct_per_request(lanes: Lanes, key: np.ndarray) -> int:
    """Sum over the requests (warps) of ordered lanes of the number of distinct `key` values."""
    n = lanes.n
    if n == 0:
        return 0
    if lanes.rows:
        # np.diff(m, axis=1) with m = key.reshape(-1, WARP), as one contiguous difference
        # whose pairs across rows are zeroed (a zero changes neither test nor count)
        d = key[1:] - key[:-1]
        d[WARP - 1::WARP] = 0
        if int(d.min(initial=0)) < 0:
            d = np.diff(np.sort(key.reshape(-1, WARP), axis=1), axis=1)
        return lanes.n_req + int(np.count_nonzero(d))
    d = key[1:] - key[:-1]
    inner = np.ones(n - 1, bool)
    inner[lanes.starts[1:] - 1] = False  # pairs of lanes within one request
    if not (d[inner] < 0).any():
        return lanes.n_req + int(np.count_nonzero(d[inner]))
    k = key - key.min()
    span = int(k.max()) + 1
    if span * lanes.n_req >= 1 << 62:
        return int(np.unique(combine(lanes.request_index(), key)).shape[0])
    k = lanes.request_index() * span + k
    k.sort()
    return 1 + int(np.count_nonzero(k[1:] != k[:-1]))
