"""Uninitialised reads: a load (or atomic) of an element no store has written since allocation.

Every array carries `initialised` flags (one bool per element of `flat`); stores set them
whether or not this checker is on, since the data flow and silent-store rule read them too.
A view of dynamic shared memory reads the memory's flags, kept per unit of its bytes
(kernel_arrays.UnitFlags): an element is initialised when all its bytes were written, through
any view. A `cuda.local.array` has flags per thread's copy too, kept only while this checker is
on (nothing else reads them): the simulator zero-fills it, a GPU's local memory holds garbage.
"""

from __future__ import annotations

import numpy as np

from ..errors import UninitialisedReadError


class UninitialisedReads:
    """Mixin of `memory.Instrument` (reports through `_fail`)."""

    def _uninit(self, space, handle, flat, block, thread, line, filename, idle: int = 0):
        """`idle`: threads of the reader's warp not running the load (a shared array's elements
        they would have stored: the likely cause, said)."""
        what = {"shared": "shared array", "local": "local array"}.get(space, "device array")
        written = _written(handle) if space == "global" else ""
        why = (f"; {idle} thread{'s' if idle != 1 else ''} of its warp {'are' if idle != 1 else 'is'} not running "
               f"this code (an `if` they skipped, or a return): an element such a thread would have stored was never "
               f"stored. Keep every thread in the block's shared-memory loads and barriers, guarding only its own "
               f"global reads (0.0 past the edge) and its final store") if idle > 0 else ""
        if space == "local":  # the simulator's zeros would hide it: say what a GPU does instead
            loop = f": for k in range({handle.shape[0]}): {handle.name}[k] = 0" if len(handle.shape) == 1 else ""
            why = (f"; a GPU's local memory is not zeroed, so this reads garbage where the simulator reads 0: set "
                   f"every element of {handle.name!r} before reading it, e.g. in a loop from 0{loop}")
        self._fail(UninitialisedReadError,
                   f"read of uninitialised {what} {handle.name!r} at index "
                   f"{self._index_of(handle, flat)} (never written since allocation{why})"
                   + (f"\n{handle.name!r} ({handle.shape[0]} element{'s' if handle.shape[0] != 1 else ''}): "
                      f"{written}" if written else ""),
                   block, thread, line, filename, handle.name, self._index_of(handle, flat))

    def _local_vec(self, handle, kind, flat, block, thread, line, filename) -> None:
        """A SIMT access of a local array by the active lanes (`flat`: positions in the lanes'
        copies, one copy of `handle.size` elements per lane)."""
        init = handle.initialised
        if kind != "store":
            got = init[flat]
            if not got.all():
                lane = int(np.argmin(got))
                self._uninit("local", handle, int(flat[lane]) % handle.size, int(block[lane]), int(thread[lane]),
                             line, filename)
        if kind != "load":
            init[flat] = True

    def _local1(self, handle, kind, flat, block, thread, line, filename) -> None:
        """Scalar twin of `_local_vec`: one thread's access of its own local array."""
        if kind != "store" and not handle.initialised[flat]:
            self._uninit("local", handle, flat, block, thread, line, filename)
        if kind != "load":
            handle.initialised[flat] = True

    def local_checkers(self, handle):
        """(load check, store check) of one thread's local array for the per-thread executor's
        compiled accesses (`check(flat, g, frame, value=None)`, as `Instrument.scalar_checker`)."""
        init, tpb, uninit = flags_view(handle.initialised), self.tpb, self._uninit

        def load(flat, g, frame, value=None):
            if not init[flat]:
                uninit("local", handle, flat, g // tpb, g % tpb, frame.f_lineno, frame.f_code.co_filename)

        def store(flat, g, frame, value=None):
            init[flat] = True
        return load, store


_RUNS = 4  # runs of written elements told


def _written(handle) -> str:
    """Which elements of a 1-D device array had been written, in runs ("250 had been written
    ([0, 250)), the rest never"): a view of a chunk larger than what was copied into it shows as such. ""
    for other arrays."""
    flags = handle.initialised
    if len(handle.shape) != 1 or getattr(handle, "block_stride", 0) or not isinstance(flags, np.ndarray):
        return ""
    n = handle.shape[0]
    held = flags[handle.offset + np.arange(n, dtype=np.int64) * handle.estrides[0]]
    edges = np.flatnonzero(np.diff(np.concatenate(([False], held, [False])).astype(np.int8)))
    runs = edges.reshape(-1, 2)
    if not len(runs):
        return "none of them had been written"
    told = ", ".join(f"[{start}, {stop})" for start, stop in runs[:_RUNS]) + (", ..." if len(runs) > _RUNS else "")
    return f"{int(held.sum())} had been written ({told}), the rest never"


def flags_view(initialised: np.ndarray):
    """The initialised flags for indexing one element at a time from Python: a memoryview on
    the same memory (an item is a Python bool, several times cheaper than a numpy scalar).
    Dynamic shared memory's flags (kernel_arrays.UnitFlags) are returned as they are."""
    if isinstance(initialised, np.ndarray) and initialised.dtype == np.bool_ and initialised.ndim == 1 and \
            initialised.flags.c_contiguous and initialised.flags.writeable:
        return memoryview(initialised)
    return initialised
