"""Atomics over the active lanes, serialised in lane order (deterministic for any batch size).

When the old value is discarded, commutative operations use `ufunc.at` (which applies the lanes
in order). When it is used, or the operation does not commute (cas, exch, inc, dec), a serial
loop over the lanes computes exactly what one-at-a-time execution in lane order gives.
"""

from __future__ import annotations

import numpy as np

from .unsupported import SimtUnsupported

_AT = {"add": np.add, "sub": np.subtract, "max": np.maximum, "min": np.minimum,
       "nanmax": np.fmax, "nanmin": np.fmin, "and": np.bitwise_and, "or": np.bitwise_or,
       "xor": np.bitwise_xor}

# new value of an element from (current, operand, compare); one function per operation so that
# each compiles only for the dtypes it supports
_UPDATES = {
    "add": lambda cur, v, c: cur + v,
    "sub": lambda cur, v, c: cur - v,
    "max": lambda cur, v, c: v if v > cur else cur,
    "min": lambda cur, v, c: v if v < cur else cur,
    "nanmax": lambda cur, v, c: v if (v > cur or cur != cur) else cur,
    "nanmin": lambda cur, v, c: v if (v < cur or cur != cur) else cur,
    "and": lambda cur, v, c: cur & v,
    "or": lambda cur, v, c: cur | v,
    "xor": lambda cur, v, c: cur ^ v,
    "exch": lambda cur, v, c: v,
    "inc": lambda cur, v, c: 0 if cur >= v else cur + 1,
    "dec": lambda cur, v, c: v if (cur == 0 or cur > v) else cur - 1,
    "cas": lambda cur, v, c: v if cur == c else cur,
}
_compiled: dict = {}


def _serial_compiled(op):
    """A CPU-compiled loop: one lane at a time, exactly as the hardware serialises them."""
    fn = _compiled.get(op)
    if fn is None:
        from numba import njit

        update = njit(_UPDATES[op])

        @njit(nogil=True)
        def serial(data, flat, values, compare, old):
            for k in range(flat.shape[0]):
                i = flat[k]
                cur = data[i]
                old[k] = cur
                data[i] = update(cur, values[k], compare[k])

        fn = _compiled[op] = serial
    return fn


def _serial_python(data, flat, values, compare, op):
    """The same loop in Python, for the few lanes where compiling would cost more."""
    update = _UPDATES[op]
    old = data[flat]
    for k in range(flat.shape[0]):
        i = flat[k]
        old[k] = cur = data[i]
        data[i] = update(cur, values[k], compare[k])
    return old


SMALL = 64  # lanes below which the Python loop beats the compiled one's call overhead


class AtomicOps:
    """Mixin of `Ctx`: `cuda.atomic.*`."""

    def atomic(self, op, need_old, array, *args):
        if op == "compare_and_swap":  # compare_and_swap(ary, old, val): element 0 of a 1-D array
            op, args = "cas", (np.int64(0),) + args
        if len(args) != (3 if op == "cas" else 2):
            raise SimtUnsupported(f"atomic.{op} with {len(args) + 1} arguments", self.line)
        index, *operands = args
        if getattr(array, "consts", None) is not None:  # a view: the element of its base
            array, index = array.base, self._base_index(
                array, index if isinstance(index, tuple) else (index,))
        if not hasattr(array, "numba_type") or array.space not in ("global", "shared"):
            raise SimtUnsupported(f"atomic.{op} on a non-global, non-shared array", self.line)
        idx = index if isinstance(index, tuple) else (index,)
        act, block, thread = self._lanes()
        n_act = self.n if act is None else act.shape[0]
        if n_act == 0:
            return np.zeros(self.n, array.dtype) if need_old else None
        lane_set = self._lane_set()
        flat = self._position(array, idx, lane_set)
        flat = np.broadcast_to(flat, (n_act,))
        self.before_write(array)
        self.inst.access(array.space, array.handle, "atomic", flat, block, thread, self.line,
                         self.filename, lane_set)
        lanes = []
        for v in operands:
            v = np.asarray(v).astype(array.dtype)
            if v.ndim and act is not None:
                v = v[act]
            lanes.append(np.ascontiguousarray(np.broadcast_to(v, (n_act,))))
        values = lanes[-1]
        data = array.flat
        if not need_old and op in _AT:
            _AT[op].at(data, flat, values)
            return None
        compare = lanes[0] if op == "cas" else values
        if n_act <= SMALL:
            old = _serial_python(data, flat, values, compare, op)
        else:
            old = np.empty(n_act, data.dtype)
            _serial_compiled(op)(data, np.ascontiguousarray(flat), values, compare, old)
        if not need_old:
            return None
        if act is None:
            return old
        out = np.zeros(self.n, data.dtype)
        out[act] = old
        return out
