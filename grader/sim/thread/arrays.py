"""Arrays as one simulated thread of the per-thread executor sees them, and the memory spaces
its threads declare arrays in.

`ThreadArray` instruments every element access that the typed rewrite did not compile inline
(`access`): bounds, the recorders (counters) and checkers (races, uninitialised reads) of the
launch's Instrument. Its fast path (plain int indices, in bounds) is inline in `__getitem__` and
`__setitem__`: it is the executor's hot path. `Spaces` holds the shared arrays of the running
block (one per declaration site; dynamic shared memory one allocation) and the launch's constant
arrays.
"""

from __future__ import annotations

import linecache
import re
import sys

import numpy as np

from ..errors import LaunchConfigError, NotSimulatedError, SimError, where
from ..host import _as_dtype
from ..kernel_arrays import ConstArray, DynamicShared
from ..memory import LocalArray, SharedArray
from .. import ufuncs
from .values import converter

# Forward progress (see executor): a thread yields every this many loads through ThreadArray
# (flag loops); the compiled accesses do not count loads, their `while` loops tick instead
LOADS_PER_YIELD = 256
_getframe = sys._getframe
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")


class _View:
    """A sub-array of a handle (partial indexing or a slice): same storage, new layout."""

    def __init__(self, base, offset, shape, estrides):
        self.name, self.flat, self.initialised = base.name, base.flat, base.initialised
        self.stored = getattr(base, "stored", None)
        self.dtype, self.buffer_id, self.address = base.dtype, base.buffer_id, base.address
        self.first_block = getattr(base, "first_block", 0)
        self.block_stride = getattr(base, "block_stride", 0)
        self.memory = getattr(base, "memory", None)  # a view of dynamic shared memory
        self.offset, self.shape, self.estrides = offset, tuple(shape), tuple(estrides)


def _nothing(flat, g, frame, value=None):
    return None


