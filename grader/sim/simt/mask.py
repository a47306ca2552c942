"""The active-mask stack: which lanes of the batch execute the current statement.

A level is `None` (every lane of the batch: the fast path, no masking at all) or a bool vector.
Levels are never mutated in place, so a condition vector can become a level without a copy.

Layout of the stack: a frame per function call (`Frame.base` is its entry level); `if` pushes one
level; a loop pushes two: the lanes still looping (L) and the lanes running this iteration (body).
`return` removes the current lanes from every level of the frame (and, in the kernel, from the
live lanes that barriers wait for); `break` from L upward; `continue` from body upward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .unsupported import SimtUnsupported

# lockstep iterations of one `while` loop before it is taken for a spin-wait (which lockstep
# cannot run: the lanes it waits for never get to move) and the kernel goes to the per-thread
# executor, memory restored; a plain spin costs ~25 us an iteration here, so 65536 give up
# after ~1.5 s (1M took ~25 s). `for` loops over range() are not limited.
LOOP_LIMIT = 1 << 16


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _andnot(a, b, n):
    """a & ~b where None means all lanes."""
    if b is None:
        return np.zeros(n, bool)
    return ~b if a is None else a & ~b


@dataclass
class Frame:
    base: int  # index of the entry level in the stack
    result: object = None  # per-lane return value
    result_dtype: object = None
    loops: list = field(default_factory=list)  # stack indices of the L levels of open loops


class MaskStack:
    """Mixin of `Ctx`: the mask stack and the control-flow calls of generated code."""

    n: int  # lanes in the batch

    def init_masks(self):
        self.levels: list = [None]
        self.conds: list = [None]
        self.frames = [Frame(0)]
        self.live = None  # lanes that have not returned from the kernel
        # per open loop: iterations so far, the loop's line, and a range(): its `range`, or each
        # lane's (value, stop, step, the iteration's number) as it goes: what a watchdog's message
        # says of a launch still running (progress.py)
        self._iterations: list[int] = []
        self._loop_lines: list[int] = []
        self._loop_ranges: list = []
        self._empty = np.zeros(self.n, bool)

    @property
    def top(self):
        return self.levels[-1]

    def any(self) -> bool:
        m = self.levels[-1]
        return m is None or bool(m.any())

    def _push(self, mask, cond=None) -> bool:
        self.levels.append(mask)
        self.conds.append(cond)
        return mask is None or bool(mask.any())

    def _as_mask(self, c):
        """A condition as a level: a bool vector, True (all lanes) or False (none). A vector
        true everywhere (a bounds guard in every block but the last) keeps the fast path."""
        if isinstance(c, np.ndarray) and c.ndim:
            c = c if c.dtype == np.bool_ else c != 0
            return True if c.all() else c
        return bool(c)

    # --- if / else ---------------------------------------------------------------------------

    def if_(self, c) -> bool:
        c = self._as_mask(c)
        top = self.levels[-1]
        if c is True:
            return self._push(top, True)
        if c is False:
            return self._push(self._empty, False)
        return self._push(_and(top, c), c)

    def else_(self) -> bool:
        c = self.conds[-1]
        parent = self.levels[-2]  # already without lanes that returned/broke in the if-branch
        if c is True:
            mask = self._empty
        elif c is False:
            mask = parent
        else:
            mask = _andnot(parent, c, self.n)
        self.levels[-1] = mask
        return mask is None or bool(mask.any())

    def endif(self):
        self.levels.pop()
        self.conds.pop()

    # --- loops -------------------------------------------------------------------------------

    def loop_push(self):
        top = self.levels[-1]
        self.frames[-1].loops.append(len(self.levels))
        self._push(top)  # L: lanes still in the loop
        self._push(top)  # body: lanes running this iteration
        self._iterations.append(0)
        self._loop_lines.append(self.line)
        self._loop_ranges.append(None)

    def loop_pop(self):
        self.frames[-1].loops.pop()
        self._iterations.pop()
        self._loop_lines.pop()
        self._loop_ranges.pop()
        del self.levels[-2:], self.conds[-2:]

    def drop_loops(self, depth: int) -> None:
        """Forget the loops opened past `depth`: a device function returned from inside them (its
        `return` skips their loop_pop)."""
        del self._iterations[depth:], self._loop_lines[depth:], self._loop_ranges[depth:]

    def loop_head(self) -> bool:
        """Start an iteration: lanes that took `continue` rejoin."""
        mask = self.levels[-2]
        self.levels[-1] = mask
        return mask is None or bool(mask.any())

    def loop_test(self, c) -> bool:
        """A `while` loop's condition, evaluated under L: lanes where it is false leave the loop."""
        self._narrow_loop(c)
        self._iterations[-1] += 1
        if self._iterations[-1] > LOOP_LIMIT:
            raise SimtUnsupported(
                f"loop still running after {LOOP_LIMIT} lockstep iterations (a spin-wait "
                "needing forward progress?)", self.line)
        return self.loop_head()

    def _narrow_loop(self, c) -> None:
        c = self._as_mask(c)
        if c is not True:
            self.levels[-2] = self._empty if c is False else _and(self.levels[-2], c)

    def range(self, *args, exits: bool = False):
        """Iterate `range(*args)`: a Python loop when the bounds are uniform, else a masked one.
        `exits`: the body can break or return (LOOP_LIMIT's spin-wait rule applies, as to a `while`)."""
        k = len(self._iterations) - 1  # this loop's entry (loop_push came just before)
        iterations, ranges = self._iterations, self._loop_ranges
        if all(not isinstance(a, np.ndarray) for a in args):
            values = ranges[k] = range(*(int(a) for a in args))
            for v in values:
                if not self.loop_head():
                    return
                iterations[k] += 1
                yield np.int64(v)
            return
        start, stop, step = (0, args[0], 1) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else 1)
        i = np.broadcast_to(np.asarray(start, np.int64), (self.n,))
        seen = len(self._compactions)
        while True:
            self.loop_head()
            going_up = i < stop
            if isinstance(step, np.ndarray) or step < 0:
                going_up = np.where(np.asarray(step) > 0, going_up, i > stop)
            if exits:  # (counted by loop_test)
                if not self.loop_test(going_up):
                    return
            else:  # it ends by itself, however long it runs: no spin-wait rule
                self._narrow_loop(going_up)
                if not self.loop_head():
                    return
                iterations[k] += 1
            ranges[k] = (i, stop, step, iterations[k])  # (one store: a watch reads a value and its number together)
            yield i
            for entry in self._compactions[seen:]:  # the body compacted this loop's lanes
                i, stop, step = (v[entry.idx] if isinstance(v, np.ndarray) and v.ndim else v
                                 for v in (i, stop, step))
            seen = len(self._compactions)
            i = i + step

    # --- exits -------------------------------------------------------------------------------

    def _remove(self, first: int):
        """Remove the current lanes from levels[first:]."""
        cur = self.levels[-1]
        for k in range(first, len(self.levels)):
            self.levels[k] = _andnot(self.levels[k], cur, self.n)
        return cur

    def brk(self):
        self._remove(self.frames[-1].loops[-1])

    def cont(self):
        self._remove(self.frames[-1].loops[-1] + 1)

    def ret(self, value) -> bool:
        """`return value` by the current lanes; True when no lane of the frame is left."""
        frame = self.frames[-1]
        cur = self.levels[-1]
        if value is not None or frame.result is not None:
            if frame.result_dtype is not None:
                value = self.cast(value, frame.result_dtype)
            frame.result = self.merge(frame.result, value, cur)
        self._remove(frame.base)
        if len(self.frames) == 1:
            self.live = _andnot(self.live, cur, self.n)
        base = self.levels[frame.base]
        return base is not None and not base.any()

    def result(self):
        return self.frames[-1].result

    # --- assignment --------------------------------------------------------------------------

    def merge(self, old, new, mask):
        """`new` in the lanes of `mask`, `old` elsewhere."""
        if mask is None or old is None:
            return new
        if isinstance(new, tuple):
            return tuple(self.merge(o, v, mask) for o, v in zip(old, new))
        if hasattr(new, "numba_type"):  # an array: the same one in every lane, or unsupported
            if getattr(new, "consts", None) is not None and getattr(old, "consts", None) \
                    is not None and new.base is old.base and new.dims == old.dims:
                # views of one array (`row = a[i]`): offsets and lengths per lane
                return new.like(*(tuple(v if v is o else np.where(mask, v, o)
                                        for v, o in zip(vn, vo))
                                  for vn, vo in ((new.consts, old.consts),
                                                 (new.shape, old.shape))))
            if new is not old:
                live = self.live
                if live is not None and not (live & ~mask).any():
                    return new  # every lane left out has returned: the choice is uniform
                raise SimtUnsupported("choosing an array per lane (array assigned in a divergent "
                                      "branch)", self.line)
            return new
        return np.where(mask, new, old)

    def assign(self, old, new, dtype):
        if dtype is not None and not (type(new) is np.ndarray and new.dtype == dtype):
            new = self.cast(new, dtype)  # (a vector of numba's type is kept as it is)
        mask = self.levels[-1]
        if mask is None or old is None:
            return new
        return self.merge(old, new, mask)
