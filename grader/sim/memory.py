"""`Instrument`: the per-launch memory checkers and counters that both executors call.

Lanes arrive as int64 vectors (`block`: linear block id, `thread`: linear thread id in the
block); the per-thread executor uses the scalar twins `index1` / `access1`, which apply the same
rules to one lane without numpy overhead. docs/SIMULATOR_DESIGN.md has the contract.

Each concern is a module of its own (those with state are mixins of `Instrument`):
- checks/: findings, bounds, uninitialised, ordering (barriers, syncwarps, fences, acquires),
  races, silent_stores;
- counters/: vector (the SIMT path), access_log (the per-thread path), lines, with coalescing
  (sectors) and banks (wavefronts) as plain functions;
- access_patterns.py: the index patterns the SIMT path checks and costs once.
This class holds what ties them together: the state they share (counts, per-thread counts,
the arrays written and read) and the entry points that run, for each access, the checkers
and then the counters. Mixins, not delegation: the hot paths reach every method and every
piece of state through `self`, with no extra hop.
"""

from __future__ import annotations

import numpy as np

from .access_patterns import squeeze
from .checks.bounds import BoundsChecks
from .checks.findings import Findings
from .checks.ordering import Ordering
from .checks.races import RaceChecks
from .checks.silent_stores import same_bits1
from .checks.uninitialised import UninitialisedReads, flags_view
from .counters.access_log import AccessLog
from .counters.banks import BANK_BYTES, BANKS
from .counters.coalescing import SECTOR_BYTES
from .counters.lines import LineCounts
from .counters.names import COUNTERS, PER_THREAD, REQUEST_KEYS
from .counters.vector import VectorCounts
from .errors import Checks, NotSimulatedError
from .geometry import WARP, LaunchConfig, Lanes
from .kernel_arrays import LocalArray, SharedArray

__all__ = ["BANKS", "BANK_BYTES", "SECTOR_BYTES", "WARP", "Instrument", "Lanes", "LaunchConfig",
           "LocalArray", "SharedArray"]
_squeeze = squeeze  # (tests/sim/test_simt_fast_paths.py)