class ThreadArray:
    """An array as one simulated thread indexes it: every element access is instrumented.
    `space`: "global" | "shared" | "local" | "const"; `ex` the ThreadExecutor."""

    __slots__ = ("_h", "_space", "_ex", "shape", "ndim", "size", "dtype", "_store", "_off",
                 "_strides", "_bid", "_load1", "_store1", "_unpacked")

    def __new__(cls, handle, space: str, ex):
        if cls is ThreadArray and handle.dtype.names is not None:
            cls = RecordArray  # an array of records: indexing one gives a reference to it
        return object.__new__(cls)

    def __init__(self, handle, space: str, ex):
        self._h, self._space, self._ex = handle, space, ex
        self.shape = tuple(handle.shape)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.dtype = handle.dtype
        # the fast path of __getitem__ / __setitem__ (plain int indices, in bounds): what
        # `Instrument.index1` computes, with the block's shared copy fixed (`_bid`)
        self._store = handle.flat
        self._strides = tuple(int(s) for s in handle.estrides)
        self._off = int(handle.offset)
        self._bid = None
        if space == "shared":
            self._bid = ex.bid
            self._off += (ex.bid - handle.first_block) * handle.block_stride
        self._load1 = ex.inst.scalar_recorder(space, handle, "load")
        if space == "const":  # constant memory: bounds only, the fast path records nothing
            self._load1 = _nothing
        self._store1 = ex.inst.scalar_recorder(space, handle, "store")
        self._unpacked = None  # what compiled accesses unpack (AccessLogs.unpack), once

    def fresh_local(self) -> "ThreadArray":
        """Another thread's `cuda.local.array` like this one (zeroed), its layout copied."""
        handle = self._h.fresh()
        new = object.__new__(ThreadArray)
        new._h, new._space, new._ex, new._store = handle, self._space, self._ex, handle.flat
        new.shape, new.ndim, new.size, new.dtype = self.shape, self.ndim, self.size, self.dtype
        new._strides, new._off, new._bid = self._strides, self._off, None
        new._load1, new._store1 = self._load1, self._store1
        # what compiled accesses unpack (AccessLogs.unpack): this one's, on the new storage, with
        # checkers of the new array's own initialised flags where the checker is on
        fast = self._unpacked
        if fast is not None:
            inst = self._ex.inst
            checkers = inst.local_checkers(handle) if inst.uninit else fast[2]
            new._unpacked = ((handle.flat, *fast[0][1:]), fast[1], checkers)
        else:
            new._unpacked = None
        return new

    def __len__(self):
        return self.shape[0]

    def sum(self, axis=None, dtype=None, out=None, **unused):
        """`a.sum()` and `np.sum(a)`, which numba compiles for a GPU: the thread adds the elements
        one after another in C order, each a load of its own, in numba's accumulator type (the
        array's for floats, int64 / uint64 for integers and booleans)."""
        frame = _student_frame(_getframe(1))
        if axis is not None or dtype is not None or out is not None or any(v is not None for v in unused.values()):
            raise NotSimulatedError("sum inside a kernel with axis=, dtype= or out= is not simulated: write the "
                                    "loop over the elements")
        kind = self.dtype.kind
        acc = self.dtype.type if kind in "fc" else np.uint64 if kind == "u" else np.int64
        total = acc(0)
        for index in np.ndindex(*self.shape):
            total = acc(total + acc(self._loaded(index, frame)))
        return total

    def _loaded(self, index, frame):
        """Element `index` (a full index), loaded by the running thread as `__getitem__` does."""
        return self._counted_load(self._flat(index, "load", frame))

    def _counted_load(self, flat: int):
        """The element at `flat`, its load counted towards the thread's next yield."""
        st = self._ex.cur
        st.loads += 1
        if st.loads >= LOADS_PER_YIELD:
            st.loads = 0
            self._ex.hub.switch("yield_loads")
        return self._h.flat[flat]

    def _flat(self, key, kind, frame, value=None):
        """Flat position of a full index (checked and recorded), or None for a view key.
        `value`: what a store stores (the race checker's silent-store rule)."""
        if type(key) is not tuple:
            key = (key,)
        if len(key) != self.ndim:
            return None
        ex = self._ex
        lin = ex.cur.lin
        line = frame.f_lineno
        filename = frame.f_code.co_filename
        try:
            flat = ex.inst.index1(self._space, self._h, key, ex.bid, lin, line, filename)
        except TypeError:
            if any(isinstance(k, slice) for k in key):
                return None
            raise
        ex.inst.access1(self._space, self._h, kind, flat, ex.bid, lin, line, filename, value)
        return flat

    def _position(self, key, frame):
        """Flat position of a full index (bounds checked, no access recorded), or None for a
        view key."""
        if type(key) is not tuple:
            key = (key,)
        if len(key) != self.ndim:
            return None
        ex = self._ex
        try:
            return ex.inst.index1(self._space, self._h, key, ex.bid, ex.cur.lin, frame.f_lineno,
                                  frame.f_code.co_filename)
        except TypeError:
            if any(isinstance(k, slice) for k in key):
                return None
            raise

    def _touch(self, kind, flat, frame, value=None):
        """The instrument's record of this thread's `kind` access to the element at `flat`."""
        ex = self._ex
        ex.inst.access1(self._space, self._h, kind, flat, ex.bid, ex.cur.lin, frame.f_lineno,
                        frame.f_code.co_filename, value)

    def _fast(self, key):
        """`Instrument.index1` for plain int indices that are in bounds; None otherwise (the
        full path then checks, reports and records)."""
        shape = self.shape
        if key.__class__ is int:
            if len(shape) == 1 and 0 <= key < shape[0]:
                return self._off + key * self._strides[0]
            return None
        if key.__class__ is not tuple or len(key) != len(shape):
            return None
        flat = self._off
        for i, dim, st in zip(key, shape, self._strides):
            if i.__class__ is not int or not 0 <= i < dim:
                return None
            flat += i * st
        return flat

    def __getitem__(self, key):
        frame = _getframe(1)
        rec = self._load1
        if rec is not None and (self._bid is None or self._bid == self._ex.bid):
            # the fast path, inline for the common shapes (a call costs as much as the rest)
            flat = None
            if key.__class__ is tuple:
                if len(key) == 2 and self.ndim == 2:
                    i, j = key
                    if i.__class__ is int and j.__class__ is int:
                        d0, d1 = self.shape
                        if 0 <= i < d0 and 0 <= j < d1:
                            s0, s1 = self._strides
                            flat = self._off + i * s0 + j * s1
                else:
                    flat = self._fast(key)
            elif key.__class__ is int and self.ndim == 1 and 0 <= key < self.shape[0]:
                flat = self._off + key * self._strides[0]
            if flat is not None:
                st = self._ex.cur
                rec(flat, st.g, frame)
                st.loads += 1
                if st.loads >= LOADS_PER_YIELD:
                    st.loads = 0
                    self._ex.hub.switch("yield_loads")
                return self._store[flat]
        flat = self._flat(key, "load", frame)
        if flat is None:
            return self._view(key, frame)
        return self._counted_load(flat)

    def __setitem__(self, key, value):
        frame = sys._getframe(1)
        if value.__class__ is int and self.dtype.kind in "iu":
            value = converter(self.dtype.type)(value)  # wrapped, as numba stores
        if self._space == "const":
            self._refuse_store(frame)
        rec = self._store1
        if rec is not None and (self._bid is None or self._bid == self._ex.bid):
            flat = None
            if key.__class__ is tuple:
                if len(key) == 2 and self.ndim == 2:
                    i, j = key
                    if i.__class__ is int and j.__class__ is int:
                        d0, d1 = self.shape
                        if 0 <= i < d0 and 0 <= j < d1:
                            s0, s1 = self._strides
                            flat = self._off + i * s0 + j * s1
                else:
                    flat = self._fast(key)
            elif key.__class__ is int and self.ndim == 1 and 0 <= key < self.shape[0]:
                flat = self._off + key * self._strides[0]
            if flat is not None:
                rec(flat, self._ex.cur.g, frame, value)
                self._store[flat] = value
                self._ex.progress += 1
                return
        flat = self._flat(key, "store", frame, value)
        if flat is None:
            raise NotSimulatedError("assignment to a slice of an array inside a kernel is not "
                                    "simulated; store element by element")
        self._h.flat[flat] = value
        self._ex.progress += 1

    def __array_ufunc__(self, ufunc, method, *inputs, out=(), **kwargs):
        # numpy hands a ufunc call with an array of ours here (`np.sin(x, out)`)
        if method != "__call__" or kwargs:
            return NotImplemented  # (numba compiles neither ufunc methods nor keywords)
        return ufunc_call(ufunc, inputs + tuple(out), _getframe(1))

    def _refuse_store(self, frame):
        raise SimError(f"{where(self._ex.name, frame.f_code.co_filename, frame.f_lineno)}: "
                       f"store to constant array {self._h.name!r}")

    def _view(self, key, frame):
        if type(key) is not tuple:
            key = (key,)
        h = self._h
        offset, shape, strides = h.offset, [], []
        for k, (dim, st) in enumerate(zip(h.shape, h.estrides)):
            if k >= len(key):
                shape.append(dim)
                strides.append(st)
                continue
            i = key[k]
            if isinstance(i, slice):
                start, stop, step = i.indices(dim)
                shape.append(len(range(start, stop, step)))
                strides.append(st * step)
                offset += start * st
            else:
                if not 0 <= i < dim:
                    self._ex.inst._oob(h, self._space, tuple(key), self._ex.bid, self._ex.cur.lin,
                                       frame.f_lineno, frame.f_code.co_filename)
                offset += i * st
        return ThreadArray(_View(h, offset, shape, strides), self._space, self._ex)



