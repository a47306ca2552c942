"""What orders two accesses for the race rule (races.py): the synchronisation events.

- a barrier (syncthreads) starts a new epoch of its block, and of each of its warps;
- a grid sync (cooperative groups) is a barrier of every block that also orders blocks: all
  blocks continue from one common epoch, `grid_floor`, and an access of another block recorded
  at an epoch below it happened before the sync (every access since has an epoch at or above);
- a syncwarp starts a new epoch of its warp;
- a threadfence counts per thread: a write followed by a fence of its writer is visible to
  other blocks;
- a global atomic is an acquire: after one by the reading thread, or by a thread of its block
  before a barrier the reader passed, a load of another block's fenced write is ordered (the
  "last block" pattern). Blocks are not ordered on a GPU: a fence alone orders nothing.

Epochs and fences exist twice: numpy vectors for the vector path, Python lists and dicts for
the scalar path (one element at a time from Python is several times cheaper there). A barrier of
many blocks at once (lockstep) updates the vectors only and marks the scalar twins stale.
"""

from __future__ import annotations

import numpy as np

from ..geometry import WARP


class Ordering:
    """Mixin of `memory.Instrument` (reads tpb, wpb, counts)."""

    def _init_ordering(self, n_blocks: int) -> None:
        self.epoch = np.zeros(n_blocks, np.int64)
        self.wepoch = np.zeros(n_blocks * self.wpb, np.int64)
        self.fences = np.zeros(n_blocks * self.tpb, np.int64)
        self._sync_ver = 0  # barriers + syncwarps so far (Lanes keep their epochs per version)
        self.grid_floor = 0  # the epoch every block started from at the last grid sync
        self._fenced = False  # any threadfence yet
        # scalar path: Python-side twins of the epochs and fences
        self._ep1 = [0] * n_blocks
        self._wep1 = [0] * (n_blocks * self.wpb)
        self._stale1 = False  # epochs changed by a vector barrier, not yet in _ep1 / _wep1
        self._fence1: dict[int, int] = {}
        # acquires (the module docstring)
        self._acq1: set[int] = set()          # threads that did a global atomic
        self._acq_ep1: dict[int, int] = {}    # block -> its epoch at its first global atomic

    # ------------------------------------------------------------------ events
    def barrier(self, block_ids, line=None) -> None:
        """A syncthreads completed for these blocks."""
        block_ids = np.atleast_1d(np.asarray(block_ids, np.int64))
        if self._open_race is not None and (block_ids == self._open_race[6]).any():
            self.close_race()  # its interval ended with no conflict between warps
        self.epoch[block_ids] += 1
        self._sync_ver += 1
        if block_ids.shape[0] > 4:  # many blocks (lockstep): vectors now, scalar twins later
            self.wepoch.reshape(-1, self.wpb)[block_ids] += 1
            self._stale1 = True
        else:
            self._sync1()
            for b in block_ids.tolist():
                self.wepoch[b * self.wpb:(b + 1) * self.wpb] += 1
                self._ep1[b] += 1
                for w in range(b * self.wpb, (b + 1) * self.wpb):
                    self._wep1[w] += 1
        self.counts["barriers"] += int(block_ids.shape[0])

    def grid_sync(self, line=None) -> None:
        """A grid sync completed: a barrier of every block, after which every block's epoch
        is one value above all earlier ones (the new `grid_floor`)."""
        self.close_race()
        self._sync1()
        floor = int(self.epoch.max()) + 1
        self.epoch[:] = floor
        self.wepoch += 1
        self._ep1[:] = self.epoch.tolist()
        self._wep1[:] = self.wepoch.tolist()
        self.grid_floor = floor
        self._sync_ver += 1
        self.counts["barriers"] += int(self.epoch.shape[0])

    def _sync1(self) -> None:
        """Rebuild the scalar path's epoch lists after a vector barrier."""
        if self._stale1:  # in place: recorders hold these lists
            self._ep1[:] = self.epoch.tolist()
            self._wep1[:] = self.wepoch.tolist()
            self._stale1 = False

    def syncwarp(self, block: int, warp: int) -> None:
        """A syncwarp (or completed warp rendezvous that orders memory) in one warp."""
        self._sync1()
        self._sync_ver += 1
        self.wepoch[block * self.wpb + warp] += 1
        self._wep1[block * self.wpb + warp] += 1

    def fence(self, block, thread) -> None:
        """threadfence by these lanes: their earlier writes become visible to other blocks."""
        g = np.asarray(block, np.int64) * self.tpb + np.asarray(thread, np.int64)
        self.fences[g] += 1
        self._fenced = True
        for t in np.atleast_1d(g).tolist():
            self._fence1[t] = self._fence1.get(t, 0) + 1

    def _acquired(self, block, g) -> None:
        """Lanes (block, global thread) did a global atomic: record the acquire."""
        if self._stale1:
            self._sync1()
        for b, t in zip(np.atleast_1d(block).tolist(), np.atleast_1d(g).tolist()):
            self._acq1.add(t)
            self._acq_ep1.setdefault(b, self._ep1[b])

    # ------------------------------------------------------------------ queries
    def _has_acquired(self, block: int, g: int) -> bool:
        """Thread g did a global atomic, or a thread of its block did before a barrier since."""
        if g in self._acq1:
            return True
        first = self._acq_ep1.get(block)
        return first is not None and first < self._ep1[block]

    def _have_acquired(self, block, g, ep) -> np.ndarray:
        """`_has_acquired` of lanes (vectors; `ep`: their blocks' epochs)."""
        if not self._acq1:
            return np.zeros(len(g), bool)
        return np.fromiter((t in self._acq1 or (b in self._acq_ep1 and self._acq_ep1[b] < e)
                            for b, t, e in zip(block.tolist(), g.tolist(), ep.tolist())),
                           bool, len(g))

    def _warp_of(self, g):
        """The warp (block * wpb + its warp in the block) of global thread `g` (an int or a vector)."""
        return g // self.tpb * self.wpb + g % self.tpb // WARP

    def _ordered1(self, other: int, ep: int, wep: int, g: int, block: int) -> bool:
        """Is an earlier access by global thread `other` ordered before thread `g`'s access?"""
        if other == g:
            return True
        tpb = self.tpb
        if other // tpb != block:
            return ep < self.grid_floor  # another block: ordered by a grid sync only
        if ep != self._ep1[block]:
            return True
        w = (g % tpb) // WARP
        return (other % tpb) // WARP == w and wep != self._wep1[block * self.wpb + w]

    def _ordered_vec(self, other, o_ep, o_wep, g, block, w, ep, wep):
        """Is an earlier access by global thread `other` (at block epoch `o_ep`, warp epoch
        `o_wep`) ordered before the access of lane `g` (block, warp `w`, epochs `ep`, `wep`)?"""
        ob = other // self.tpb
        ow = self._warp_of(other)
        return (other == g) | ((ob == block) & ((o_ep != ep) | ((ow == w) & (o_wep != wep)))) | \
            ((ob != block) & (o_ep < self.grid_floor))

    def _lane_epochs(self, lanes):
        """Block and warp epochs of the lanes, kept on `lanes` until the next barrier/syncwarp."""
        if lanes.ep_ver != self._sync_ver:
            lanes.ep = self.epoch[lanes.block]
            lanes.wep = self.wepoch[lanes.warp]
            lanes.ep_ver = self._sync_ver
        return lanes.ep, lanes.wep
