"""Bounds: kernel indices to flat positions in `handle.flat`, each checked. A negative index is
reported too: numba's compiled code wraps it around once, as Python does (`a[-1]` is the last
element: it adds the dimension's length to a negative signed index), CUDA C would address memory
before the array; either way it is almost always a missing guard, and the message says both. An
out-of-bounds lane is reported and, when `Checks` downgrades the finding to a warning,
redirected to element 0 so memory stays safe.

Three entry points: `index` (vector lanes), `index_lanes` (the SIMT executor: reuses the check
of an index pattern seen before, access_patterns.py) and `index1` (one lane, Python ints).
"""

from __future__ import annotations

import numpy as np

from ..access_patterns import PATTERNS, Pattern, pattern_key
from ..errors import OutOfBoundsError, SimError, where
from ..geometry import Lanes

# index dtype -> (unsigned view, largest dimension for which negative values still fail the
# unsigned comparison `i >= dim`)
_UNSIGNED = {np.dtype(t): (np.dtype(u), limit) for t, u, limit in (
    (np.int64, np.uint64, 1 << 63), (np.int32, np.uint32, 1 << 31), (np.int16, np.uint16, 1 << 15),
    (np.int8, np.uint8, 1 << 7), (np.uint32, np.uint32, 1 << 64), (np.uint16, np.uint16, 1 << 64),
    (np.uint8, np.uint8, 1 << 64))}


class BoundsChecks:
    """Mixin of `memory.Instrument` (reads kernel, filename; reports through `_fail`)."""

    def _init_bounds(self) -> None:
        # access patterns seen before, and the pattern of the last `index_lanes` result
        # (`access` takes it when given that result)
        self._patterns: dict = {}
        self._last = None

    def _ndim_error(self, handle, idx, line, filename) -> SimError:
        return SimError(f"{where(self.kernel, filename or self.filename, line)}: array "
                        f"{handle.name!r} has {len(handle.shape)} dimensions, indexed with "
                        f"{len(idx)}")

    def index(self, space, handle, idx, block, thread, line, filename=None) -> np.ndarray:
        """Flat positions in `handle.flat` of the lanes' indices; raises OutOfBoundsError."""
        block = np.asarray(block, np.int64)
        n = block.shape[0]
        if len(idx) != len(handle.shape):
            raise self._ndim_error(handle, idx, line, filename)
        part = _vector_part(handle, idx, n)
        if part is None:  # some lane out of bounds (or an unusual index type): the full check
            return self._index_checked(space, handle, idx, block, thread, line, filename)
        flat, base = part
        if flat is None:
            flat = np.full(n, base, np.int64)
        elif base:
            flat += base
        if space == "shared":
            flat += (block - handle.first_block) * handle.block_stride
        return flat

    def index_lanes(self, space, handle, idx, lanes: Lanes, line, filename=None) -> np.ndarray:
        """`index` for the SIMT executor: vectors in `idx` cover every lane of the batch (the
        active ones, `lanes.act`, are taken here). A pattern of index vectors seen before (same
        objects, same lanes) reuses its bounds check and counters; scalar parts are checked on
        every access. Pass the result and `lanes` to `access`."""
        shape = handle.shape
        if len(idx) != len(shape):
            raise self._ndim_error(handle, idx, line, filename)
        hit = self._pattern_hit(handle, idx, lanes)
        if hit is not None:
            pat, base = hit
            flat = pat.vec_flat + base
            self._last = (flat, pat, base)
            return flat
        self._last = None
        act = lanes.act
        sub = idx if act is None else tuple(
            i[act] if isinstance(i, np.ndarray) and i.ndim else i for i in idx)
        part = _vector_part(handle, sub, lanes.n)
        if part is None:
            return self._index_checked(space, handle, sub, lanes.block, lanes.thread, line,
                                       filename)
        vec, base = part
        if vec is None:
            vec = np.zeros(lanes.n, np.int64)
        vec_flat = vec + lanes.block_offset(handle) if space == "shared" else vec
        flat = vec_flat + base
        pat = Pattern((handle, lanes) + tuple(idx), vec_flat, vec, tuple(
            (p, dim, st) for p, (i, dim, st) in enumerate(zip(idx, shape, handle.estrides))
            if not (isinstance(i, np.ndarray) and i.ndim)))
        pat.nonneg = min(handle.estrides, default=0) >= 0
        key = pattern_key(handle, lanes, idx)
        if all(not (isinstance(i, np.ndarray) and i.ndim) or i.base is None for i in idx):
            for i in idx:  # the key holds their ids: they must not change while cached
                if isinstance(i, np.ndarray) and i.ndim:
                    i.flags.writeable = False
            if len(self._patterns) >= PATTERNS:
                del self._patterns[next(iter(self._patterns))]
            self._patterns[key] = pat
        self._last = (flat, pat, base)
        return flat

    def _pattern_hit(self, handle, idx, lanes):
        """(pattern, base) when `idx` is a pattern seen before whose scalar parts are in
        bounds (`base`: the offset plus those parts times their strides), else None."""
        pat = self._patterns.get(pattern_key(handle, lanes, idx))
        if pat is None:
            return None
        base = handle.offset
        for p, dim, st in pat.scalars:
            i = int(idx[p])
            if not 0 <= i < dim:
                return None
            base += i * st
        return pat, base

    def _index_checked(self, space, handle, idx, block, thread, line, filename) -> np.ndarray:
        """`index` lane by lane in numpy: reports the first out-of-bounds lane."""
        block = np.asarray(block, np.int64)
        n = block.shape[0]
        shape = handle.shape
        flat = np.full(n, handle.offset, np.int64)
        bad = np.zeros(n, bool)
        for k, (i, dim, st) in enumerate(zip(idx, shape, handle.estrides)):
            i = np.broadcast_to(np.asarray(i).astype(np.int64, copy=False), (n,))
            bad |= (i < 0) | (i >= dim)
            flat += i * st
        if bad.any():
            lane = int(np.argmax(bad))
            index = tuple(int(np.broadcast_to(np.asarray(i), (n,))[lane]) for i in idx)
            self._oob(handle, space, index, int(block[lane]), int(np.asarray(thread)[lane]),
                      line, filename)
            flat = np.where(bad, handle.offset, flat)  # downgraded: keep memory safe
        if space == "shared":
            flat += (block - handle.first_block) * handle.block_stride
        return flat

    def index1(self, space, handle, idx, block: int, thread: int, line: int,
               filename=None) -> int:
        """Scalar twin of `index` for one lane; `idx` a tuple of ints (a slice in it raises
        TypeError, which callers use to take the view path)."""
        shape = handle.shape
        if len(idx) != len(shape):
            raise self._ndim_error(handle, idx, line, filename)
        if len(idx) == 1:
            i = idx[0]
            if not 0 <= i < shape[0]:
                self._oob(handle, space, (int(i),), block, thread, line, filename)
                return handle.offset
            flat = handle.offset + i * handle.estrides[0]
        else:
            flat = handle.offset
            for i, dim, st in zip(idx, shape, handle.estrides):
                if not 0 <= i < dim:
                    self._oob(handle, space, tuple(int(v) for v in idx), block, thread, line,
                              filename)
                    return handle.offset
                flat += i * st
        if space == "shared":
            flat += (block - handle.first_block) * handle.block_stride
        return int(flat)

    def _oob(self, handle, space, index, block, thread, line, filename):
        shape = tuple(handle.shape)
        idx = index[0] if len(index) == 1 else index
        self._fail(OutOfBoundsError,
                   f"out-of-bounds access to {space} array {handle.name!r} of shape "
                   f"{shape if len(shape) > 1 else shape[0]} at index {idx}"
                   f"{negative_note(index, shape)}{dynamic_note(handle)}",
                   block, thread, line, filename, handle.name, index)