class RecordArray(ThreadArray):
    """An array of records (a structured dtype: numba.cuda.random's generator states). As in
    numba, indexing one element gives a reference to it (`RecordRef`), and reading or writing
    one of its fields is the thread's load or store of that element."""

    __slots__ = ()

    def __getitem__(self, key):
        frame = _getframe(1)
        flat = self._position(key, frame)
        if flat is None:
            return self._view(key, frame)
        return RecordRef(self, flat)

    def __setitem__(self, key, value):  # a whole record: `states[i] = states[j]`
        frame = _getframe(1)
        if self._space == "const":
            self._refuse_store(frame)
        if value.__class__ is RecordRef:
            value = value._load(frame)
        flat = self._flat(key, "store", frame)
        if flat is None:
            raise NotSimulatedError("assignment to a slice of an array inside a kernel is not "
                                    "simulated; store element by element")
        self._h.flat[flat] = value
        self._ex.progress += 1


class RecordRef:
    """One element of a `RecordArray`, by reference: `r["s0"]`, `r.s0` (load), `r["s0"] = v`
    (store) access the array's element."""

    __slots__ = ("_array", "_at")

    def __init__(self, array: RecordArray, flat: int):
        object.__setattr__(self, "_array", array)
        object.__setattr__(self, "_at", flat)

    def _load(self, frame):
        self._array._touch("load", self._at, frame)
        return self._array._h.flat[self._at].copy()

    def __getitem__(self, field):
        array = self._array
        array._touch("load", self._at, _getframe(1))
        return array._h.flat[self._at][field]

    def __setitem__(self, field, value):
        self._set(field, value, _getframe(1))

    def _set(self, field, value, frame):
        array = self._array
        if array._space == "const":
            array._refuse_store(frame)
        store = array._h.flat
        if value.__class__ is int and store.dtype.fields[field][0].kind in "iu":
            value = converter(store.dtype.fields[field][0].type)(value)  # wrapped, as numba stores
        array._touch("store", self._at, frame)
        store[self._at][field] = value
        array._ex.progress += 1

    def __getattr__(self, field):
        array = self._array
        if field not in array.dtype.names:
            raise AttributeError(field)
        array._touch("load", self._at, _getframe(1))
        return array._h.flat[self._at][field]

    def __setattr__(self, field, value):
        self._set(field, value, _getframe(1))


