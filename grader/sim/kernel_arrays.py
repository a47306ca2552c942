"""The arrays a kernel allocates itself: `cuda.shared.array` (one copy per block of a batch) and
`cuda.local.array` (one thread's). They carry the attributes of `host.DeviceBuffer` that the
instrument reads, so its checkers and counters treat every array alike."""

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

    def block_view(self, block: int) -> np.ndarray:
        """The ndarray of one block (for executors that index it directly)."""
        start = (block - self.first_block) * self.size
        return self.flat[start:start + self.size].reshape(self.shape)


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
        self.offset = 0
        self.estrides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.buffer_id = 0
