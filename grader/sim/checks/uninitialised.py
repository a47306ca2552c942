"""Uninitialised reads: a load (or atomic) of an element no store has written since allocation.

Every array carries `initialised` flags (one bool per element of `flat`); stores set them
whether or not this checker is on, since the data flow and silent-store rule read them too.
A view of dynamic shared memory reads the memory's flags, kept per unit of its bytes
(kernel_arrays.UnitFlags): an element is initialised when all its bytes were written, through
any view.
"""

from __future__ import annotations

import numpy as np

from ..errors import UninitialisedReadError


class UninitialisedReads:
    """Mixin of `memory.Instrument` (reports through `_fail`)."""

    def _uninit(self, space, handle, flat, block, thread, line, filename):
        what = "shared array" if space == "shared" else "device array"
        self._fail(UninitialisedReadError,
                   f"read of uninitialised {what} {handle.name!r} at index "
                   f"{self._index_of(handle, flat)} (never written since allocation)",
                   block, thread, line, filename, handle.name, self._index_of(handle, flat))


def flags_view(initialised: np.ndarray):
    """The initialised flags for indexing one element at a time from Python: a memoryview on
    the same memory (an item is a Python bool, several times cheaper than a numpy scalar).
    Dynamic shared memory's flags (kernel_arrays.UnitFlags) are returned as they are."""
    if isinstance(initialised, np.ndarray) and initialised.dtype == np.bool_ and initialised.ndim == 1 and \
            initialised.flags.c_contiguous and initialised.flags.writeable:
        return memoryview(initialised)
    return initialised
