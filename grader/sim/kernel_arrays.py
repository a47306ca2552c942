"""The arrays a kernel allocates itself: `cuda.shared.array` (one copy per block of a batch) and
`cuda.local.array` (one thread's). They carry the attributes of `host.DeviceBuffer` that the
instrument reads, so its checkers and counters treat every array alike.

Dynamic shared memory (`cuda.shared.array(0, dtype)`, CUDA's `extern __shared__`) is one byte
buffer per block that every such array views from its first byte, whatever its dtype
(`DynamicShared`): a store through one view is seen, reinterpreted, through the others. Its
initialised flags and race records are kept per *unit* of the buffer (the smallest item size
viewed so far, so per byte once a byte-sized view exists): a view whose items span `r` units
reads as initialised when all `r` are, and the race checker treats its access as an access to
each of them (checks/races.py), so two threads touching overlapping bytes through different
views conflict.
"""

from __future__ import annotations

import numpy as np


class SharedArray:
    """A `cuda.shared.array` of a batch of blocks: `flat` holds `n_blocks` consecutive copies.

    It has the attributes of `host.DeviceBuffer` the instrument reads (flat, initialised, offset,
    estrides, shape, dtype, buffer_id, address, name) plus the block batch it covers.
    """

    _ids = iter(range(-1, -(1 << 62), -1))  # negative: never collides with allocation ids

    def __init__(self, name: str, shape: tuple[int, ...], dtype, first_block: int = 0,
                 n_blocks: int = 1, address: int = 0, flat: np.ndarray | None = None):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.first_block, self.n_blocks = first_block, n_blocks
        self.block_stride = self.size
        self.flat = flat if flat is not None else \
            np.full(self.size * n_blocks * self.dtype.itemsize, 0xFF, np.uint8).view(self.dtype)
        self.initialised = np.zeros(self.size * n_blocks, bool)
        self.offset = 0
        self.estrides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.address = address  # byte offset of element 0 in the block's shared memory
        self.buffer_id = next(SharedArray._ids)
        self.device = None
        self.memory = None  # the DynamicShared this array views, if any


    def block_view(self, block: int) -> np.ndarray:
        """The ndarray of one block (for executors that index it directly)."""
        start = (block - self.first_block) * self.size
        return self.flat[start:start + self.size].reshape(self.shape)


class UnitFlags:
    """The initialised flags of a view of dynamic shared memory, by the view's element
    positions: an element is initialised when every unit it spans is (numpy-style get and set
    with an int or an int vector). It reads the memory's current units at each call, so it
    stays right when a smaller view refines them."""

    __slots__ = ("_mem", "_itemsize")

    def __init__(self, memory: "DynamicShared", itemsize: int):
        self._mem, self._itemsize = memory, itemsize

    def _rows(self):
        mem = self._mem
        r = self._itemsize // mem.unit
        if r == 1:
            return mem.flags
        n = mem.flags.shape[0] // r * r  # (a trailing partial item is no element)
        return mem.flags[:n].reshape(-1, r)

    def __getitem__(self, flat):
        rows = self._rows()
        got = rows[flat]
        return got if rows.ndim == 1 else got.all(axis=-1)

    def __setitem__(self, flat, value):
        self._rows()[flat] = value


