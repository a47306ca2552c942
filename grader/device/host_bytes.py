"""What the host wrote into device memory, element by element, and what of it is still there.

The data flow follows allocations (`server.Device.sources`): memory a kernel writes counts as
computed from what that kernel read. Alone, that launders a host-computed answer: upload it, let
a kernel rewrite one element from the inputs, and the whole array would count as the kernel's.
So the device keeps, per allocation, a copy of the elements the host wrote and the uploads that
wrote them, and the simulator flags every element a kernel stores to (`Allocation.stored`,
cleared here where the host writes again); a download then says how many of its elements still
hold those bytes with no kernel's store since (`carried`). A kernel that stores the very value
the host had put there has still computed it: the flags, not the bytes, say so. The judge decides
what that means (grader/judge/dataflow.py).

Also here: `is_neutral`, an upload that carries no answer (an accumulator's start value
everywhere, random number states).
"""

from __future__ import annotations

import weakref

import numpy as np


class _Shadow:
    """The host's bytes for one allocation: its elements as the host last wrote them, which
    of them it wrote, and the uploads that did."""

    __slots__ = ("items", "mask", "uploads", "shape", "written")

    def __init__(self, shape=None):
        self.shape = shape  # (shape, order) the allocation was made with, when known
        self.items: np.ndarray | None = None  # made at the host's first write; meaningful where `mask`
        self.mask: np.ndarray | None = None
        self.uploads: set[int] = set()
        self.written = 0  # about how many elements `mask` holds (exact, or more with repeated indices)


def region(flat: np.ndarray, array) -> np.ndarray:
    """The elements of `flat` (an allocation-sized array) that the handle `array` views."""
    return np.lib.stride_tricks.as_strided(flat[array.offset:], array.shape,
                                           tuple(e * flat.itemsize for e in array.estrides))


class HostBytes:
    """Per allocation (held weakly: freed with it), the host's bytes (see module doc)."""

    def __init__(self):
        self._shadows: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def allocated(self, array) -> None:
        """`array` is a new allocation, whole: its shape is what an upload assembled from
        pieces is compared in."""
        self._shadows[array._alloc] = _Shadow(
            (array.shape, "F" if array.is_f_contiguous() and not array.is_c_contiguous() else "C"))

    def assembled(self, array) -> np.ndarray | None:
        """The allocation of `array` as it was made (its shape), when the host wrote every one of
        its elements and no kernel changed any: an array uploaded in pieces, whole again."""
        shadow = self._shadows.get(array._alloc)
        if shadow is None or shadow.shape is None or shadow.mask is None or shadow.written < shadow.mask.size:
            return None  # (most partial writes: told without a pass over the allocation)
        if not shadow.mask.all():
            shadow.written = int(np.count_nonzero(shadow.mask))
            return None
        store = array._alloc.store
        if array._alloc.stored.any() or carried_elements(shadow.items, store) != store.size:
            return None
        shape, order = shadow.shape
        return store.reshape(shape, order=order)

    def pieces(self, array) -> tuple[tuple[int, ...], str, frozenset[int]] | None:
        """(the shape and order the allocation of `array` was made with, the uploads that wrote
        it), for an array `assembled` says is whole again."""
        shadow = self._shadows.get(array._alloc)
        if shadow is None or shadow.shape is None:
            return None
        return shadow.shape[0], shadow.shape[1], frozenset(shadow.uploads)

    def _of(self, array, create: bool = False) -> _Shadow | None:
        alloc = array._alloc
        if array.dtype != alloc.store.dtype:
            return None
        shadow = self._shadows.get(alloc)
        if create:
            if shadow is None:
                shadow = self._shadows[alloc] = _Shadow()
            if shadow.items is None:
                shadow.items, shadow.mask = np.empty_like(alloc.store), np.zeros(alloc.store.shape, bool)
            if alloc.stored is None:  # the simulator flags kernels' stores from now on
                alloc.stored = np.zeros(alloc.store.shape, bool)
        return shadow if shadow is not None and shadow.items is not None else None

    def host_wrote(self, array, upload: int, key=None) -> None:
        """The host wrote `array` (or `array[key]`) with upload number `upload`."""
        shadow = self._of(array, create=True)
        if shadow is None:
            return
        key = ... if key is None else key
        region(shadow.items, array)[key] = array._view[key]
        mask = region(shadow.mask, array)
        before = int(np.count_nonzero(mask[key]))
        mask[key] = True
        region(array._alloc.stored, array)[key] = False  # the host's bytes again, no kernel's
        shadow.written += int(np.count_nonzero(mask[key])) - before
        shadow.uploads.add(upload)

    def device_copied(self, target, source, key=None) -> None:
        """`target` (or `target[key]`) now holds a copy of `source` (device to device): the
        host's bytes in `source` (those no kernel stored over since) travel with it, and what
        the copy overwrote is no longer the host's."""
        theirs = self._of(source)
        mine = self._of(target, create=theirs is not None)
        if mine is None:
            return
        key = ... if key is None else key
        if theirs is None:  # a copy of memory the host never wrote
            region(mine.mask, target)[key] = False
            return
        items = region(theirs.items, source).copy()
        mask = region(theirs.mask, source) & ~region(source._alloc.stored, source)
        try:
            if key is ...:
                items, mask = items.reshape(target.shape), mask.reshape(target.shape)
            region(mine.items, target)[key] = items
            region(mine.mask, target)[key] = mask
            region(target._alloc.stored, target)[key] = False
        except ValueError:  # shapes numpy cannot line up: stop following this allocation
            self._shadows.pop(target._alloc, None)
            return
        mine.uploads |= theirs.uploads
        mine.written = int(np.count_nonzero(mine.mask))

    def carried(self, array, key=None) -> tuple[np.ndarray | None, list[int]]:
        """(which elements of `array` (or `array[key]`) still hold the host's bytes, no kernel
        having stored to them since, as a flag per element in C order, or None where none do;
        the uploads that wrote them)."""
        shadow = self._of(array)
        if shadow is None:
            return None, []
        key = ... if key is None else key
        mask = region(shadow.mask, array)[key] & ~region(array._alloc.stored, array)[key]
        if not mask.any():
            return None, []
        items = region(shadow.items, array)[key]
        same = carried_mask(np.asarray(items), np.asarray(array._view[key]), np.asarray(mask))
        return (same, sorted(shadow.uploads)) if same.any() else (None, [])


