"""One block under the per-thread executor: its threads' states and the rendezvous they wait at.

A thread that calls syncthreads() or a warp collective blocks with a request (`ThreadState.wait`);
when nothing is runnable the scheduler asks the block to complete what can be completed: the warp
collectives whose lanes have all arrived, else the barrier once every live thread waits at it.
Misuse (lanes at different operations, a lane outside the mask, threads at different barriers
or finished without reaching one) is reported through the launch's checks; a block whose threads
all wait on something that cannot happen is a deadlock.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..checks.findings import different_barriers, exited_before_barrier, unreadable_lane_hint
from ..errors import BarrierDivergenceError, DeadlockError, WarpOpError, where
from ..memory import WARP


class Dim3(NamedTuple):
    x: int
    y: int
    z: int


class ThreadState:
    __slots__ = ("lin", "idx", "lane", "warp", "glet", "status", "wait", "value", "loads",
                 "explicit_exit", "g")

    def __init__(self, lin: int, idx: Dim3, g: int = 0):
        self.lin, self.idx = lin, idx
        self.g = g  # global thread id: block * threads_per_block + lin
        self.lane, self.warp = lin % WARP, lin // WARP
        self.glet = None
        self.status = "ready"  # ready | barrier | warp | exited
        self.wait = None  # the request a blocked thread waits on: (request, line, filename)
        self.value = None  # what its blocking call returns when resumed
        self.loads = 0
        self.explicit_exit = False


class Block:
    """The threads of block `bid` (run in `order`, a list of linear thread ids) and their
    rendezvous; `inst` the launch's Instrument, `kernel` its KernelSource."""

    def __init__(self, bid: int, bidx: Dim3, thread_idx: list, order: list, inst, kernel):
        self.bid, self.bidx, self.order = bid, bidx, order
        self.inst, self.kernel, self.name = inst, kernel, kernel.name
        tpb = self.tpb = len(thread_idx)
        self.threads = [ThreadState(t, idx, bid * tpb + t) for t, idx in enumerate(thread_idx)]
        self.warp_waiters = 0  # threads blocked in a warp collective
        self.fell_off: list[ThreadState] = []  # exited by running off the end, this epoch

    # --- completing rendezvous (called by the scheduler when nothing is runnable)
    def complete_barrier(self, runnable) -> bool:
        live = [st for st in self.threads if st.status != "exited"]
        if not live or any(st.status != "barrier" for st in live):
            return False
        _, line, filename = live[0].wait
        if any(st.wait[1] != line or st.wait[2] != filename for st in live):
            lines = {(st.wait[2], st.wait[1]) for st in live}
            (f1, l1), (f2, l2) = sorted(lines)[:2]
            st = next(s for s in live if (s.wait[2], s.wait[1]) == (f2, l2))
            self.barrier_error(st, different_barriers(f"{f1}:{l1}", f"{f2}:{l2}"))
        if self.fell_off:
            st = self.fell_off[0]
            self.barrier_error(st, exited_before_barrier(f"{live[0].wait[2]}:{live[0].wait[1]}",
                                                         len(live)),
                               at=(live[0].wait[2], live[0].wait[1]))
            self.fell_off = []
        kind = live[0].wait[0][0]
        result = None
        if kind != "sync":
            preds = [st.wait[0][1] for st in live]
            result = {"count": sum(bool(p) for p in preds), "and": int(all(preds)),
                      "or": int(any(preds))}[kind]
        self.inst.barrier([self.bid], line)
        self.fell_off = []
        for t in self.order:
            st = self.threads[t]
            if st.status == "barrier":
                st.status, st.value, st.wait = "ready", result, None
                runnable.append(st)
        return True

    def live(self) -> list:
        return [st for st in self.threads if st.status != "exited"]

    def at_grid_sync(self) -> bool:
        """Whether every live thread waits at the grid sync (cooperative launches); threads
        at different grid syncs, or finished without reaching it while others wait, are
        reported as for syncthreads()."""
        live = self.live()
        if not live or any(st.status != "grid" for st in live):
            return False
        lines = {(st.wait[2], st.wait[1]) for st in live}
        if len(lines) > 1:
            (f1, l1), (f2, l2) = sorted(lines)[:2]
            st = next(s for s in live if (s.wait[2], s.wait[1]) == (f2, l2))
            self.barrier_error(st, f"threads of the block wait at different grid syncs "
                               f"({f1}:{l1} and {f2}:{l2})")
        if self.fell_off:
            st, (f, line) = self.fell_off[0], (live[0].wait[2], live[0].wait[1])
            self.barrier_error(st, f"this thread finished the kernel without reaching the grid "
                               f"sync at {f}:{line} that {len(live)} other threads of its block "
                               f"wait at (a grid sync inside a condition that not all threads "
                               f"take): CUDA requires every thread of the grid to call it; on "
                               f"current GPUs it completes once the threads that skip it exit", at=(f, line))
            self.fell_off = []
        return True

    def complete_warps(self, runnable) -> bool:
        done = False
        n_warps = (self.tpb + WARP - 1) // WARP
        for w in range(n_warps):
            lanes = self.threads[w * WARP:(w + 1) * WARP]
            # activemask: the lanes waiting at the same call (one line: lanes that took the
            # other side of a branch wait at another call and are not active here)
            sites: dict = {}
            for st in lanes:
                if st.status == "warp" and st.wait[0][0] == "activemask":
                    sites.setdefault((st.wait[2], st.wait[1]), []).append(st)
            for converged in sites.values():
                mask = sum(1 << st.lane for st in converged)
                for st in converged:
                    st.status, st.wait, st.value = "ready", None, mask
                    runnable.append(st)
                done = True
            waiting = [st for st in lanes if st.status == "warp"]
            while waiting:
                first = waiting[0]
                op, mask = first.wait[0][0], first.wait[0][1]
                group = [st for st in lanes if mask >> st.lane & 1 and st.status != "exited"]
                if any(st.status != "warp" for st in group):
                    break
                for st in group:
                    if st.wait[0][0] != op or st.wait[0][1] != mask:
                        self.warp_error(st, None, f"lanes of warp {w} meet at different warp "
                                        f"operations: {op} with mask {mask:#010x} and "
                                        f"{st.wait[0][0]} with mask {st.wait[0][1]:#010x}")
                self._warp_results(w, op, group)
                self.inst.warp_op(op, len(group), first.wait[1])
                if op == "syncwarp":
                    self.inst.syncwarp(self.bid, w)
                for st in group:
                    st.status, st.wait = "ready", None
                    runnable.append(st)
                done = True
                waiting = [st for st in lanes if st.status == "warp"]
        self.warp_waiters = sum(st.status == "warp" for st in self.threads)
        return done

    def _warp_results(self, w, op, group):
        by_lane = {st.lane: st for st in group}
        member_mask = sum(1 << lane for lane in by_lane)

        def read(st, src):
            if src not in by_lane:
                self.warp_error(st, None, f"{op} in lane {st.lane} reads lane {src}, which "
                                f"does not take part (not in the mask, exited, or beyond the "
                                f"block's last thread): the value would be undefined" + unreadable_lane_hint())
                return st.wait[0][2]  # downgraded: an undefined value, here the lane's own
            return by_lane[src].wait[0][2]

        for st in group:
            _, mask, value, arg = st.wait[0]
            if op == "shfl_sync":
                st.value = read(st, arg % WARP)
            elif op == "shfl_up_sync":
                st.value = value if st.lane - arg < 0 else read(st, st.lane - arg)
            elif op == "shfl_down_sync":
                st.value = value if st.lane + arg >= WARP else read(st, st.lane + arg)
            elif op == "shfl_xor_sync":
                src = st.lane ^ arg
                st.value = value if src >= WARP else read(st, src)
            # result types as numba types them: lane masks int32, votes bool
            elif op == "ballot_sync":
                st.value = _int32(sum(1 << s.lane for s in group if s.wait[0][2]))
            elif op == "all_sync":
                st.value = np.bool_(all(s.wait[0][2] for s in group))
            elif op == "any_sync":
                st.value = np.bool_(any(s.wait[0][2] for s in group))
            elif op == "eq_sync":
                st.value = np.bool_(all(s.wait[0][2] == value for s in group))
            elif op == "match_any_sync":
                st.value = _int32(sum(1 << s.lane for s in group if s.wait[0][2] == value))
            elif op == "match_all_sync":
                same = all(s.wait[0][2] == value for s in group)
                st.value = (_int32(member_mask if same else 0), np.bool_(same))
            else:  # syncwarp
                st.value = None

    # --- diagnostics
    def report(self, cls, st, frame, what, at=None):
        """A finding of checker `cls.check` about thread `st`, at `at` ((file, line)), else at
        `frame`, else where the thread waits, else at the kernel's first line."""
        if at is not None:
            fn, line = at
        elif frame is not None:
            fn, line = frame.f_code.co_filename, frame.f_lineno
        elif st.wait is not None:
            fn, line = st.wait[2], st.wait[1]
        else:
            fn, line = self.kernel.filename, self.kernel.firstlineno
        if not self.inst.checks.enabled(cls.check):
            return
        err = cls(f"{where(self.name, fn, line, self.bidx, st.idx)}: {what}", kernel=self.name,
                  filename=fn, line=line, block=tuple(self.bidx), thread=tuple(st.idx))
        self.inst.checks.report(err, self.inst.warnings)

    def warp_error(self, st, frame, what):
        self.report(WarpOpError, st, frame, what)

    def barrier_error(self, st, what, at=None):
        self.report(BarrierDivergenceError, st, None, what, at)

    def deadlock(self):
        blocked = [st for st in self.threads if st.status in ("barrier", "warp", "grid")]
        at_warp = [st for st in blocked if st.status == "warp"]
        at_bar = [st for st in blocked if st.status == "barrier"]
        st = at_warp[0] if at_warp else blocked[0]
        at_grid = [st for st in blocked if st.status == "grid"]
        if at_grid and at_bar and not at_warp:
            # a cooperative launch: threads of one block at syncthreads() and at a grid sync
            other = at_bar[0]
            self.barrier_error(at_grid[0], f"threads of the block wait at a grid sync and at "
                               f"the syncthreads() at {other.wait[2]}:{other.wait[1]} (thread "
                               f"{tuple(other.idx)}): CUDA requires every thread of the grid to "
                               f"reach the same grid sync")
        if at_warp and at_bar:
            other = at_bar[0]
            what = (f"deadlock: {st.wait[0][0]} waits for lanes of its mask, but thread "
                    f"{tuple(other.idx)} waits at syncthreads() at line {other.wait[1]}")
            cls = WarpOpError
        else:
            what = "deadlock: every remaining thread of the block is blocked"
            cls = DeadlockError
        err = cls(f"{where(self.name, st.wait[2], st.wait[1], self.bidx, st.idx)}: {what}",
                  kernel=self.name, filename=st.wait[2], line=st.wait[1],
                  block=tuple(self.bidx), thread=tuple(st.idx))
        raise err  # a deadlock cannot be downgraded: the block cannot continue


def _int32(mask: int) -> np.int32:
    """A 32-bit lane mask as numba's int32 (lane 31 set: negative)."""
    return np.int32(mask - (1 << 32) if mask & 0x80000000 else mask)