def dynamic_note(handle) -> str:
    """Where a dynamic shared array's length comes from (empty for other arrays)."""
    memory = getattr(handle, "memory", None)
    if memory is None:
        return ""
    return (f" (a dynamic shared array holds as many items as the launch's dynamic shared "
            f"memory, {memory.block_bytes} bytes here: `kernel[grid, block, stream, bytes]`)")


def negative_note(index, shape) -> str:
    """What a GPU does with the negative parts of an index (empty when there are none): numba
    adds the dimension's length once (arrayobj.fix_integer_index), CUDA C does not."""
    if not any(i < 0 for i in index):
        return ""
    wrapped = tuple(int(i) + int(d) if i < 0 else int(i) for i, d in zip(index, shape))
    if any(not 0 <= w < int(d) for w, d in zip(wrapped, shape)):
        numba = ("numba wraps a negative index around once (adding the length), which still "
                 "lands outside the array")
    else:
        at = wrapped[0] if len(wrapped) == 1 else wrapped
        numba = (f"numba wraps a negative index around as Python does, so this accesses "
                 f"element {at} instead")
    return (f": {numba}; CUDA C would access memory before the array; guard the index "
            f"(e.g. `if i > 0:` before using `i - 1`)")


def _vector_part(handle, idx, n: int):
    """(sum of the vector indices times their strides as a fresh int64 vector, or None when
    every index is a scalar; offset plus the scalar indices times their strides), or None when
    some index is out of bounds or not a plain integer (the caller then runs the full check)."""
    base = handle.offset
    vec = None
    for i, dim, st in zip(idx, handle.shape, handle.estrides):
        if isinstance(i, np.ndarray) and i.ndim:
            kind = _UNSIGNED.get(i.dtype)
            if kind is None or i.shape != (n,):
                return None
            unsigned, limit = kind
            if dim > limit:  # negative values would not wrap past the bound
                return None
            if n and int(i.view(unsigned).max()) >= dim:  # negative -> huge: one test
                return None
            if vec is None:
                vec = i.astype(np.int64) if st == 1 else np.multiply(i, st, dtype=np.int64)
            elif st == 1:
                vec += i
            else:
                vec += np.multiply(i, st, dtype=np.int64)
        else:
            try:
                i = int(i)
            except (TypeError, ValueError):
                return None
            if not 0 <= i < dim:
                return None
            base += i * st
    return vec, base
