"""Arrays as lockstep code sees them, and vector loads and stores through the instrument.

Every access gathers or scatters the active lanes' elements through flat positions that
`Instrument.index` computes (and bounds-checks); `Instrument.access` then checks races and
uninitialised reads and counts. Storage per space:
- global: the argument's `DeviceBuffer.flat` (the whole allocation);
- shared: a `kernel_arrays.SharedArray` holding one fresh copy per block of the batch;
- local: one copy per lane, `(lanes, size)`, handed to the instrument as a `_LocalHandle`;
- const: a read-only host array.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..errors import LaunchConfigError, where
from .. import ufuncs
from ..kernel_arrays import DynamicShared, SharedArray
from . import typing as simt_typing
from .unsupported import SimtUnsupported


def _estrides(shape) -> tuple[int, ...]:
    return tuple(int(s) for s in np.cumprod((1,) + tuple(shape)[:0:-1])[::-1])


class SimtArray:
    """An array value in generated code: `space`, the instrument `handle`, its numba type."""

    __slots__ = ("space", "handle", "flat", "shape", "ndim", "size", "dtype", "numba_type")

    def __init__(self, space: str, handle, flat: np.ndarray, shape, dtype, contiguous=True):
        self.space, self.handle, self.flat = space, handle, flat
        self.shape = tuple(np.int64(s) for s in shape)
        self.ndim = len(self.shape)
        self.size = np.int64(int(np.prod(shape, dtype=np.int64)))
        self.dtype = np.dtype(dtype)
        self.numba_type = simt_typing.array_type(self.dtype, self.ndim, contiguous,
                                                 readonly=space == "const")


def _is_vector(x) -> bool:
    return isinstance(x, np.ndarray) and x.ndim == 1


class SimtView:
    """A sub-array of a `SimtArray` (`a[i]`, `a[i, :]`, `a[1:]`, `a[gid:]`, views of views):
    its elements are the base's, so every access goes through the base's instrumented load or
    store.

    Base index of view element `j`: `consts[k]` on every base dimension k, plus `j[v] * step`
    on the dimension `dims[v] = (k, step)` view dimension v maps to. `consts` and `shape`
    entries are scalars or lane vectors (`row = a[i]`, `tail = a[gid:]` with `i`, `gid` per
    lane); steps are uniform."""

    __slots__ = ("base", "consts", "dims", "space", "shape", "ndim", "size", "dtype",
                 "numba_type", "name")

    def __init__(self, base: SimtArray, consts: tuple, dims: tuple, shape: tuple):
        self.base, self.consts, self.dims = base, consts, dims
        self.space, self.dtype, self.name = base.space, base.dtype, base.handle.name
        self.shape = tuple(s.astype(np.int64, copy=False) if _is_vector(s) else np.int64(s)
                           for s in shape)
        self.ndim = len(self.shape)
        size = np.int64(1)
        for s in self.shape:
            size = size * s
        self.size = size
        self.numba_type = simt_typing.array_type(self.dtype, self.ndim, False,
                                                 readonly=base.space == "const")

    @classmethod
    def whole(cls, array: SimtArray) -> "SimtView":
        return cls(array, (np.int64(0),) * array.ndim,
                   tuple((k, 1) for k in range(array.ndim)), array.shape)

    def like(self, consts, shape=None) -> "SimtView":
        return SimtView(self.base, consts, self.dims, self.shape if shape is None else shape)


def _slice_indices(start, stop, step, dim):
    """`slice(start, stop, step).indices(dim)` and the length, where start, stop and dim may
    be lane vectors (step uniform, not 0)."""
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if step > 0:
        lo, hi, default_start, default_stop = 0, dim, 0, dim
    else:
        lo, hi, default_start, default_stop = -1, dim - 1, dim - 1, -1

    def norm(b, default):
        if b is None:
            return default
        b = np.asarray(b).astype(np.int64)
        b = np.where(b < 0, b + dim, b)
        out = np.minimum(np.maximum(b, lo), hi)
        return out if out.ndim else out[()]
    first, last = norm(start, default_start), norm(stop, default_stop)
    if step > 0:
        length = np.maximum(0, (last - first + step - 1) // step)
    else:
        length = np.maximum(0, (first - last - step - 1) // -step)
    return first, length


class _LocalHandle:
    """What the instrument reads of a local array: one thread's logical shape."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.offset, self.estrides = 0, _estrides(shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.buffer_id = 0


class _ConstHandle(_LocalHandle):
    pass


def global_array(buffer) -> SimtArray:
    contiguous = buffer.data.flags.c_contiguous
    return SimtArray("global", buffer, buffer.flat, buffer.shape, buffer.dtype, contiguous)


