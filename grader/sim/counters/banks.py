"""Bank conflicts: shared memory has 32 banks of 4-byte words; a warp's request takes as many
wavefronts as the most distinct words it touches in one bank (lanes reading one word share
it). An 8-byte item covers two words, each counted in its own bank.

Four entry points, from general to fast: `wavefronts` (requests in any order, mixed item
sizes), `wavefronts_sorted` (request numbers 0..n-1, one item size), `wavefronts_rows` (one
request a row) and `wavefronts_lanes` (the ordered lanes of one SIMT instruction).
"""

from __future__ import annotations

import numpy as np

from ..geometry import WARP, Lanes

BANKS = 32
BANK_BYTES = 4
BANK_SHIFT = BANK_BYTES.bit_length() - 1  # x >> shift == x // BANK_BYTES (int64)


def wavefronts_lanes(lanes: Lanes, addr: np.ndarray, itemsize: int) -> int:
    """`wavefronts` of ordered lanes: one wavefront per request when each request's words lie
    within 32 consecutive words (so every word has a bank of its own)."""
    if lanes.n == 0:
        return 0
    word = addr >> BANK_SHIFT  # addr // BANK_BYTES
    extra = max(1, itemsize // BANK_BYTES) - 1
    if lanes.rows:
        m = word.reshape(-1, WARP)
        lo, hi = m.min(axis=1), m.max(axis=1)
    else:
        lo = np.minimum.reduceat(word, lanes.starts)
        hi = np.maximum.reduceat(word, lanes.starts)
    if int((hi - lo).max()) + extra < BANKS:
        return lanes.n_req
    return wavefronts_sorted(lanes.request_index(), lanes.n_req, addr, itemsize)


def wavefronts_rows(addr: np.ndarray, itemsize: int) -> int:
    """Shared-memory wavefronts of requests, one request per row of `addr` (..., lanes)."""
    rows = addr.reshape(-1, addr.shape[-1])
    words_per = max(1, itemsize // BANK_BYTES)
    word = rows // BANK_BYTES
    # a request whose words span fewer than BANKS words meets each bank at most once
    narrow = word.max(axis=1) - word.min(axis=1) + words_per <= BANKS
    wide = rows[~narrow]
    total = int(narrow.sum())
    if wide.shape[0]:
        req = np.repeat(np.arange(wide.shape[0]), wide.shape[1])
        total += wavefronts_sorted(req, wide.shape[0], wide.reshape(-1), itemsize)
    return total


def wavefronts_sorted(req: np.ndarray, n_req: int, addr: np.ndarray, itemsize: int) -> int:
    """`wavefronts` for request numbers 0..n_req-1, with a sort instead of hashing."""
    words_per = max(1, itemsize // BANK_BYTES)
    word = addr // BANK_BYTES
    wmin = int(word.min())
    span = int(word.max()) - wmin + words_per
    if span * n_req >= 1 << 62:
        return wavefronts(req, addr, itemsize)
    if words_per > 1:
        word = (word[:, None] + np.arange(words_per)).reshape(-1)
        req = np.repeat(req, words_per)
    key = req * span + (word - wmin)
    key.sort()
    u = key[np.r_[True, key[1:] != key[:-1]]]  # distinct (request, word)
    bank = (u // span) * BANKS + (u % span + wmin) % BANKS
    per_bank = np.bincount(bank, minlength=n_req * BANKS).reshape(n_req, BANKS)
    return int(per_bank.max(axis=1).sum())


def wavefronts(req: np.ndarray, addr: np.ndarray, itemsize) -> int:
    """Sum over requests of the most distinct 4-byte words in one bank (32 banks)."""
    itemsize = np.broadcast_to(np.asarray(itemsize, np.int64), addr.shape)
    words_per = np.maximum(1, itemsize // BANK_BYTES)
    reps = np.repeat(np.arange(addr.shape[0]), words_per)
    offs = np.arange(reps.shape[0]) - np.repeat(np.cumsum(words_per) - words_per, words_per)
    word = addr[reps] // BANK_BYTES + offs
    r = req[reps]
    r = r - r.min(initial=0)
    wmin = int(word.min())
    span = int(word.max()) - wmin + 1  # shared memory: at most 227 KiB of words
    uniq = np.unique(r * span + (word - wmin))  # distinct (request, word)
    u_req, u_word = uniq // span, uniq % span + wmin
    bank_key, per_bank = np.unique(u_req * BANKS + u_word % BANKS, return_counts=True)
    worst = np.zeros(int(u_req.max()) + 1, np.int64)
    np.maximum.at(worst, bank_key // BANKS, per_bank)
    return int(worst.sum())