class Instrument(Findings, BoundsChecks, UninitialisedReads, Ordering, RaceChecks, VectorCounts,
                 AccessLog, LineCounts):
    """Checkers and counters of one launch. See docs/SIMULATOR_DESIGN.md for the contract."""

    def __init__(self, kernel_name: str, filename: str, config: LaunchConfig,
                 checks: Checks | None = None):
        self.kernel, self.filename, self.config = kernel_name, filename, config
        self.checks = checks or Checks()
        self.warnings: list[str] = []
        self.tpb = config.threads_per_block
        self.wpb = config.warps_per_block
        nb = config.n_blocks
        self.races = self.checks.enabled("races")
        self.uninit = self.checks.enabled("uninitialised")
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.per_thread = {k: np.zeros(nb * self.tpb, np.int64) for k in PER_THREAD}
        self.written: set[str] = set()
        self.read: set[str] = set()  # global arrays some thread loaded from or updated atomically (the data flow)
        # allocations (buffer ids) of global arrays no thread of this launch can write (their
        # loads need no race record), those whose every element was initialised at its start
        # (no uninitialised read), and those whose loads no checker that is on needs to see
        # (`quiet`: counted only); set by `expect`
        self.unwritten: frozenset[int] = frozenset()
        self.settled: frozenset[int] = frozenset()
        self.quiet: frozenset[int] = frozenset()
        # allocations passed as two or more arguments: buffer id -> what a race on it adds
        # ("x and out are the same array, passed twice at line 9"); set by `expect`
        self.aliases: dict[int, str] = {}
        self._init_bounds()
        self._init_ordering(nb)
        self._init_races()
        self._init_vector_counts()
        self._init_access_log()
        self._init_lines()

    def expect(self, unwritten, settled, aliases=None) -> None:
        """What the launch knows of its global arrays before it runs: the allocations no thread
        can write (read_only.py) and those initialised throughout (buffer ids), kept only for
        a checker that is on; `aliases`: the allocations passed as several arguments (buffer id
        -> the note a race on it ends with)."""
        self.aliases = dict(aliases or {})
        self.unwritten = frozenset(unwritten) if self.races else frozenset()
        self.settled = frozenset(settled) if self.uninit else frozenset()
        if self.races and self.uninit:
            self.quiet = self.unwritten & self.settled
        else:  # one checker on: its own set (both off: every load is counted only, whatever the array)
            self.quiet = self.unwritten or self.settled

    def _refuse_write(self, handle, line, filename) -> None:
        """A store into an array the kernel's source was read as never writing (read_only.py):
        its loads went unrecorded, so the launch cannot be checked for races."""
        raise NotSimulatedError(
            f"kernel {self.kernel!r} wrote {handle.name!r} at line {line}, an array the simulator read its "
            f"source (and the device functions it calls) as never writing: its loads of {handle.name!r} were "
            f"not checked for races, so this launch is not simulated (was a device function it calls rebound "
            f"after its first launch, or did it reach the array other than as an argument?)",
            kernel=self.kernel, filename=filename, line=line)

    # ------------------------------------------------------------------ vector accesses
    def load_lanes(self, space, handle, idx, lanes: Lanes, line, filename=None) -> np.ndarray:
        """A SIMT load from global or shared memory: `index_lanes`, then `access`, then the
        lanes' values from `handle.flat`. With neither checker that needs positions on (races,
        uninitialised reads), or from a global array none of those that are on needs to see
        (`quiet`), a known pattern over ordered lanes is only counted: its positions are never
        made (the values come from `vec_flat` in a view shifted by `base`)."""
        if (not (self.races or self.uninit) or space == "global" and handle.buffer_id in self.quiet) \
                and lanes.ordered and len(idx) == len(handle.shape):
            hit = self._pattern_hit(handle, idx, lanes)
            if hit is not None and hit[0].nonneg:
                pat, base = hit
                self._last = None
                last = (None, pat, base)
                if line is None:
                    self._count_vec(space, handle, "load", None, lanes, last)
                else:
                    counts = self.counts
                    rk, uk = REQUEST_KEYS[space, "load"]
                    r0, u0 = counts[rk], counts[uk]
                    self._count_vec(space, handle, "load", None, lanes, last)
                    self._note_line(space, "load", line, counts[rk] - r0, counts[uk] - u0,
                                    lambda: (lanes.warp, lanes.thread, self._byte_addr(
                                        space, handle, base + pat.vec_flat), handle.dtype.itemsize))
                sq = pat.squeezed
                if sq is None:
                    sq = pat.squeezed = squeeze(pat.vec_flat)
                if sq:  # the same values, each element gathered once and then repeated
                    small, shape = sq
                    if shape[2] == 1:  # runs of one value: np.repeat is the faster copy
                        return np.repeat(handle.flat[base:][small.reshape(-1)], shape[1])
                    out = np.empty(shape, handle.flat.dtype)
                    out[...] = handle.flat[base:][small]
                    return out.reshape(-1)
                return handle.flat[base:][pat.vec_flat]
        flat = self.index_lanes(space, handle, idx, lanes, line, filename)
        self.access(space, handle, "load", flat, lanes.block, lanes.thread, line, filename,
                    lanes)
        return handle.flat[flat]

    def lanes(self, block, thread, act=None) -> Lanes:
        """The `Lanes` record of these lanes (for `index_lanes` / `access`)."""
        return Lanes(block, thread, self.tpb, self.wpb, act)

    def access(self, space, handle, kind, flat, block, thread, line, filename=None,
               lanes: Lanes | None = None, values=None) -> None:
        """One instruction's accesses by many lanes: checks, then counters. `lanes` (optional)
        is the `Lanes` record of `block` and `thread`; `values` (optional, stores): what the
        lanes store (a vector over them, or one scalar for all), for the silent-store rule."""
        last, self._last = self._last, None
        if space in ("local", "const"):
            if space == "local" and self.uninit:
                self._local_vec(handle, kind, flat, block, thread, line, filename)
            return
        flat = np.asarray(flat, np.int64)
        if lanes is None:
            lanes = Lanes(block, thread, self.tpb, self.wpb)
            last = None
        elif last is not None and last[0] is not flat:
            last = None
        unwritten = space == "global" and handle.buffer_id in self.unwritten
        if unwritten and kind != "load":
            self._refuse_write(handle, line, filename)
        if self.uninit and kind != "store" and not (space == "global" and handle.buffer_id in self.settled):
            init = handle.initialised[flat]
            if not init.all():
                lane = int(np.argmin(init))
                block, thread = int(lanes.block[lane]), int(lanes.thread[lane])
                # threads of the reader's warp not running this load (an `if` they skipped, a
                # return): the shared elements they would have stored, never stored. (Of its warp
                # only: a warp not run yet, its barrier missing, is another story.)
                warp = lanes.warp[lane]
                idle = 0 if space != "shared" else \
                    min(WARP, self.tpb - thread // WARP * WARP) - int(np.count_nonzero(lanes.warp == warp))
                self._uninit(space, handle, int(flat[lane]), block, thread, line, filename, idle=idle)
        if self.races and not unwritten:
            race = self._race_units if space == "shared" and handle.memory is not None \
                else self._race_vec
            race(space, handle, kind, flat, lanes, line, filename,
                 last[1] if last is not None else None, values if kind == "store" else None)
        if kind != "load":
            handle.initialised[flat] = True
            if space == "global":
                self.written.add(handle.name)
                if handle.stored is not None:
                    handle.stored[flat] = True
        if kind == "atomic" and space == "global" and self.races:
            self._acquired(lanes.block, lanes.g)
        if kind == "atomic" or line is None:
            self._count_vec(space, handle, kind, flat, lanes, last)
            if kind == "atomic" and line is not None:
                self._note_atomics(space, line, lanes.n)
            return
        rk, uk = REQUEST_KEYS[space, kind]
        r0, u0 = self.counts[rk], self.counts[uk]
        self._count_vec(space, handle, kind, flat, lanes, last)
        self._note_line(space, kind, line, self.counts[rk] - r0, self.counts[uk] - u0,
                        lambda: (lanes.warp, lanes.thread, self._byte_addr(space, handle, flat),
                                 handle.dtype.itemsize))

    # ------------------------------------------------------------------ scalar accesses
    def access1(self, space, handle, kind, flat: int, block: int, thread: int, line: int,
                filename=None, value=None) -> None:
        """Scalar twin of `access` for one lane (`value`: what a store stores, optional)."""
        if space == "local" or space == "const":
            if space == "local" and self.uninit:
                self._local1(handle, kind, flat, block, thread, line, filename)
            return
        # no race rule for an array nothing writes (its loads), nor for a silent store
        unraced = space == "global" and handle.buffer_id in self.unwritten
        if unraced and kind != "load":
            self._refuse_write(handle, line, filename)
        if kind == "load":
            if self.uninit and not handle.initialised[flat]:
                self._uninit(space, handle, flat, block, thread, line, filename)
            if space == "global":
                self.read.add(handle.name)
        else:
            if kind == "atomic":
                if self.uninit and not handle.initialised[flat]:
                    self._uninit(space, handle, flat, block, thread, line, filename)
                if space == "global":  # a read-modify-write: what it leaves depends on what was there
                    self.read.add(handle.name)
            elif value is not None and self.races and handle.initialised[flat]:
                unraced = same_bits1(handle.flat, flat, value)
                if unraced:  # no access for the race rule, but kept for atomics (races.py)
                    self.silent_store1(handle, flat, block, block * self.tpb + thread, line)
            handle.initialised[flat] = True
            if space == "global":
                self.written.add(handle.name)
                if handle.stored is not None:
                    handle.stored[flat] = True
        g = block * self.tpb + thread
        if self.races and not unraced:
            if space == "shared" and handle.memory is not None:
                self._race_units1(space, handle, kind, flat, block, g, line, filename)
            else:
                self._race1(space, handle, kind, flat, block, g, line, filename)
        if kind == "atomic":
            if space == "global" and self.races:
                self._acquired(block, g)
            self.counts["atomics" if space == "global" else "shared_atomics"] += 1
            if space == "global":
                a = self._byte_addr(space, handle, flat)
                self._atomic_hits[a] = self._atomic_hits.get(a, 0) + 1
            self._note_atomics(space, line, 1)
            return
        slot = self.slot(space, handle)
        self._log_g.append(g)
        self._log_site.append(line << 32 | (slot if kind == "load" else slot + 1))
        self._log_flat.append(flat)

    def scalar_recorder(self, space, handle, kind):
        """For the per-thread executor: a function `rec(flat, g, frame, value=None)` doing what
        `access1(space, handle, kind, flat, g // tpb, g % tpb, frame.f_lineno,
        frame.f_code.co_filename, value)` does (`g`: global thread id, `frame`: the accessing
        frame, `value`: what a store stores), with what does not change bound once. None for
        local and constant arrays."""
        if space == "local" or space == "const":
            return None
        tpb = self.tpb
        if kind == "atomic":
            access1 = self.access1

            def rec(flat, g, frame):
                access1(space, handle, kind, flat, g // tpb, g % tpb, frame.f_lineno,
                        frame.f_code.co_filename)
            return rec
        slot = self.slot(space, handle)
        hc = slot if kind == "load" else slot + 1
        log_g, log_site, log_flat = self._log_g.append, self._log_site.append, self._log_flat.append
        # frame.f_lineno walks the code's line table on every call: remember the log entry
        # (line << 32 | hc) of each bytecode offset, per code object (the one seen last first)
        site = [None, None]  # [code, {f_lasti: line << 32 | hc}]
        by_code: dict = {}  # id(code) -> (code, {f_lasti: ...})
        check = self.scalar_checker(space, handle, kind)
        if check is None:  # counters only
            init = flags_view(handle.initialised)
            store = kind != "load"
            written, name, is_global = self.written, handle.name, space == "global"

        def rec(flat, g, frame, value=None):
            if check is not None:
                check(flat, g, frame, value)
            elif store:
                init[flat] = True
                if is_global:
                    written.add(name)
            code = frame.f_code
            if code is site[0]:
                lines = site[1]
            else:
                site[0] = code
                lines = site[1] = by_code.setdefault(id(code), (code, {}))[1]
            lasti = frame.f_lasti
            entry = lines.get(lasti)
            if entry is None:
                entry = lines[lasti] = frame.f_lineno << 32 | hc
            log_g(g)
            log_site(entry)
            log_flat(flat)
        return rec

    def scalar_checker(self, space, handle, kind):
        """The checkers of one scalar access, nothing counted: `check(flat, g, frame,
        value=None)` (see `scalar_recorder`; `frame` needs `f_lineno` and
        `f_code.co_filename`, read only to report). None when neither the race nor the
        uninitialised-read checker is on, and for constant arrays; for a local array, its
        uninitialised-read check (`local_checkers`) when that checker is on."""
        if space == "local" and self.uninit:
            return self.local_checkers(handle)[kind != "load"]
        if space == "local" or space == "const" or not (self.races or self.uninit):
            return None
        store = kind != "load"
        is_global = space == "global"
        unraced = is_global and handle.buffer_id in self.unwritten
        if unraced and store:
            def refuse(flat, g, frame, value=None):
                self._refuse_write(handle, frame.f_lineno, frame.f_code.co_filename)
            return refuse
        if is_global and not store and handle.buffer_id in self.quiet:
            return None
        tpb = self.tpb
        init = flags_view(handle.initialised)
        uninit_check = kind == "load" and self.uninit and not (is_global and handle.buffer_id in self.settled)
        written, name = self.written, handle.name
        uninit = self._uninit
        if self.races and space == "shared" and handle.memory is not None:
            return self._units_checker(space, handle, kind)
        if self.races and not unraced:
            return self._race_checker(space, handle, store, uninit_check)

        def check(flat, g, frame, value=None):
            if uninit_check and not init[flat]:
                uninit(space, handle, flat, g // tpb, g % tpb, frame.f_lineno,
                       frame.f_code.co_filename)
            if store:
                init[flat] = True
                if is_global:
                    written.add(name)
        return check

    def _units_checker(self, space, handle, kind):
        """`scalar_checker` of a view of dynamic shared memory with the race checker on: the
        inline race checker on the memory's units while the view's items are one unit each,
        else what `access1` checks, unit by unit; rebuilt when a smaller view refines the
        units."""
        memory, tpb, uninit, races = handle.memory, self.tpb, self.uninit, self._race_units1
        flags, store = handle.initialised, kind != "load"
        uninit_check = kind == "load" and uninit

        def spanning(flat, g, frame, value=None):
            block = g // tpb
            if not store or kind == "atomic":
                if uninit and not flags[flat]:
                    self._uninit(space, handle, flat, block, g % tpb, frame.f_lineno,
                                 frame.f_code.co_filename)
            if store:
                if value is not None and flags[flat] and same_bits1(handle.flat, flat, value):
                    return  # silent: no access for the race rule
                flags[flat] = True
            races(space, handle, kind, flat, block, g, frame.f_lineno, frame.f_code.co_filename)

        current = [None, None]  # [the memory's unit, the checker for it]

        def check(flat, g, frame, value=None):
            if current[0] != memory.unit:
                units = memory.units(handle)
                current[0] = memory.unit
                current[1] = self._race_checker(space, units, store, uninit_check) \
                    if units.r == 1 and kind != "atomic" else spanning
            current[1](flat, g, frame, value)
        return check

    # ------------------------------------------------------------------ results
    def finish(self) -> dict:
        """Counters of the launch (keys in docs/SIMULATOR_DESIGN.md) and the per-thread table."""
        self.close_race()
        self.flush()
        self._add_pending()
        self._patterns.clear()
        c = dict(self.counts)
        c["sectors_per_request"] = (
            (c["global_load_sectors"] + c["global_store_sectors"]) /
            max(1, c["global_load_requests"] + c["global_store_requests"]))
        c["wavefronts_per_shared_request"] = c["bank_conflict_wavefronts"] / max(
            1, c["shared_requests"])
        c["max_global_loads_per_thread"] = int(self.per_thread["global_loads"].max(initial=0))
        c["max_global_stores_per_thread"] = int(self.per_thread["global_stores"].max(initial=0))
        c["threads_launched"] = self.config.n_blocks * self.tpb
        c["atomic_same_address"] = max(self._atomic_hits.values(), default=0)
        shape = (self.config.n_blocks, self.tpb)
        c["threads"] = {k: v.reshape(shape) for k, v in self.per_thread.items()}
        c["lines"] = self._line_report()
        return c