def _student_frame(frame):
    """The kernel's frame behind NumPy's own (`np.sum(a)` calls `a.sum(...)` from numpy's Python)."""
    while frame is not None and "numpy" in frame.f_code.co_filename.replace("\\", "/").split("/"):
        frame = frame.f_back
    return frame


def ufunc_call(ufunc, args, frame):
    """A NumPy ufunc called by the running thread with array arguments (`args`, outputs
    last; `frame`: the caller's), element-wise as numba-cuda compiles it
    (grader/sim/ufuncs.py): every element a load or store of this thread."""
    nin = ufunc.nin
    inputs, outs = args[:nin], args[nin:]
    if len(outs) != ufunc.nout or not all(isinstance(o, ThreadArray) for o in outs):
        raise NotSimulatedError(f"np.{ufunc.__name__} on arrays inside a kernel needs its output "
                                f"array(s) as arguments (a kernel cannot allocate one)")
    shape = outs[0].shape
    for a in args:
        if isinstance(a, ThreadArray) and (
                a.ndim > len(shape) or a in outs and a.shape != shape or any(
                    e not in (1, shape[len(shape) - a.ndim + k]) for k, e in enumerate(a.shape))):
            ex = a._ex
            raise SimError(f"{where(ex.name, frame.f_code.co_filename, frame.f_lineno)}: "
                           f"np.{ufunc.__name__}: operands of shapes "
                           f"{[getattr(b, 'shape', ()) for b in args]} do not broadcast onto "
                           f"the output's shape {shape}")
    dtypes = tuple(a.dtype if isinstance(a, ThreadArray) else np.asarray(a).dtype for a in args)
    in_types = [d.type for d in ufuncs.loop_dtypes(ufunc, dtypes)[0]]
    ex = outs[0]._ex
    for index in np.ndindex(*shape):
        values = []
        for a, t in zip(inputs, in_types):
            if isinstance(a, ThreadArray):
                a = a._h.flat[a._flat(ufuncs.broadcast_index(a.shape, index), "load", frame)]
            values.append(t(a))
        result = ufunc(*values)
        for out, r in zip(outs, (result,) if ufunc.nout == 1 else result):
            if out._space == "const":
                out._refuse_store(frame)
            value = out.dtype.type(r)
            out._h.flat[out._flat(index, "store", frame, value)] = value
            ex.progress += 1
    return outs[0] if ufunc.nout == 1 else tuple(outs)


