"""The per-thread executor's launch: one greenlet per CUDA thread, a deterministic scheduler per
block.

Blocks run one after another, except in a cooperative launch (the kernel syncs the grid):
there every block's scheduler runs in a greenlet of its own, all of them resident at once, and
hands back to the grid's (`_run_grid`) when its live threads all wait at the grid sync, which
completes once every block waits there. Inside a block every thread runs until it blocks (syncthreads,
a warp collective) or yields (atomics, fences, every few `while` iterations or long runs of
recorded loads, so that spin loops make progress), then the next runnable thread runs, in
thread order (or a seeded shuffle of it); a thread reaching a barrier hands over to the next
one directly. When nothing is runnable the block completes warp rendezvous, then the barrier
(`block.Block`), else reports a deadlock: the simulator never hangs on a kernel that waits
forever.

`ThreadExecutor` holds what the kernel's code reads on every access (the running thread `cur`,
the block `bid` / `bidx`, the scheduler greenlet `hub`, the `progress` count), so that arrays
(`arrays`), the fake `cuda` (`cuda`) and the compiled accesses (`access`) reach it in one step.
"""

from __future__ import annotations

import gc
from collections import deque

import numpy as np
from greenlet import greenlet

from .. import kernel_source
from ..errors import DeadlockError, NotSimulatedError, where
from ..host import DeviceBuffer
from . import arrays as _arrays, cuda as _cuda, typer as thread_typer
from .access import AccessLogs
from .arrays import Spaces, ThreadArray
from .block import Block, Dim3, ThreadState
from .cuda import ThreadCuda

# Forward progress: a thread yields at atomics and fences (spin locks), every
# access.LOOP_TICKS iterations of a `while` loop and every arrays.LOADS_PER_YIELD recorded
# loads (flag loops). "Progress" is a store, an atomic that changed memory, an exit, or a
# completed barrier / warp op. This many yields without progress is a deadlock:
IDLE_SYNC_YIELDS = 256  # atomic / fence yields in a row
IDLE_LOAD_YIELDS = 16384  # loop / load-budget yields in a row (4M without any store)
# A cooperative launch's blocks are all resident: a block whose threads spin this many yields
# without progress hands over to the next block (the flag it waits for may be another block's)
GRID_TURN_YIELDS = 16
_SYNC = ("sync", None)  # the request of a plain syncthreads()
# the executor's own frames between a yielding call and the student's code that made it
_OWN_FILES = frozenset((__file__, _arrays.__file__, _cuda.__file__))