def carried_elements(before: np.ndarray, after: np.ndarray, mask: np.ndarray | None = None) -> int:
    """How many elements of `after` hold exactly the bytes of `before` (where `mask`)."""
    return int(carried_mask(before, after, mask).sum())


def carried_mask(before: np.ndarray, after: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Which elements of `after` hold exactly the bytes of `before` (where `mask`): a flag per
    element, in C order."""
    if before.size == 0 or before.shape != after.shape or before.dtype != after.dtype:
        return np.zeros(after.size, bool)
    width = before.dtype.itemsize
    if width in (1, 2, 4, 8):  # bytes compared as one unsigned integer per element (NaN == NaN)
        as_int = np.dtype(f"u{width}")
        same = np.ascontiguousarray(before).view(as_int).reshape(-1) == np.ascontiguousarray(after).view(as_int).reshape(-1)
    else:
        same = (np.ascontiguousarray(before).view(np.uint8).reshape(-1, width)
                == np.ascontiguousarray(after).view(np.uint8).reshape(-1, width)).all(axis=1)
    if mask is not None:
        same &= mask.reshape(-1)
    return same


def is_neutral(data: np.ndarray) -> bool:
    """Data that carries no answer: every element one value an accumulator starts from (0, 1,
    -1, +-inf, NaN, the type's largest or smallest; a bool array: any one value), or the states
    of numba's random number generators (`create_xoroshiro128p_states`, made on the host: each a
    fixed jump from the one before, so only the first, a seed, is free)."""
    flat = np.asarray(data).reshape(-1)
    if flat.size == 0:
        return True
    if flat.dtype.names is not None:
        return _random_states(flat)
    if flat.dtype.kind not in "biufc":
        return False
    first = flat[0]
    if flat[-1] != first and not (flat.dtype.kind in "fc" and np.isnan(first) and np.isnan(flat[-1])):
        return False  # most uploads: told at once
    if flat.dtype.kind in "fc" and np.isnan(first):
        uniform = bool(np.isnan(flat).all())
    else:
        uniform = bool((flat == first).all())
    if not uniform or flat.dtype.kind == "b":
        return uniform
    if flat.dtype.kind in "fc":
        value = complex(first)
        real = value.real
        return value.imag == 0 and (real != real or real in (0.0, 1.0, -1.0, float("inf"), float("-inf"))
                                    or abs(real) == float(np.finfo(flat.dtype).max))
    info = np.iinfo(flat.dtype)
    return int(first) in (0, 1, -1, info.min, info.max)


def _random_states(flat: np.ndarray) -> bool:
    from numba.cuda.random import xoroshiro128p_dtype

    if flat.dtype != xoroshiro128p_dtype:
        return False
    chain = flat.copy()
    _jump_chain(chain)
    return bool(np.array_equal(chain, flat))


def _jump_chain(states: np.ndarray) -> None:
    """states[i] = states[i - 1] jumped 2**64 steps, for i >= 1 (what numba's host init does)."""
    global _jump_chain
    from numba import njit
    from numba.cuda.random import xoroshiro128p_jump

    @njit(cache=False)
    def chain(states):
        for i in range(1, states.shape[0]):
            states[i] = states[i - 1]
            xoroshiro128p_jump(states, i)

    _jump_chain = chain  # compiled once per process
    chain(states)