class Spaces:
    """The shared arrays of the running block and the constant arrays of a launch, as the
    threads of executor `ex` declare them (`cuda.shared.array`, `cuda.const.array_like`)."""

    def __init__(self, ex):
        self._ex = ex
        self._const: dict[int, ThreadArray] = {}
        self.new_block()

    def new_block(self) -> None:
        self.shared: dict = {}  # (id(code), f_lasti) of the declaration -> its ThreadArray
        self.dynamic: dict = {}  # dtype -> view of the dynamic shared memory; "memory"
        self.shared_offset = 0  # bytes of static shared memory declared so far

    def shared_array(self, shape, dtype, frame):
        key = (id(frame.f_code), frame.f_lasti)  # (a code object hashes its contents)
        arr = self.shared.get(key)
        if arr is not None:
            return arr
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        dtype = _as_dtype(dtype)
        name = self.name_at(frame, "shared array")
        if shape in ((0,), ()) or int(np.prod(shape)) == 0:
            handle = self._dynamic_shared(dtype, name)
        else:
            size = int(np.prod(shape)) * dtype.itemsize
            start = -(-self.shared_offset // dtype.itemsize) * dtype.itemsize
            self.shared_offset = start + size
            self._check_shared(frame)
            handle = SharedArray(name, shape, dtype, first_block=self._ex.bid, address=start)
        arr = self.shared[key] = ThreadArray(handle, "shared", self._ex)
        return arr

    def _dynamic_shared(self, dtype, name):
        """Every dynamic shared array views the block's one dynamic shared memory from its
        first byte, as `extern __shared__` arrays do (kernel_arrays.DynamicShared); arrays of
        one dtype are one view."""
        handle = self.dynamic.get(dtype)
        if handle is not None:
            return handle
        memory = self.dynamic.get("memory")
        if memory is None:
            ex = self._ex
            memory = self.dynamic["memory"] = DynamicShared(
                ex.config.shared_bytes, first_block=ex.bid, on_refine=ex.inst.refine)
        handle = self.dynamic[dtype] = memory.view(name, dtype)
        return handle

    def _check_shared(self, frame):
        ex = self._ex
        lim = ex.launch.device_limits
        static, dyn = self.shared_offset, ex.config.shared_bytes
        if static > lim.default_shared_bytes or static + dyn > lim.max_shared_bytes_optin:
            raise LaunchConfigError(
                f"{where(ex.name, frame.f_code.co_filename, frame.f_lineno)}: the block needs "
                f"{static} bytes of static + {dyn} bytes of dynamic shared memory; the limit is "
                f"{lim.default_shared_bytes} bytes static and {lim.max_shared_bytes_optin} in "
                f"total", kernel=ex.name, filename=frame.f_code.co_filename,
                line=frame.f_lineno)

    def frozen_array(self, data, name):
        arr = self._const.get(id(data))
        if arr is None or arr._h.flat.base is not data:
            arr = self._const[id(data)] = ThreadArray(ConstArray(name, data), "const", self._ex)
        return arr

    def const_array(self, ary):
        if isinstance(ary, ThreadArray) and ary._space == "const":
            return ary  # a frozen global already is constant memory
        arr = self._const.get(id(ary))
        if arr is None:
            data = np.ascontiguousarray(ary.copy_to_host() if hasattr(ary, "copy_to_host")
                                        else ary)
            handle = LocalArray("constant array", data.shape, data.dtype)
            handle.flat[:] = data.reshape(-1)
            arr = self._const[id(ary)] = ThreadArray(handle, "const", self._ex)
        return arr

    @staticmethod
    def name_at(frame, default):
        """The variable the statement at `frame` assigns (`s = cuda.shared.array(...)`), for messages."""
        m = _ASSIGN.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
        return m.group(1) if m else f"{default} at line {frame.f_lineno}"