class ThreadExecutor:
    """Runs one launch (a `launch.Launch`) thread by thread."""

    compile_accesses = True  # off: every access through ThreadArray (tests compare the two)

    def __init__(self, launch):
        self.launch = launch
        self.config = launch.config
        self.inst = launch.instrument
        self.name = launch.kernel.name
        self.tpb = self.config.threads_per_block
        self.rng = np.random.default_rng(launch.seed) if launch.seed is not None else None
        self.cur: ThreadState | None = None
        self.bid = 0
        self.bidx = Dim3(0, 0, 0)
        self.block: Block | None = None
        self.spaces = Spaces(self)
        self.logs = AccessLogs(self)
        self.cuda = ThreadCuda(self)
        self.fn, self.typing_note = self._kernel_function()
        self.thread_idx = [Dim3(*self.config.thread_xyz(t)) for t in range(self.tpb)]
        self.thread_order = list(range(self.tpb))
        self.pool: list[greenlet] = []
        self.args = [ThreadArray(a, "global", self) if isinstance(a, DeviceBuffer) else a
                     for a in launch.args]
        self.hub = None
        self.cooperative = launch.cooperative
        self._grid_hub = None  # cooperative: the greenlet running every block's scheduler
        self._site_lines: dict = {}  # (id(code), f_lasti) -> line of a blocking call

    def _kernel_function(self):
        """(the kernel's function as the threads run it: rebound to the fake `cuda`, typed as
        numba types it, its accesses compiled; the typing note). Raises TypingRefused when
        numba refuses the kernel."""
        launch = self.launch
        typer = thread_typer.for_launch(launch.kernel.py_func, launch.args)
        if typer.enabled:
            # element accesses compiled inline: counted from per-thread lists, or, where a
            # checker needs every access in order (races, uninitialised reads), recorded
            if self.compile_accesses:
                typer.access = "record" if self.inst.races or self.inst.uninit else "count"
            typer.globals.update(__gg_ex=self, __gg_unpack=self.logs.unpack,
                                 __gg_spin=self.spin, __gg_thread_id=self.thread_id)
        fn = kernel_source.rebind(launch.kernel.py_func, self.cuda, mark_end=True,
                                  typer=typer if typer.enabled else None)
        return fn, typer.note  # kernel_code notes a kernel without source

    # --- entry point
    def run(self) -> None:
        blocks = np.arange(self.config.n_blocks)
        if self.rng is not None:
            self.rng.shuffle(blocks)
        # a launch makes lists (access logs, waits) by the hundred thousand, and the cyclic
        # garbage collector would scan them again and again (~10% of a launch); what cycles a
        # launch leaves are collected after it
        collecting = gc.isenabled()
        gc.disable()
        logs = self.logs
        try:
            if self.cooperative:
                self._run_grid(blocks.tolist())  # threads hold their logs until the end
            for b in blocks.tolist() if not self.cooperative else ():
                self._run_block(b)
                if logs.due():
                    logs.flush()
            logs.flush()
        finally:
            if collecting:
                gc.enable()

    def _worker(self, _first):
        """Body of a pooled greenlet: runs one thread after another (a fresh greenlet per
        thread costs ~10x a switch). The scheduler sets `self.cur` before each switch."""
        with np.errstate(all="ignore"):  # a GPU wraps integers and divides by zero silently
            while True:
                fell_off = self.fn(*self.args) is kernel_source.FELL_OFF
                self.hub.switch(("exit", fell_off))

    def _run_block(self, b: int) -> None:
        cfg = self.config
        self.bid, self.bidx = b, Dim3(*cfg.block_xyz(b))
        self.spaces.new_block()
        order = self.thread_order
        if self.rng is not None:
            order = list(order)
            self.rng.shuffle(order)
        blk = self.block = Block(b, self.bidx, self.thread_idx, order, self.inst,
                                 self.launch.kernel)
        threads = blk.threads
        self.hub = greenlet.getcurrent()
        pool = self.pool
        runnable = self.runnable = deque(threads[t] for t in order)
        if not self.cooperative:  # (a cooperative launch counts progress over the whole grid)
            self.progress = 0
        seen = -1  # progress at the last yield
        idle_sync = idle_loads = 0
        completed = False
        try:
            while True:
                while runnable:
                    st = runnable.popleft()
                    self.cur = st
                    if st.glet is None:
                        st.glet = pool.pop() if pool else greenlet(self._worker, self.hub)
                        if self.cooperative:  # a pooled worker may come from another block
                            st.glet.parent = self.hub
                        event = st.glet.switch(st)
                    else:
                        event = st.glet.switch(st.value)
                    st = self.cur  # who switched back: threads hand over at barriers (`sync`)
                    if event.__class__ is tuple:  # ("exit", fell_off)
                        st.status = "exited"
                        if event[1]:
                            blk.fell_off.append(st)
                        pool.append(st.glet)
                        st.glet = None
                        self.progress += 1
                    elif event == "yield" or event == "yield_loads":
                        if self.progress != seen:
                            seen, idle_sync, idle_loads = self.progress, 0, 0
                        elif event == "yield":
                            idle_sync += 1
                        else:
                            idle_sync, idle_loads = 0, idle_loads + 1
                        if idle_sync > IDLE_SYNC_YIELDS or idle_loads > IDLE_LOAD_YIELDS:
                            self._no_progress()
                        runnable.append(st)
                        if self.cooperative and (idle_sync + idle_loads) % GRID_TURN_YIELDS == 0 \
                                and idle_sync + idle_loads:
                            self._turn()
                    # else: it blocked; its status and wait are set
                if all(st.status == "exited" for st in threads):
                    completed = True
                    return
                if blk.warp_waiters and blk.complete_warps(runnable) or \
                        blk.complete_barrier(runnable):
                    self.progress += 1
                    continue
                if self.cooperative and blk.at_grid_sync():
                    self._await_grid(blk, runnable)
                    self.progress += 1
                    continue
                blk.deadlock()
        finally:
            self.cur = None
            if not completed:  # greenlets suspended in an aborted block: drop, never resume
                self.pool = []
                for st in threads:
                    st.glet = None

    # --- cooperative launches: every block resident, the grid sync
    def _run_grid(self, blocks: list) -> None:
        """Every block at once: each block's scheduler in a greenlet, run in turn until it
        finishes or all its live threads wait at the grid sync; once no block can go on, the
        grid sync completes (or the blocks that finished without it are reported)."""
        self._grid_hub = greenlet.getcurrent()
        self.progress = 0
        runners = [(b, greenlet(self._run_block)) for b in blocks]
        while runners:
            waiting, finished = [], []
            turn, idle_rounds = runners, 0
            while turn:  # every block in turn until it finishes or waits at the grid sync
                spinning, seen = [], self.progress
                for b, runner in turn:
                    event = runner.switch(b)
                    if runner.dead:
                        finished.append(self.block)
                    elif event[0] == "grid":
                        waiting.append((b, runner, event[1]))
                    else:
                        spinning.append((b, runner))
                idle_rounds = idle_rounds + 1 if spinning and self.progress == seen else 0
                if idle_rounds * GRID_TURN_YIELDS * len(spinning) > IDLE_LOAD_YIELDS:
                    spinning[0][1].switch("deadlock")  # raises there: no block makes progress
                turn = spinning
            if not waiting:
                return
            first = waiting[0][2]
            at = lambda blk: (blk.live()[0].wait[2], blk.live()[0].wait[1])  # noqa: E731
            f1, l1 = at(first)
            for _, _, blk in waiting[1:]:
                if at(blk) != (f1, l1):
                    f2, l2 = at(blk)
                    blk.barrier_error(blk.live()[0], f"blocks of the grid wait at different "
                                      f"grid syncs ({f1}:{l1} and {f2}:{l2}): CUDA requires "
                                      f"every thread of the grid to reach the same one",
                                      at=(f2, l2))
                    break
            if finished:
                blk = finished[0]
                blk.barrier_error(blk.threads[0], f"every thread of this block finished the "
                                  f"kernel without reaching the grid sync ({f1}:{l1}) that "
                                  f"the other blocks wait at: a grid sync waits for every "
                                  f"block, so on a GPU the grid would wait forever",
                                  at=(f1, l1))
            self.inst.grid_sync(l1)
            runners = [(b, runner) for b, runner, _ in waiting]

    def _hand_back(self, event):
        """In a block's scheduler: switch to the grid's with `event`; what it sends back once
        this block runs again."""
        state = (self.bid, self.bidx, self.block, self.hub, self.runnable, self.cur,
                 dict(vars(self.spaces)))
        self.cur = None
        reply = self._grid_hub.switch(event)
        self.bid, self.bidx, self.block, self.hub, self.runnable, self.cur, spaces = state
        vars(self.spaces).update(spaces)
        return reply

    def _turn(self) -> None:
        """A block of a cooperative launch spins without progress: the other blocks run first;
        when none of them made progress either for long enough, the grid is deadlocked (named
        at the spinning thread, `cur` again once `_hand_back` returns)."""
        if self._hand_back(("spin", self.block)) == "deadlock":
            self._no_progress()

    def _await_grid(self, blk: Block, runnable) -> None:
        """In a block's scheduler: its live threads all wait at the grid sync. Hand back to
        the grid's scheduler until the sync completes, then they go on."""
        self._hand_back(("grid", blk))
        for t in blk.order:
            st = blk.threads[t]
            if st.status == "grid":
                st.status, st.value, st.wait = "ready", None, None
                runnable.append(st)

    def grid_sync(self, frame) -> None:
        """`this_grid().sync()` from inside a thread."""
        if not self.cooperative:  # the kernel reached the grid group in a way not detected
            raise NotSimulatedError(f"{where(self.name, frame.f_code.co_filename, frame.f_lineno)}"
                                    f": a grid sync in a kernel that is not launched "
                                    f"cooperatively (the grid group is taken in a way the "
                                    f"simulator does not recognise)")
        self.block_on("grid", ("grid",), frame)

    # --- blocking calls made from inside a thread
    def block_on(self, status: str, request, frame):
        st = self.cur
        st.status = status
        st.wait = (request, self._line_of(frame), frame.f_code.co_filename)
        if status == "warp":
            blk = self.block
            blk.warp_waiters += 1
            op, mask = request[0], request[1]
            if not mask >> st.lane & 1:
                blk.warp_error(st, frame, f"{op} called with mask {mask:#010x}, which does "
                               f"not include the calling lane {st.lane}")
                # downgraded to a warning: carry on as if the caller were in the mask
                st.wait = ((op, mask | 1 << st.lane) + request[2:], frame.f_lineno,
                           frame.f_code.co_filename)
        st.value = None
        self.hub.switch("blocked")
        return st.value

    def sync(self, frame) -> None:
        """`block_on("barrier", _SYNC, frame)`, for the most common blocking call."""
        st = self.cur
        st.status = "barrier"
        st.wait = (_SYNC, self._line_of(frame), frame.f_code.co_filename)
        st.value = None
        runnable = self.runnable
        if not runnable or runnable[0].glet is None:
            # the last to arrive (the scheduler completes the barrier), or the next thread has
            # not started (a greenlet started from this one would count its Python stack on
            # top of this one's)
            self.hub.switch("blocked")
            return
        # hand over to the next runnable thread directly: one switch instead of two
        nxt = self.cur = runnable.popleft()
        nxt.glet.switch(nxt.value)

    def _line_of(self, frame) -> int:
        """`frame.f_lineno`, which walks the code's line table: each call site looked up once
        (by code id: a code object hashes its contents)."""
        site = (id(frame.f_code), frame.f_lasti)
        line = self._site_lines.get(site)
        if line is None:
            line = self._site_lines[site] = frame.f_lineno
        return line

    def yield_(self) -> None:
        self.hub.switch("yield")

    def fence(self) -> None:
        self.inst.fence(self.bid, self.cur.lin)
        self.yield_()

    def spin(self) -> None:
        """A loop's yield (access.tick): judged like the load budget's."""
        self.hub.switch("yield_loads")

    def thread_id(self) -> int:
        return self.cur.g

    # --- diagnostics
    def _no_progress(self):
        st = self.cur
        frame = st.glet.gr_frame if st.glet is not None else None
        while frame is not None and frame.f_code.co_filename in _OWN_FILES:
            frame = frame.f_back  # the student's frame that called the yielding operation
        fn = frame.f_code.co_filename if frame is not None else self.launch.kernel.filename
        line = frame.f_lineno if frame is not None else self.launch.kernel.firstlineno
        why = (" Every block of this cooperative launch is resident, and none of them made progress "
               "either" if self.cooperative else
               " If a later block would do it: the simulator runs blocks one after another; a GPU "
               "runs them at the same time only while they fit on it together, which CUDA does not "
               "promise (a cooperative launch does), so the kernel can hang there too (split the work "
               "into two launches)")
        raise DeadlockError(
            f"{where(self.name, fn, line, self.bidx, st.idx)}: no forward progress: threads "
            f"spin waiting for something no running thread will do (a lock never released, a "
            f"flag never set), or in a loop whose condition never turns false.{why}", kernel=self.name,
            filename=fn, line=line,
            block=tuple(self.bidx),
            thread=tuple(st.idx))
