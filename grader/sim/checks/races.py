"""Races: one shadow record per element of each allocation, reset every launch.

The record holds the last writer (global thread id, its block's barrier epoch, its warp's
syncwarp epoch, atomic or not, its threadfence count), the last reader (or "several
readers" of one block epoch, and whether they are all of one warp and its syncwarp epoch:
warp-synchronous code reads a neighbour's element, syncwarps, then stores its own) and, once
readers of two blocks read the element since its last write, the last reader of a block other
than the last reader's: a write by either block still meets a read by the other (an in-place
update whose neighbours belong to the next block).
Two accesses conflict when they come from different threads, at least one writes, they are not
both atomic, and nothing orders them (ordering.py): the same block with a barrier in between,
the same warp with a syncwarp in between, or (a write read by another block) a threadfence by
the writer after it and, on the reader's side, a global atomic by the reading thread, or by a
thread of its block before a barrier the reader passed (the "last block" pattern: write, fence,
atomic counter; the block that sees the count reads).
Blocks are not ordered on a GPU: a fence alone orders nothing, so a read of another block's
fenced write with no acquire is a race even though the simulator happens to run that block
first. Two lanes of one store instruction storing different values to one element race; silent
stores are no accesses (silent_stores.py).

Dynamic shared memory (kernel_arrays.DynamicShared) has one record per unit of its bytes,
whichever view an access goes through: an access to an element spanning `r` units is an access
to each of them (`_race_units`, `_race_units1`), so threads touching overlapping bytes through
two views conflict; silent stores are judged on the element, as everywhere.

Two paths apply the one rule: `_race_vec` for an instruction's lanes (numpy shadows, `Shadow`)
and `_race1` / the `_race_checker` closures for one lane at a time (Python lists in a dict per
allocation, several times cheaper from Python than numpy scalars).
"""

from __future__ import annotations

import numpy as np

from ..errors import RaceError
from ..sites import in_library
from ..geometry import WARP, Lanes
from .findings import check_then_store
from .silent_stores import quiet_lanes, same_bits_recorder
from .uninitialised import flags_view


class Shadow:
    """Race shadow of one allocation for one launch (the vector path)."""

    __slots__ = ("w_thr", "w_ep", "w_wep", "w_atomic", "w_fence", "w_line", "r_thr", "r_ep", "r_wep",
                 "r_line", "r_warp", "x_thr", "x_ep", "x_line", "s_thr", "s_ep", "s_wep", "s_line",
                 "written", "read", "atomic", "xread", "silent")

    def __init__(self, n: int):
        # has anything been written / read / written by an atomic (while not, the matching
        # arrays still hold their initial values and need not be consulted)
        self.written = self.read = self.atomic = self.xread = self.silent = False
        self.w_thr = np.full(n, -1, np.int64)
        self.w_ep = np.zeros(n, np.int64)
        self.w_wep = np.zeros(n, np.int64)
        self.w_atomic = np.zeros(n, bool)
        self.w_fence = np.zeros(n, np.int64)
        self.w_line = np.zeros(n, np.int32)  # the source line of the last write (for the message)
        self.r_thr = np.full(n, -1, np.int64)  # -1 none, >= 0 thread, <= -2: several of block -r-2
        self.r_ep = np.zeros(n, np.int64)
        self.r_wep = np.zeros(n, np.int64)
        self.r_line = np.zeros(n, np.int32)  # the source line of the last read
        # several readers (r_thr <= -2) all of one warp at warp epoch r_wep: that warp (block * wpb
        # + warp), else -1; a syncwarp of that warp orders them before its later accesses
        self.r_warp = np.full(n, -1, np.int64)
        # a reader of a block other than the last reader's (as r_thr; -1 none), its epoch and
        # line: allocated when first needed (`other_readers`)
        self.x_thr = self.x_ep = self.x_line = None
        # the last silent store (silent_stores.py), for atomics only (as x_: when first needed)
        self.s_thr = self.s_ep = self.s_wep = self.s_line = None

    def silent_writers(self) -> tuple:
        if self.s_thr is None:
            n = self.r_thr.shape[0]
            self.s_thr = np.full(n, -1, np.int64)
            self.s_ep = np.zeros(n, np.int64)
            self.s_wep = np.zeros(n, np.int64)
            self.s_line = np.zeros(n, np.int32)
        self.silent = True
        return self.s_thr, self.s_ep, self.s_wep, self.s_line

    def other_readers(self) -> tuple:
        if self.x_thr is None:
            n = self.r_thr.shape[0]
            self.x_thr = np.full(n, -1, np.int64)
            self.x_ep = np.zeros(n, np.int64)
            self.x_line = np.zeros(n, np.int32)
        self.xread = True
        return self.x_thr, self.x_ep, self.x_line