def _shape_tuple(shape, line) -> tuple[int, ...]:
    if isinstance(shape, np.ndarray):
        raise SimtUnsupported("array shape that differs between lanes", line)
    shape = shape if isinstance(shape, tuple) else (shape,)
    return tuple(int(s) for s in shape)


def _as_dtype(dtype) -> np.dtype:
    from .intrinsics import scalar_dtype

    if isinstance(dtype, np.dtype):
        return dtype
    found = scalar_dtype(dtype)
    if found is None:
        raise SimtUnsupported(f"array dtype {dtype!r}")
    return found


class ArrayOps:
    """Mixin of `Ctx`: array creation, loads and stores."""

    def _lanes(self):
        """(lane indices or None, block ids, thread ids) of the active lanes."""
        m = self.levels[-1]
        if m is None:
            return None, self.block, self.thread
        if self._act_mask is not m:
            self._act_mask = m
            act = np.flatnonzero(m)
            self._act = (act, self.block[act], self.thread[act])
            self._act_lanes = None
        return self._act

    def _lane_set(self):
        """The instrument's `Lanes` record of the active lanes (made once per mask)."""
        if self.levels[-1] is None:
            if self._all_lanes is None:
                self._all_lanes = self.inst.lanes(self.block, self.thread)
            return self._all_lanes
        act, block, thread = self._lanes()
        if self._act_lanes is None:
            self._act_lanes = self.inst.lanes(block, thread, act)
        return self._act_lanes

    def _position(self, array: SimtArray, idx, lanes):
        """Flat positions of the active lanes' elements (`idx` over every lane of the batch)."""
        space = array.space
        flat = self.inst.index_lanes(space, array.handle, idx, lanes, self.line, self.filename)
        if space == "local":  # the instrument gave the position within one lane's copy
            flat = (self.lane if lanes.act is None else self.lane[lanes.act]) * \
                array.handle.size + flat  # (lane ids: also under compaction)
        return flat

    # --- views -------------------------------------------------------------------------------

    def view(self, array, key):
        """`array[key]` where the key has slices or fewer indices than dimensions: a view."""
        if not isinstance(array, SimtView):
            array = SimtView.whole(array)
        if len(key) > array.ndim:
            raise SimtUnsupported(f"{len(key)} indices into a {array.ndim}-dimensional array",
                                  self.line)
        consts, dims, shape = list(array.consts), [], []
        for v, ((k, step), dim) in enumerate(zip(array.dims, array.shape)):
            part = key[v] if v < len(key) else slice(None)
            if isinstance(part, slice):
                if _is_vector(part.step):
                    raise SimtUnsupported("an array slice whose step differs between lanes",
                                          self.line)
                by = 1 if part.step is None else int(part.step)
                if any(_is_vector(b) for b in (part.start, part.stop, dim)):
                    start, length = _slice_indices(part.start, part.stop, by, dim)
                else:  # uniform: Python's own slice arithmetic
                    start, stop, by = slice(*(None if b is None else int(b) for b in (
                        part.start, part.stop, part.step))).indices(int(dim))
                    length = len(range(start, stop, by))
                consts[k] = consts[k] + start * np.int64(step)
                dims.append((k, step * by))
                shape.append(length)
            else:
                part = self._in_view(array, v, part, key)
                consts[k] = consts[k] + part * np.int64(step)
        return SimtView(array.base, tuple(consts), tuple(dims), tuple(shape))

    def _in_view(self, view, v, i, key):
        """Index `i` of view dimension `v` as int64, checked against the view's shape (an
        out-of-bounds lane is reported, as numba's simulator does, naming the view's shape;
        downgraded, it reads element 0)."""
        dim = view.shape[v]
        act, _, _ = self._lanes()
        if _is_vector(dim):  # a length per lane (`a[gid:]`): each active lane's own
            dim = dim if act is None else dim[act]
        else:
            dim = int(dim)
        if act is not None and act.shape[0] == 0:  # no lane runs this: nothing to check
            return i.astype(np.int64) if isinstance(i, np.ndarray) else np.int64(i)
        if not (isinstance(i, np.ndarray) and i.ndim) and not _is_vector(dim):
            i = int(i)
            if not 0 <= i < dim:
                self._view_oob(view, key, None)
                return np.int64(0)
            return np.int64(i)
        if not (isinstance(i, np.ndarray) and i.ndim):
            i = np.full(self.n, int(i), np.int64)
        i = i.astype(np.int64, copy=False)
        sub = i if act is None else i[act]
        bad = (sub < 0) | (sub >= dim)
        if bad.any():
            lane = int(np.argmax(bad))
            self._view_oob(view, key, lane)
            i = np.where((i < 0) | (i >= view.shape[v]), 0, i)
        return i

    def _view_oob(self, view, key, lane):
        """Report `key` out of bounds of `view` for the active lane at position `lane` among
        the active lanes (None: a uniform index, the first active lane)."""
        act, block, thread = self._lanes()
        pos = 0 if lane is None else lane
        full = pos if act is None else int(act[pos])  # its position in the batch's vectors
        index = tuple(p if isinstance(p, slice) else
                      int(p[full]) if isinstance(p, np.ndarray) and p.ndim else int(p)
                      for p in key)
        shown = SimpleNamespace(name=view.name, shape=tuple(
            int(d[full]) if _is_vector(d) else int(d) for d in view.shape))
        self.inst._oob(shown, view.space, index, int(block[pos]), int(thread[pos]), self.line,
                       self.filename)

    def _base_index(self, view: SimtView, idx):
        if len(idx) != view.ndim:
            raise SimtUnsupported("indexing a view with the wrong number of indices", self.line)
        consts = list(view.consts)
        for v, (k, step) in enumerate(view.dims):
            consts[k] = consts[k] + self._in_view(view, v, idx[v], idx) * np.int64(step)
        return tuple(consts)

    def array_attr(self, value, name):
        """`.shape` (etc.) of an expression: an array's, else not modelled."""
        if not hasattr(value, "numba_type"):
            raise SimtUnsupported(f"attribute .{name} of an element", self.line)
        return getattr(value, name)

    def subscript(self, array, key):
        """`array[key]` decided at run time: an element when every part is an integer and
        there is one per dimension, else a view."""
        if len(key) == array.ndim and not any(isinstance(p, slice) for p in key):
            return self.load(array, key)
        return self.view(array, key)

    def load(self, array: SimtArray, idx, field=None):
        """The active lanes' elements at `idx`; `field`: of a record array, that field of each
        (the load of the element)."""
        if field is not None:
            values = self.load(array, idx)
            return np.ascontiguousarray(values[field])
        if type(array) is SimtView:
            return self.load(array.base, self._base_index(array, idx))
        act, block, thread = self._lanes()
        if act is not None and act.shape[0] == 0:
            return np.zeros(self.n, array.dtype)
        lanes = self._lane_set()
        space = array.space
        if space == "global" or space == "shared":  # (array.flat is handle.flat)
            values = self.inst.load_lanes(space, array.handle, idx, lanes, self.line,
                                          self.filename)
        else:
            flat = self._position(array, idx, lanes)
            self.inst.access(space, array.handle, "load", flat, block, thread, self.line,
                             self.filename, lanes)
            values = array.flat[flat]
        if act is None:
            return values
        out = np.zeros(self.n, array.dtype)
        out[act] = values
        return out

    def store(self, array: SimtArray, idx, value, field=None):
        """Store `value` at `idx` for the active lanes; `field`: into that field of a record
        array's elements (the store of the element)."""
        if type(array) is SimtView:
            if len(idx) != array.ndim or any(isinstance(p, slice) for p in idx):
                raise SimtUnsupported("assignment to a slice of an array", self.line)
            return self.store(array.base, self._base_index(array, idx), value, field)
        if array.space == "const":
            raise SimtUnsupported("store to a constant array", self.line)
        act, block, thread = self._lanes()
        if act is not None and act.shape[0] == 0:
            return
        lanes = self._lane_set()
        flat = self._position(array, idx, lanes)
        self.before_write(array)
        if isinstance(value, np.ndarray) and act is not None:
            value = value[act]
        self.inst.access(array.space, array.handle, "store", flat, block, thread, self.line,
                         self.filename, lanes, value if field is None else None)
        # duplicate positions: the last lane wins (a race unless they store one value)
        if field is None:
            array.flat[flat] = value
        else:
            array.flat[field][flat] = value

    def ufunc(self, ufunc, *args):
        """A NumPy ufunc call: on scalars as numba types it (`math`); with arrays element-wise
        as numba-cuda compiles it (grader/sim/ufuncs.py): every lane runs the whole loop, each
        element a load or store of every active lane."""
        if not any(isinstance(a, SimtArray) for a in args):
            return self.math(ufunc, ufunc, *args)
        from .ops import _dtype, cast

        nin = ufunc.nin
        inputs, outs = args[:nin], args[nin:]
        if len(outs) != ufunc.nout or not all(isinstance(o, SimtArray) for o in outs):
            raise SimtUnsupported(f"np.{ufunc.__name__} on arrays without output arrays",
                                  self.line)
        shape = tuple(int(e) for e in outs[0].shape)
        for a in args:
            if isinstance(a, SimtArray) and (a.ndim > len(shape) or a in outs and tuple(
                    int(e) for e in a.shape) != shape or any(
                    int(e) not in (1, shape[len(shape) - a.ndim + k]) for k, e in enumerate(a.shape))):
                raise SimtUnsupported(f"np.{ufunc.__name__} on operands that do not broadcast",
                                      self.line)
        dtypes = tuple(a.dtype if isinstance(a, SimtArray) else _dtype(a) for a in args)
        in_dtypes = ufuncs.loop_dtypes(ufunc, dtypes)[0]
        for index in np.ndindex(*shape):
            values = [cast(self.load(a, ufuncs.broadcast_index(a.shape, index))
                           if isinstance(a, SimtArray) else a, d)
                      for a, d in zip(inputs, in_dtypes)]
            result = ufunc(*values)
            for out, r in zip(outs, (result,) if ufunc.nout == 1 else result):
                self.store(out, index, cast(r, out.dtype))
        return outs[0] if ufunc.nout == 1 else tuple(outs)

    def before_write(self, array):
        """Keep a copy of an argument's memory before its first write, so that giving up
        midway (SimtUnsupported) can restore it before the per-thread executor reruns."""
        saved = self.saved
        if saved is not None and array.space == "global":
            h = array.handle
            if h.buffer_id not in saved:
                saved[h.buffer_id] = (h, h.flat.copy(), h.initialised.copy(),
                                      None if h.stored is None else h.stored.copy())

    # --- creation -------------------------------------------------------------------------------

    def shared_array(self, shape, dtype, site=None, name=None):
        """`cuda.shared.array`: fresh per block. One SharedArray per call site and batch, so a
        loop re-running the declaration gets the same memory, as on the GPU."""
        key = ("shared", self.filename, site)
        found = self._arrays.get(key)
        if found is not None:
            return found
        shape, dtype = _shape_tuple(shape, self.line), _as_dtype(dtype)
        if shape == (0,) or shape == ():  # dynamic: the launch's shared bytes, from offset 0
            n = self.config.shared_bytes // dtype.itemsize
            handle = self._dynamic_shared(dtype, n, name)
        else:
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            address = self._shared_top
            self._shared_top += (nbytes + 15) // 16 * 16
            self._check_shared()
            handle = SharedArray(name or self._array_name("shared"), shape, dtype, self.first_block,
                                 self.n_blocks, address=address)
        array = SimtArray("shared", handle, handle.flat, handle.shape, dtype)
        self._arrays[key] = array
        return array

    def _check_shared(self):
        limits = self.limits
        static, dynamic = self._shared_top, self.config.shared_bytes
        if limits is not None and (static > limits.default_shared_bytes or
                                   static + dynamic > limits.max_shared_bytes_optin):
            raise LaunchConfigError(
                f"{where(self.inst.kernel, self.filename, self.line)}: the block needs {static} "
                f"bytes of static + {dynamic} bytes of dynamic shared memory; the limit is "
                f"{limits.default_shared_bytes} bytes static and {limits.max_shared_bytes_optin} "
                "in total", kernel=self.inst.kernel, filename=self.filename, line=self.line)

    def _dynamic_shared(self, dtype, n, name):
        """Every dynamic shared array views the batch's one dynamic shared memory from its
        first byte, as `extern __shared__` arrays do (kernel_arrays.DynamicShared)."""
        if self._dynamic is None:
            self._dynamic = DynamicShared(self.config.shared_bytes, self.first_block,
                                          self.n_blocks, on_refine=self.inst.refine)
        try:
            return self._dynamic.view(name or self._array_name("dynamic shared"), dtype,
                                      address=self._static_bytes)
        except ValueError:
            raise SimtUnsupported("dynamic shared memory not a multiple of the element size",
                                  self.line) from None

    def local_array(self, shape, dtype, site=None, name=None):
        key = ("local", self.filename, site)
        found = self._arrays.get(key)
        if found is not None:
            return found
        shape, dtype = _shape_tuple(shape, self.line), _as_dtype(dtype)
        handle = _LocalHandle(name or self._array_name("local"), shape, dtype)
        flat = np.zeros(handle.size * self.n_blocks * self.tpb, dtype)  # every lane's copy
        handle.initialised = np.zeros(flat.size, bool)  # per lane's copy (checks/uninitialised.py)
        array = SimtArray("local", handle, flat, shape, dtype)
        self._arrays[key] = array
        return array

    def const_array_like(self, host, name=None):
        """`cuda.const.array_like(host)`, and a global or closure array numba froze into the
        kernel (`name`: the global's)."""
        if isinstance(host, SimtArray):  # an argument (numba needs a constant; typing allows it)
            return host
        found = self._const_arrays.get(id(host))
        if found is not None and found[0] is host:
            return found[1]
        host_array = np.ascontiguousarray(host)
        handle = _ConstHandle(name or self._array_name("const"), host_array.shape,
                              host_array.dtype)
        array = SimtArray("const", handle, host_array.reshape(-1), host_array.shape,
                          host_array.dtype)
        self._const_arrays[id(host)] = (host, array)
        return array

    def _array_name(self, space):
        return f"{space} array at line {self.line}"
