"""Silent stores: the stores the race rule (races.py) leaves out.

A plain store of the bits its element already holds (bitwise: -0.0 over 0.0, or another NaN
payload, is a change; an element never written since allocation holds garbage and is never
silent) changes nothing a thread can observe, so it is no access for the race rule: it
conflicts with no load and no store, and the shadow stays as it was (the previous writer stays
the last writer). Counters and initialised flags count it as any store. Executors pass what
they store (`access(..., values=)`, `access1(..., value=)`, the store recorders' `value`); the
comparison runs only with the race checker on. Lanes of one store instruction on one element
count as sequential stores: storing one value, the first changes the element and the others are
silent; storing different values is a race. The rule judges silence against memory at the
simulated moment, so it can hide a race that another interleaving would expose: a silent store
unordered with the element's last writer (it could land first, changing what earlier loads
see), or a later store of another value ordered after the last writer but not after the silent
store (the silent store could land after it). Atomics are the exception: the last silent store of
each element is kept, and an atomic nothing orders after it is a race (an accumulator reset in
the kernel that adds into it, over memory the host zeroed: a block may add before the reset).
"""

from __future__ import annotations

import numpy as np

_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # itemsize -> unsigned type


def same_bits1(store: np.ndarray, flat: int, value) -> bool:
    """Does storing `value` at `store[flat]` (cast as the store casts it) leave its bits as
    they are? False when the cast fails (the store itself then reports it)."""
    tmp = np.empty(1, store.dtype)
    try:
        with np.errstate(all="ignore"):  # the store itself warns about a bad cast
            tmp[0] = value
    except Exception:
        return False
    return tmp.tobytes() == store[flat:flat + 1].tobytes()


def same_bits_recorder(store: np.ndarray):
    """`same_bits1` for one store, bound once: `same(flat, value)`, comparing the bits as
    Python ints through memoryviews where the item size allows."""
    u = _BITS.get(store.dtype.itemsize)
    if u is None or store.ndim != 1 or not store.flags.c_contiguous:
        return lambda flat, value: same_bits1(store, flat, value)
    tmp = np.empty(1, store.dtype)
    tmp_bits, bits = memoryview(tmp.view(u)), memoryview(store.view(u))
    quiet_cast = store.dtype.kind in "iub"  # a float cast to an integer may warn: the store
    # warns, not this check

    def same(flat, value):
        try:
            if quiet_cast and isinstance(value, np.floating):
                with np.errstate(all="ignore"):
                    tmp[0] = value
            else:
                tmp[0] = value
        except Exception:
            return False
        return tmp_bits[0] == bits[flat]
    return same


def quiet_lanes(handle, flat: np.ndarray, values, dups) -> np.ndarray | None:
    """The lanes of one store instruction that are not accesses for the race checker, or None
    when there are none: a lane storing the bits its (initialised) element already holds, and,
    where several lanes store one value to one element, every lane of that group but the last
    (sequentially, the first stores and the others are silent; the last is the one whose store
    lands, kept unless its value is already there). A group storing different values keeps all
    its lanes: that is a race. `dups`: `races.duplicate_lanes` of the lanes (None for one lane)."""
    store = handle.flat
    n = flat.shape[0]
    try:
        if isinstance(values, np.ndarray) and values.ndim:
            if values.shape != (n,):
                return None
            if values.dtype == store.dtype:
                new = values
            else:
                with np.errstate(all="ignore"):  # the store itself warns about a bad cast
                    new = values.astype(store.dtype)
        else:
            new = np.empty((), store.dtype)
            with np.errstate(all="ignore"):
                new[()] = values
    except Exception:  # the store itself reports it
        return None
    f0 = int(flat[0])
    if n > 1 and int(flat[-1]) - f0 == n - 1 and bool((np.diff(flat) == 1).all()):
        old = store[f0:f0 + n]  # one run of elements (`out[i] = ...`): a view, no gather
    else:
        old = store[flat]
    u = _BITS.get(store.dtype.itemsize)
    if u is not None:
        old_bits, new_bits = old.view(u), new.view(u)
    else:  # compare byte rows
        old_bits = old.view(np.uint8).reshape(n, -1)
        new_bits = new.reshape(-1).view(np.uint8).reshape(-1, store.dtype.itemsize)
    eq = old_bits == new_bits
    if eq.ndim > 1:
        eq = eq.all(axis=1)
    pair = dups[0] if dups is not None else None
    if pair is None:
        if not eq.any():
            return None
        eq = eq & handle.initialised[flat]
        return eq if eq.any() else None
    eq = np.broadcast_to(eq, (n,)) & handle.initialised[flat]
    # groups of lanes on one element, in element order (stable: lane order within a group)
    idx = np.flatnonzero(dups[1])
    order = idx[np.argsort(flat[idx], kind="stable")]
    fs = flat[order]
    same = fs[1:] == fs[:-1]
    gid = np.concatenate((np.zeros(1, np.int64), np.cumsum(~same)))
    vs = np.broadcast_to(new_bits, (n,) + new_bits.shape[1:])[order]
    differ = vs[1:] != vs[:-1]
    if differ.ndim > 1:
        differ = differ.any(axis=1)
    mixed = np.zeros(int(gid[-1]) + 1, bool)
    mixed[gid[1:][same & differ]] = True
    quiet = eq.copy()
    quiet[order] = ~mixed[gid] & (np.append(same, False) | eq[order])
    return quiet if quiet.any() else None