class RaceChecks:
    """Mixin of `memory.Instrument` (reads config, tpb, wpb, written; the epochs of
    `Ordering`; reports through `_fail`)."""

    def _init_races(self) -> None:
        self._shadows: dict[int, Shadow] = {}  # buffer id -> vector shadow
        self._shadows1: dict[int, dict[int, list]] = {}  # buffer id -> {flat: record}
        # a race of two threads of one warp (in a block of several warps) whose advice waits
        # for the rest of its barrier interval: `_race_msg`'s arguments, or None
        self._open_race: tuple | None = None
        # the scalar path's silent stores: buffer id -> {flat: (thread, epoch, warp epoch, line)}
        self._silent1: dict[int, dict[int, tuple[int, int, int, int]]] = {}
        # source lines run by threads of several warps of one block (lockstep): code of the whole
        # block, whose missing barrier is a syncthreads() even where the race found is in one warp
        # (a tree reduction whose other warps' stores were silent: they added zeros)
        self._block_wide_lines: set[int] = set()

    def close_race(self, warp_only: bool = True) -> None:
        """Report the race left open, if any: with cuda.syncwarp() as the advice when
        `warp_only` (no conflict between warps of its block came up since), else
        syncthreads(). Called at the block's next barrier, at another finding, at the end of
        the launch (also when it ends with an error)."""
        found, self._open_race = self._open_race, None
        if found is not None:
            self._race_msg(*found, warp_only=warp_only)

    def _shadow(self, handle) -> Shadow:
        sh = self._shadows.get(handle.buffer_id)
        if sh is None:
            sh = self._shadows[handle.buffer_id] = Shadow(handle.initialised.shape[0])
        return sh

    def refine(self, memory, factor: int) -> None:
        """`memory`'s units were split into `factor` each (a view of a smaller dtype): each
        record becomes `factor` copies, one per new unit."""
        sh = self._shadows.get(memory.buffer_id)
        if sh is not None:
            new = Shadow(memory.flags.shape[0])  # (a trailing partial unit now counts)
            for name in Shadow.__slots__:
                value = getattr(sh, name)
                if isinstance(value, np.ndarray):
                    split = np.repeat(value, factor)
                    if getattr(new, name) is None:
                        new.other_readers() if name.startswith("x_") else new.silent_writers()
                    getattr(new, name)[:split.shape[0]] = split
                else:
                    setattr(new, name, value)
            self._shadows[memory.buffer_id] = new
        records = self._shadows1.get(memory.buffer_id)
        if records:
            split = {f * factor + j: list(rec) for f, rec in records.items()
                     for j in range(factor)}
            records.clear()
            records.update(split)

    def _race_units(self, space, handle, kind, flat, lanes, line, filename, pat=None,
                    values=None):
        """`_race_vec` for a view of dynamic shared memory: silent lanes left out on the
        element, then the rule on each unit the lanes' elements span."""
        units = handle.memory.units(handle)
        r = units.r
        if r == 1:  # the view's positions are the units
            self._race_vec(space, units, kind, flat, lanes, line, filename, pat, values)
            return
        if values is not None and flat.shape[0]:
            kept = self._loud(handle, flat, lanes, values, pat)
            if kept is None:
                return
            flat, lanes, _, _ = kept
        for j in range(r):
            self._race_vec(space, units, kind, flat * r + j, lanes, line, filename)

    def _loud(self, handle, flat, lanes, values, pat, line=None):
        """The lanes of a store that change what memory holds: (flat, lanes, pat, dups) with the
        silent lanes (silent_stores.quiet_lanes) left out, or None when every lane is silent.
        With `line`, the silent lanes are kept as the elements' last silent stores (for atomics)."""
        dups = duplicate_lanes(flat, lanes, pat) if flat.shape[0] > 1 else None
        quiet = quiet_lanes(handle, flat, values, dups)
        if quiet is None:
            return flat, lanes, pat, dups
        if line is not None:
            q = np.flatnonzero(quiet)
            s_thr, s_ep, s_wep, s_line = self._shadow(handle).silent_writers()
            ep, wep = self._lane_epochs(lanes)
            f = flat[q]
            s_thr[f], s_ep[f], s_wep[f], s_line[f] = lanes.g[q], ep[q], wep[q], line
        keep = np.flatnonzero(~quiet)
        if keep.shape[0] == 0:
            return None
        return flat[keep], Lanes(lanes.block[keep], lanes.thread[keep], self.tpb, self.wpb), None, None

    def _race_units1(self, space, handle, kind, flat, block, g, line, filename):
        """`_race1` for a view of dynamic shared memory (the caller left out silent stores)."""
        units = handle.memory.units(handle)
        r = units.r
        for j in range(r):
            self._race1(space, units, kind, flat * r + j, block, g, line, filename)

    def silent_store1(self, handle, flat: int, block: int, g: int, line: int) -> None:
        """Thread `g`'s store at `flat` is silent (the scalar path): kept for later atomics."""
        if self._stale1:
            self._sync1()
        wep = self._wep1[self._warp_of(g)]
        self._silent1.setdefault(handle.buffer_id, {})[flat] = (g, self._ep1[block], wep, line or 0)

    def _thread_words(self, g) -> str:
        """Global thread `g` in a message: "thread (3, 0, 0) of block (1, 0, 0)"."""
        ob, ot = divmod(int(g), self.tpb)
        return f"thread {self.config.thread_xyz(ot)} of block {self.config.block_xyz(ob)}"

    def _silent_race(self, space, handle, flat, other, block, thread, line, filename, other_line) -> None:
        """An atomic unordered with a silent store of another thread: the store changed nothing as
        the simulator ran it, but on a GPU it may land after the atomic and undo its update (an
        accumulator reset in the kernel that adds into it, over memory already zero)."""
        ob = int(other) // self.tpb
        at = f" at line {other_line}" if other_line and other_line != line else ""
        who = self._thread_words(other)
        self._fail(RaceError,
                   f"data race on {space} array {handle.name!r} at index {self._index_of(handle, flat)}: atomic "
                   f"conflicts with a store{at} by {who}, which nothing orders before it"
                   f"{' (another block)' if ob != block else ''}: that store wrote the value the element already "
                   f"held, so here it changed nothing, but on a GPU it may land after this atomic and undo it. "
                   f"Resetting an accumulator in the kernel that adds into it? Set it before the launch (on the "
                   f"host, or in a kernel of its own){self._alias_note(space, handle)}", block, thread, line,
                   filename, handle.name, self._index_of(handle, flat))

    def _race_msg(self, space, handle, kind, flat, other, other_kind, block, thread, line,
                  filename, other_line=0, warp_only=None):
        """Report a conflict with `other`: a global thread id, or <= -2 for several readers
        of block -other - 2; `other_line`: the line of its access (0: not known);
        `warp_only` (set by `close_race`): whether cuda.syncwarp() would order every conflict
        of the race's barrier interval."""
        who = f"other threads of block {self.config.block_xyz(-other - 2)}" if other <= -2 else \
            self._thread_words(other)
        if filename and filename != self.filename and in_library(filename):
            other_line = 0  # lines of numba's own code: the finding names the student's call
        same_block = (-other - 2 if other <= -2 else int(other) // self.tpb) == block
        # two threads of one warp want cuda.syncwarp(): a syncthreads() in code only that warp
        # runs (`if t < 32:`, the classic unrolled last warp) is a barrier the others never reach
        same_warp = other > -2 and same_block and int(other) % self.tpb // WARP == int(thread) // WARP
        if warp_only is None:
            if same_warp and self.wpb > 1:
                # The first conflict is within a warp, but the same missing barrier may also
                # leave warps unordered (a tile loaded by the whole block, read row by row):
                # a syncwarp() would only move the race. Decide when the interval ends.
                if self._open_race is None:
                    self._open_race = (space, handle, kind, flat, other, other_kind, block,
                                       thread, line, filename, other_line)
                return
            if self._open_race is not None and same_block and other > -2:
                self.close_race(warp_only=False)  # threads of two warps: syncthreads()
            warp_only = same_warp
        # only one warp's threads conflicted: syncwarp(), unless the lines are the whole block's code
        wide = warp_only and bool({line, other_line} & self._block_wide_lines)
        same_warp = warp_only and not wide
        barrier = "cuda.syncwarp()" if same_warp else \
            "syncthreads() (or cuda.syncwarp(), where one warp's threads alone take part)" if other <= -2 or wide \
            else "syncthreads()"
        why = (" (the threads of a warp are not in lockstep since Volta: warp-synchronous code needs "
               "cuda.syncwarp() between its steps)") if same_warp else ""
        atomic = None
        if {kind, other_kind} == {"load", "store"} and other_line and line and other_line != line:
            store_line, load_line = (line, other_line) if kind == "store" else (other_line, line)
            atomic = check_then_store(filename or self.filename, store_line, load_line)
        if atomic:  # `if a[i] < v: a[i] = v` by many threads: no barrier makes the check and store one step
            other_block = "" if space == "shared" or same_block else \
                "from another block (use an atomic, or a separate launch) "
            hint = (f"{other_block}in a check-then-store (line {load_line} checks, line {store_line} stores: "
                    f"another thread may store in between); no barrier makes the two one step, an atomic does: "
                    f"{atomic}")
        elif not (space == "shared" or same_block):
            hint = "from another block (use an atomic, or a separate launch)"
        elif kind == other_kind == "store" and other_line == line:  # one statement: no barrier orders it
            hint = ("at the same line: no barrier orders two threads' stores of one statement, and the last one wins "
                    "in no set order; give each thread its own element (is the index right?), or combine the values "
                    "with an atomic (cuda.atomic.add, cuda.atomic.max)")
        elif other_line and line and other_line != line:
            hint = f"with no {barrier} between lines {min(other_line, line)} and {max(other_line, line)}{why}"
        elif other_line and line:
            hint = (f"with no {barrier} in between (line {line} does both: one pass's {other_kind} "
                    f"and the next pass's {kind} need a barrier between them; threads updating one element in the "
                    f"same pass, as a histogram's hist[a[i]] += 1 does, need an atomic: cuda.atomic.add){why}")
        else:
            hint = f"with no {barrier} in between{why}"
        at = f" at line {other_line}" if other_line and other_line != line else ""
        self._fail(RaceError,
                   f"data race on {space} array {handle.name!r} at index "
                   f"{self._index_of(handle, flat)}: {kind} conflicts with {'an' if other_kind == 'atomic' else 'a'} "
                   f"{other_kind}{at} by {who}{self._alias_note(space, handle)} {hint}", block, thread, line,
                   filename, handle.name, self._index_of(handle, flat))

    def _alias_note(self, space, handle) -> str:
        """Where the raced array was passed as two arguments (`k[g, b](a, a)`), what a message
        adds: the two names are one memory, the likely cause; "" otherwise."""
        note = self.aliases.get(handle.buffer_id) if space == "global" else None
        return f" ({note})" if note else ""

    def _race1(self, space, handle, kind, flat, block, g, line, filename):
        if self._stale1:
            self._sync1()
        shadows = self._shadows1.get(handle.buffer_id)
        if shadows is None:
            shadows = self._shadows1[handle.buffer_id] = {}
        rec = shadows.get(flat)
        ep = self._ep1[block]
        wep = self._wep1[self._warp_of(g)]
        if kind == "atomic" and self._silent1:
            quiet = self._silent1.get(handle.buffer_id, {}).get(flat)
            if quiet is not None and not self._ordered1(quiet[0], quiet[1], quiet[2], g, block):
                self._silent_race(space, handle, flat, quiet[0], block, g % self.tpb, line, filename, quiet[3])
        if rec is None:
            # [writer, its epoch, its warp epoch, atomic?, its fences, reader, epoch, warp epoch,
            #  the writer's line, the reader's line, a reader of another block than the reader's,
            #  its epoch, its line, the one warp of several readers (Shadow.r_warp)]
            rec = shadows[flat] = [-1, 0, 0, False, 0, -1, 0, 0, 0, 0, -1, 0, 0, -1]
        thread = g % self.tpb
        wt = rec[0]
        if wt >= 0 and wt != g and not (kind == "atomic" and rec[3]) and \
                not self._ordered1(wt, rec[1], rec[2], g, block):
            if not (kind == "load" and wt // self.tpb != block
                    and self._fence1.get(wt, 0) > rec[4] and self._has_acquired(block, g)):
                self._race_msg(space, handle, kind, flat, wt, "atomic" if rec[3] else "store",
                               block, thread, line, filename, rec[8])
        rt = rec[5]
        if kind == "load":
            if rt == -1 or rt == g:
                rec[5] = g
            elif (-rt - 2 if rt <= -2 else rt // self.tpb) != block:
                if rec[6] >= self.grid_floor:  # not ordered before any later access: keep it
                    rec[10], rec[11], rec[12] = rt, rec[6], rec[9]
                rec[5] = g
            elif rt <= -2:
                self._several1(rec, g, block, ep, wep, rec[13])
            elif self._ordered1(rt, rec[6], rec[7], g, block):
                rec[5] = g
            else:
                self._several1(rec, g, block, ep, wep, self._warp_of(rt))
            rec[6], rec[7], rec[9] = ep, wep, line or 0
            return
        conflict = False
        if rt != -1 and rt != g:
            if rt <= -2:
                conflict = ((-rt - 2) != block or rec[6] == ep) and rec[6] >= self.grid_floor and not (
                    rec[13] == self._warp_of(g) and rec[7] != wep)  # (one warp's, syncwarp since)
            else:
                conflict = not self._ordered1(rt, rec[6], rec[7], g, block)
            if conflict:
                self._race_msg(space, handle, kind, flat, rt, "load", block, thread, line,
                               filename, rec[9])
        if not conflict and rec[10] != -1 and rec[11] >= self.grid_floor:
            # the reader is of this block (one of another block conflicted, unless a grid sync
            # ordered it, and the other reader with it): the other reader's block is not
            self._race_msg(space, handle, kind, flat, rec[10], "load", block, thread, line,
                           filename, rec[12])
        rec[0], rec[1], rec[2], rec[3], rec[4], rec[5] = (g, ep, wep, kind == "atomic",
                                                          self._fence1.get(g, 0), -1)
        rec[8], rec[10] = line or 0, -1

    def _several1(self, rec, g: int, block: int, ep: int, wep: int, readers_warp: int) -> None:
        """Thread `g` reads an element that unordered readers of its block read (all of warp
        `readers_warp`, or -1): several readers now, of one warp while all are of g's; readers of
        g's warp at an earlier syncwarp epoch (same block epoch) are ordered before g: g alone."""
        warp = self._warp_of(g)
        if rec[5] <= -2 and rec[6] != ep or readers_warp == warp and rec[7] != wep:
            rec[5] = g
        else:
            rec[5], rec[13] = -block - 2, warp if readers_warp == warp else -1

    def _race_vec(self, space, handle, kind, flat, lanes, line, filename, pat=None,
                  values=None):
        """The race rule of the module docstring for one instruction. Cheap tests settle most
        lanes (nothing recorded yet, the same thread, a barrier of the block in between); the
        exact rule runs on the lanes left. `values` (stores): what the lanes store; silent
        lanes (silent_stores.quiet_lanes) are left out of the rule and of the shadow."""
        dups = None
        if line not in self._block_wide_lines and self.wpb > 1 and flat.shape[0] > 1:
            b, w = lanes.block, lanes.warp  # (before silent lanes are left out: they ran the line too)
            if bool(((w[1:] != w[:-1]) & (b[1:] == b[:-1])).any()):
                self._block_wide_lines.add(line)
        if values is not None and flat.shape[0]:
            kept = self._loud(handle, flat, lanes, values, pat, line or 0)
            if kept is None:
                return
            flat, lanes, pat, dups = kept
        sh = self._shadow(handle)
        block, thread, g, w = lanes.block, lanes.thread, lanes.g, lanes.warp
        ep, wep = self._lane_epochs(lanes)
        tpb = self.tpb
        if kind == "atomic" and sh.silent:  # against a silent store nothing orders before it
            st = sh.s_thr[flat]
            cand = (st >= 0) & (st != g)
            if cand.any():
                sub = np.flatnonzero(cand)
                f = flat[sub]
                bad = ~self._ordered_vec(st[sub], sh.s_ep[f], sh.s_wep[f], g[sub], block[sub], w[sub], ep[sub],
                                         wep[sub])
                if bad.any():
                    i = int(sub[np.argmax(bad)])
                    self._silent_race(space, handle, int(flat[i]), int(st[i]), int(block[i]), int(thread[i]),
                                      line, filename, int(sh.s_line[flat[i]]))
        # against the previous writer
        if sh.written:
            wt = sh.w_thr[flat]
            cand = (wt >= 0) & (wt != g)
            if kind == "atomic" and sh.atomic:
                cand &= ~sh.w_atomic[flat]
            if cand.any():
                cand &= (wt // tpb != block) | (sh.w_ep[flat] == ep)
            if cand.any():
                sub = np.flatnonzero(cand)
                f, o, bs = flat[sub], wt[sub], block[sub]
                bad = ~self._ordered_vec(o, sh.w_ep[f], sh.w_wep[f], g[sub], bs, w[sub],
                                         ep[sub], wep[sub])
                if kind == "load":
                    fenced = (o // tpb != bs) & (self.fences[o] > sh.w_fence[f])
                    if fenced.any():
                        fenced &= self._have_acquired(bs, g[sub], ep[sub])
                    bad &= ~fenced
                if bad.any():
                    i = int(sub[np.argmax(bad)])
                    self._race_msg(space, handle, kind, int(flat[i]), int(wt[i]),
                                   "atomic" if sh.w_atomic[flat[i]] else "store", int(block[i]),
                                   int(thread[i]), line, filename, int(sh.w_line[flat[i]]))
        if kind != "load":
            # against earlier readers
            if sh.read:
                rt = sh.r_thr[flat]
                cand = (rt != -1) & (rt != g)
                if cand.any():
                    rb = np.where(rt <= -2, -rt - 2, rt // tpb)  # the readers' block
                    cand &= (rb != block) | (sh.r_ep[flat] == ep)
                if cand.any():
                    sub = np.flatnonzero(cand)
                    f, rs, bs, eps = flat[sub], rt[sub], block[sub], ep[sub]
                    r_ep = sh.r_ep[f]
                    multi = rs <= -2
                    ordered = self._ordered_vec(np.maximum(rs, 0), r_ep, sh.r_wep[f], g[sub],
                                                bs, w[sub], eps, wep[sub])
                    # several readers: a barrier of their block since, or a syncwarp of their one warp
                    multi_ok = multi & ((((-rs - 2) == bs) & ((r_ep != eps) | (
                        (sh.r_warp[f] == w[sub]) & (sh.r_wep[f] != wep[sub])))) | (r_ep < self.grid_floor))
                    bad = np.where(multi, ~multi_ok, ~ordered)
                    if bad.any():
                        i = int(sub[np.argmax(bad)])
                        self._race_msg(space, handle, kind, int(flat[i]), int(rt[i]), "load",
                                       int(block[i]), int(thread[i]), line, filename,
                                       int(sh.r_line[flat[i]]))
                if sh.xread:
                    self._race_other_block_reader(sh, space, handle, kind, flat, lanes, rt, line, filename)
            if kind == "store" and flat.shape[0] > 1:
                # two lanes of one instruction storing to one element
                pair = (dups or duplicate_lanes(flat, lanes, pat))[0]
                if pair is not None:
                    i, j = pair
                    self._race_msg(space, handle, kind, int(flat[i]), int(g[j]), "store",
                                   int(block[i]), int(thread[i]), line, filename, line)
            sh.w_thr[flat] = g
            sh.w_ep[flat], sh.w_wep[flat] = ep, wep
            sh.w_line[flat] = line or 0
            if kind == "atomic" or sh.atomic:
                sh.w_atomic[flat] = kind == "atomic"
                sh.atomic = True
            if self._fenced:  # else every fence count is 0, as w_fence already is
                sh.w_fence[flat] = self.fences[g]
            if sh.read:
                sh.r_thr[flat] = -1
            if sh.xread:
                sh.x_thr[flat] = -1
            sh.written = True
        else:
            # readers: one thread, or "several of this block epoch"
            dups = duplicate_lanes(flat, lanes, pat) if flat.shape[0] > 1 else (None, None, False, None)
            if lanes.neg_block is None:
                lanes.neg_block = -block - 2
            rt = sh.r_thr[flat]
            other_block = self._keep_other_block_reader(sh, rt, flat, lanes) if sh.read else None
            if dups[2]:  # every lane shares its element with another lane
                new = lanes.neg_block
            else:
                keep = (rt == -1) | (rt == g)
                if not keep.all():  # (something was read: other_block is set)
                    self._keep_reader(sh, keep, rt, flat, lanes, ep, wep, other_block)
                new = np.where(keep, g, lanes.neg_block)
                if dups[1] is not None:
                    new = np.where(dups[1], lanes.neg_block, new)
            if dups[2] or (new <= -2).any():
                sh.r_warp[flat] = self._readers_warp(sh, rt, flat, lanes, ep, dups[3])
            sh.r_thr[flat] = new
            sh.r_ep[flat], sh.r_wep[flat] = ep, wep
            sh.r_line[flat] = line or 0
            sh.read = True

    def _readers_warp(self, sh, rt, flat, lanes, ep, one_warp) -> np.ndarray:
        """Where the lanes leave several readers (`Shadow.r_warp`): the lane's warp while every
        unordered reader of its element is of that warp (the earlier ones, and the lanes of this
        instruction sharing it: `one_warp`, None when none share), else -1."""
        warp = lanes.warp
        earlier = (rt == -1) | (rt == lanes.g) | (sh.r_ep[flat] != ep) | np.where(
            rt <= -2, (sh.r_warp[flat] == warp) | (-rt - 2 != lanes.block),
            (rt // self.tpb != lanes.block) | (self._warp_of(rt) == warp))
        if one_warp is not None:
            earlier &= one_warp
        return np.where(earlier, warp, -1)

    def _keep_other_block_reader(self, sh, rt, flat, lanes) -> np.ndarray:
        """Where a lane takes the place of its element's reader `rt` of another block (not
        ordered before every later access by a grid sync), that reader stays as the element's
        reader of another block (`Shadow.x_thr`): a write by the lane's block still meets it.
        Returns the lanes whose earlier reader is of another block (`_keep_reader` uses it)."""
        # a thread outside [block * tpb, (block + 1) * tpb) (negative offsets wrap to huge
        # unsigned ones, -1 among them), or several readers of another block
        tpb, base = self.tpb, lanes.block * self.tpb
        other = ((rt - base).view(np.uint64) >= tpb) & (rt != lanes.neg_block)
        cross = other & (rt != -1)
        if self.grid_floor:
            cross &= sh.r_ep[flat] >= self.grid_floor
        if sh.xread and cross.any():
            # one kept already of a block other than the lane's still is one: only a missing
            # one, or one of the lane's block, is replaced (elements read by block after block)
            xt = sh.x_thr[flat]
            cross &= (xt == -1) | ((xt - base).view(np.uint64) < tpb) | (xt == lanes.neg_block)
        if cross.any():
            sub = np.flatnonzero(cross)
            f = flat[sub]
            x_thr, x_ep, x_line = sh.other_readers()
            x_thr[f], x_ep[f], x_line[f] = rt[sub], sh.r_ep[f], sh.r_line[f]
        return other

    def _race_other_block_reader(self, sh, space, handle, kind, flat, lanes, rt, line, filename) -> None:
        """A write's lanes against their elements' readers of another block (`Shadow.x_thr`),
        where the element's reader `rt` is of the lane's own block (one of another block met the
        rule already): the other reader's block is not, and only a grid sync orders them."""
        xt = sh.x_thr[flat]
        cand = xt != -1
        if not cand.any():
            return
        sub = np.flatnonzero(cand)
        rs, bs = rt[sub], lanes.block[sub]
        bad = ((rs - bs * self.tpb).view(np.uint64) < self.tpb) | (rs == -bs - 2)
        if self.grid_floor:
            bad &= sh.x_ep[flat[sub]] >= self.grid_floor
        if bad.any():
            i = int(sub[np.argmax(bad)])
            self._race_msg(space, handle, kind, int(flat[i]), int(xt[i]), "load", int(lanes.block[i]),
                           int(lanes.thread[i]), line, filename, int(sh.x_line[flat[i]]))

    def _keep_reader(self, sh, keep, rt, flat, lanes, ep, wep, other_block) -> None:
        """Set `keep` where a lane replaces the earlier reader `rt` of its element as the one
        reader (the rest become "several readers of their block epoch"), as `_race_checker`'s
        scalar rule: the earlier reader is of another block (`other_block`), or of another
        block epoch, or ordered before the lane. Only a single reader of the same block epoch
        needs the ordering test, so a grid-stride loop whose elements pass from block to block
        (every lane's earlier reader in another block) never pays for it."""
        sub = np.flatnonzero(~keep)
        whole = sub.shape[0] == keep.shape[0]  # no gathers when every lane is undecided
        f = flat if whole else flat[sub]
        rs = rt if whole else rt[sub]
        bs = lanes.block if whole else lanes.block[sub]
        eps = ep if whole else ep[sub]
        r_ep = sh.r_ep[f]
        ks = other_block | (r_ep != eps) if whole else other_block[sub] | (r_ep != eps)
        several = ~ks & (rs <= -2)
        if several.any():  # several readers, all of the lane's warp, before a syncwarp of it
            at = several if whole else sub[several]
            wf = f[several]
            ks[several] = (sh.r_warp[wf] == lanes.warp[at]) & (sh.r_wep[wf] != wep[at])
        close = np.flatnonzero(~ks & (rs >= 0))  # one reader, of this block epoch
        if close.shape[0]:
            at = close if whole else sub[close]
            ks[close] = self._ordered_vec(rs[close], r_ep[close], sh.r_wep[f[close]],
                                          lanes.g[at], bs[close], lanes.warp[at], eps[close],
                                          wep[at])
        if whole:
            keep[:] = ks
        else:
            keep[sub] = ks

    def _race_checker(self, space, handle, store, uninit_check):
        """`scalar_checker` with the race checker on: the cases `_race1` settles without a
        finding (nothing recorded, the same thread, a barrier of the block in between) are
        done inline; anything else goes through `_race1` itself. A silent store (the bits
        already there, element initialised) skips the race shadow altogether."""
        tpb, wpb = self.tpb, self.wpb
        init, written, name = flags_view(handle.initialised), self.written, handle.name
        is_global = space == "global"
        kind = "store" if store else "load"
        shadows = self._shadows1.setdefault(handle.buffer_id, {})
        ep1, wep1, fence1 = self._ep1, self._wep1, self._fence1
        race1, ordered1, several1, uninit = self._race1, self._ordered1, self._several1, self._uninit
        silent = self.silent_store1
        inst = self
        same = same_bits_recorder(handle.flat) if store else None

        def check(flat, g, frame, value=None):
            if uninit_check and not init[flat]:
                uninit(space, handle, flat, g // tpb, g % tpb, frame.f_lineno,
                       frame.f_code.co_filename)
            if store:
                if init[flat] and value is not None and same(flat, value):
                    silent(handle, flat, g // tpb, g, frame.f_lineno)  # (for atomics only)
                    return  # it changes nothing, so it neither races nor orders
                init[flat] = True
                if is_global:
                    written.add(name)
            if inst._stale1:
                inst._sync1()
            block = g // tpb
            r = shadows.get(flat)
            if r is None:
                r = shadows[flat] = [-1, 0, 0, False, 0, -1, 0, 0, 0, 0, -1, 0, 0, -1]
            ep = ep1[block]
            wt = r[0]
            rt = r[5]
            if (wt < 0 or wt == g or (wt // tpb == block and r[1] != ep)) and (
                    not store or r[10] == -1 and (rt == -1 or rt == g or r[6] != ep and (
                        -rt - 2 == block if rt <= -2 else rt // tpb == block))):
                wep = wep1[block * wpb + (g % tpb) // WARP]
                if store:
                    r[0], r[1], r[2], r[3], r[4], r[5] = g, ep, wep, False, fence1.get(g, 0), -1
                    r[8] = frame.f_lineno
                else:
                    if rt == -1 or rt == g:
                        r[5] = g
                    elif (-rt - 2 if rt <= -2 else rt // tpb) != block:
                        if r[6] >= inst.grid_floor:  # as _race1: the reader of another block stays
                            r[10], r[11], r[12] = rt, r[6], r[9]
                        r[5] = g
                    elif rt <= -2:
                        several1(r, g, block, ep, wep, r[13])
                    elif r[6] != ep or ordered1(rt, r[6], r[7], g, block):
                        r[5] = g
                    else:
                        several1(r, g, block, ep, wep, block * wpb + (rt % tpb) // WARP)
                    r[6], r[7], r[9] = ep, wep, frame.f_lineno
            else:
                race1(space, handle, kind, flat, block, g, frame.f_lineno,
                      frame.f_code.co_filename)
        return check


def duplicate_lanes(flat, lanes, pat=None):
    """Lanes of one instruction on one element: (first pair (i, j) in element order or
    None, mask of the lanes sharing an element or None, every lane shares, mask of the lanes
    whose element only lanes of their warp share or None). Kept on the pattern (shifting every
    position keeps the answer)."""
    if pat is not None and pat.dups is not None:
        return pat.dups
    if bool((flat[1:] > flat[:-1]).all()):
        out = (None, None, False, None)  # increasing positions (a lane each), no sort needed
        if pat is not None:
            pat.dups = out
        return out
    order = np.argsort(flat if pat is None else pat.vec_flat, kind="stable")
    fs = flat[order]
    dup = fs[1:] == fs[:-1]
    if not lanes.ordered:  # the same thread twice is no conflict
        gs = lanes.g[order]
        dup &= gs[1:] != gs[:-1]
    if dup.any():
        k = int(np.argmax(dup))
        shared = np.zeros(flat.shape[0], bool)
        shared[order[1:][dup]] = True
        shared[order[:-1][dup]] = True
        # each element's lanes (a run of the sorted order): all of one warp?
        starts = np.flatnonzero(np.concatenate(([True], fs[1:] != fs[:-1])))
        warps = lanes.warp[order]
        one = np.minimum.reduceat(warps, starts) == np.maximum.reduceat(warps, starts)
        one_warp = np.empty(flat.shape[0], bool)
        one_warp[order] = np.repeat(one, np.diff(np.append(starts, flat.shape[0])))
        out = ((int(order[1:][k]), int(order[:-1][k])), shared, bool(shared.all()), one_warp)
    else:
        out = (None, None, False, None)
    if pat is not None:
        pat.dups = out
    return out