class DynamicShared:
    """The dynamic shared memory of a batch of blocks: `block_bytes` bytes per block in one
    byte store, viewed by every `cuda.shared.array(0, dtype)` of the kernel (`view`).

    `unit` (bytes) is the granularity of `flags` (initialised, one per unit) and of the race
    records (`buffer_id`): the smallest item size viewed so far. A view of a smaller dtype
    refines it; `on_refine(memory, factor)` (the instrument's) then splits the race records
    of every unit into `factor`."""

    def __init__(self, block_bytes: int, first_block: int = 0, n_blocks: int = 1,
                 on_refine=None):
        self.block_bytes, self.first_block, self.n_blocks = block_bytes, first_block, n_blocks
        self.bytes = np.full(block_bytes * n_blocks, 0xFF, np.uint8)
        self.unit = 0
        self.flags = np.zeros(0, bool)
        self.buffer_id = next(SharedArray._ids)
        self._on_refine = on_refine
        self._units: dict = {}  # (id(view), unit) -> (view, UnitHandle)

    def view(self, name: str, dtype, address: int = 0) -> SharedArray:
        """A `SharedArray` of `dtype` over the whole buffer (as many whole items as fit in a
        block); its own `buffer_id` (counters), the memory's flags (`UnitFlags`)."""
        dtype = np.dtype(dtype)
        k = dtype.itemsize
        per_block = self.block_bytes // k
        if self.n_blocks > 1 and per_block * k != self.block_bytes:
            raise ValueError("dynamic shared memory not a multiple of the element size")
        if not self.unit:
            self.unit, self.flags = k, np.zeros(self.bytes.shape[0] // k, bool)
        elif k < self.unit:
            factor = self.unit // k
            flags = np.zeros(self.bytes.shape[0] // k, bool)
            flags[:self.flags.shape[0] * factor] = np.repeat(self.flags, factor)
            self.unit, self.flags = k, flags
            if self._on_refine is not None:
                self._on_refine(self, factor)
        store = self.bytes[:per_block * k * self.n_blocks].view(dtype)
        array = SharedArray(name, (per_block,), dtype, self.first_block, self.n_blocks,
                            address=address, flat=store)
        array.initialised = UnitFlags(self, k)
        array.memory = self
        return array

    def units(self, array) -> "UnitHandle":
        """What the race checker indexes for a view: the memory's units (see UnitHandle),
        made once per view and unit."""
        key = (id(array), self.unit)
        found = self._units.get(key)
        if found is None or found[0] is not array:
            found = self._units[key] = (array, UnitHandle(self, array))
        return found[1]


class UnitHandle:
    """The race checker's handle of one view of dynamic shared memory: positions are units of
    the memory (`r` per element of the view, unit `f * r + j` is byte `(f * r + j) * unit`);
    the view's name, and its element index in messages."""

    __slots__ = ("name", "buffer_id", "initialised", "offset", "estrides", "block_stride",
                 "shape", "r", "flat", "dtype")

    def __init__(self, memory: DynamicShared, array: SharedArray):
        self.name, self.buffer_id = array.name, memory.buffer_id
        self.initialised = memory.flags  # (its length sizes the race records)
        self.r = array.dtype.itemsize // memory.unit
        self.offset, self.estrides, self.shape = 0, (self.r,), array.shape
        self.block_stride = memory.block_bytes // memory.unit
        # one unit an item: unit positions are the view's, its elements the units' values
        self.flat, self.dtype = (array.flat, array.dtype) if self.r == 1 else (None, None)


class ConstArray:
    """A kernel's constant memory holding `data` (read-only, not copied): a global or closure
    array numba froze into the kernel (`grader/sim/frozen.py`). Bounds-checked, not counted."""

    def __init__(self, name: str, data: np.ndarray):
        self.name, self.shape, self.dtype = name, data.shape, data.dtype
        self.flat = data.reshape(-1)
        self.initialised, self.address = None, 0  # (what a view of it copies)
        self.offset = 0
        self.estrides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.buffer_id = 0


class LocalArray:
    """A `cuda.local.array` of one thread (bounds-checked, not counted)."""

    def __init__(self, name: str, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.flat = np.zeros(int(np.prod(self.shape, dtype=np.int64)), self.dtype)
        self.initialised = np.zeros(self.flat.size, bool)  # (checks/uninitialised.py)
        self.offset = 0
        self.estrides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.buffer_id = 0

    def fresh(self) -> "LocalArray":
        """Another thread's array of this name, shape and type, zeroed."""
        new = object.__new__(LocalArray)
        new.__dict__.update(self.__dict__)
        new.flat = np.zeros(self.flat.size, self.dtype)  # (zeros_like: 10x the time)
        new.initialised = np.zeros(self.flat.size, bool)
        return new
