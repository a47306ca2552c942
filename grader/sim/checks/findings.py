"""How every checker reports a finding: an `errors.SimError` subclass naming the kernel, the
student's file and line, the block, the thread, the array and its index; `errors.Checks`
raises it or downgrades it to a warning."""

from __future__ import annotations

import ast
import linecache
import os
from functools import lru_cache

from ..errors import RaceError, UninitialisedReadError, where
from ..sites import caller_in, in_library


class Findings:
    """Mixin of `memory.Instrument` (reads kernel, filename, config, checks, warnings)."""

    def _fail(self, cls, what: str, block: int, thread: int, line: int, filename=None,
              array=None, index=None) -> None:
        if self._open_race is not None:  # found first, so reported first
            self.close_race()
        b, t = self.config.block_xyz(int(block)), self.config.thread_xyz(int(thread))
        fn = filename or self.filename
        if fn != self.filename and in_library(fn):
            # inside numba's own device code (numba.cuda.random's generators): the finding is
            # the student's line that called it, the library's line said
            called_at = caller_in(self.filename)
            if called_at is not None:
                what = f"{what} (in {os.path.basename(fn)}:{line}, which this line calls)"
                fn, line = self.filename, called_at
        if cls in (RaceError, UninitialisedReadError):
            what += uncalled_barrier_note(fn)
        err = cls(f"{where(self.kernel, fn, line, b, t)}: {what}", kernel=self.kernel,
                  filename=fn, line=line, block=b, thread=t, array=array, index=index)
        self.checks.report(err, self.warnings)

    def _index_of(self, handle, flat: int):
        """The kernel index (an int, or a tuple per dimension) of a position in `handle.flat`."""
        f = flat - handle.offset
        if getattr(handle, "block_stride", 0):
            f %= handle.block_stride
        out = []
        for st in handle.estrides:
            q, f = divmod(f, st) if st else (0, f)
            out.append(int(q))
        return out[0] if len(out) == 1 else tuple(out)


_BARRIERS = ("syncthreads", "syncwarp", "threadfence", "threadfence_block")


def uncalled_barrier_note(filename: str) -> str:
    """Where `filename` names a barrier as a statement without calling it (`cuda.syncthreads`: no
    parentheses, so no barrier is there, and the race or stale read that follows sends the student
    looking elsewhere), a note saying so; else ""."""
    found = _uncalled_barriers(filename, len(linecache.getlines(filename)))
    if not found:
        return ""
    lines, name = [line for line, _ in found], found[0][1]
    # each line with its file, so a notebook's submission names each one's cell too
    where_ = " and ".join(f"{os.path.basename(filename)}:{line}" for line in lines[:3])
    return (f" (note: {where_} name{'s' if len(lines) == 1 else ''} cuda.{name} without calling it, no parentheses, "
            f"so no barrier is there: write cuda.{name}())")


@lru_cache(maxsize=64)
def _uncalled_barriers(filename: str, _length: int) -> tuple[tuple[int, str], ...]:
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Attribute, ast.Name)):
            name = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
            if name in _BARRIERS:
                found.append((node.lineno, name))
    return tuple(sorted(found))


def check_then_store(filename: str, store_line: int, load_line: int) -> str | None:
    """Where the store at `store_line` is `a[i] = v` inside an `if` at `load_line` whose test reads
    `a[i]` (`if a[i] < v: a[i] = v`: a check-then-store, which no barrier can make one step), the
    atomic to use instead ("cuda.atomic.max(a, i, v)"); else None."""
    return _check_then_store(filename, len(linecache.getlines(filename)), store_line, load_line)


_FLIPPED = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}


@lru_cache(maxsize=64)
def _check_then_store(filename: str, _length: int, store_line: int, load_line: int) -> str | None:
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and node.test.lineno == load_line):
            continue
        for stmt in ast.walk(ast.Module(node.body, [])):
            if isinstance(stmt, ast.Assign) and stmt.lineno == store_line and len(stmt.targets) == 1 and \
                    isinstance(stmt.targets[0], ast.Subscript):
                target = ast.unparse(stmt.targets[0])
                tests = [c for c in ast.walk(node.test) if isinstance(c, ast.Compare) and len(c.ops) == 1]
                if not any(ast.unparse(sub) == target for sub in ast.walk(node.test)
                           if isinstance(sub, ast.Subscript)):
                    continue
                # `a[i] < v` (or `v > a[i]`) keeps the larger value: atomic.max; the other way, min
                op = None
                for c in tests:
                    if ast.unparse(c.left) == target:
                        op = type(c.ops[0])
                    elif ast.unparse(c.comparators[0]) == target:
                        op = _FLIPPED.get(type(c.ops[0]))
                name = {ast.Lt: "max", ast.LtE: "max", ast.Gt: "min", ast.GtE: "min"}.get(op)
                sub = stmt.targets[0]
                call = f"({ast.unparse(sub.value)}, {ast.unparse(sub.slice)}, {ast.unparse(stmt.value)})"
                return f"cuda.atomic.{name}{call}" if name else f"cuda.atomic.max{call} or cuda.atomic.min{call}"
    return None


# Barrier findings both executors report (grader/sim/thread/block.py, simt/collective.py), in
# the terms of what a GPU does: since Volta, threads that have exited no longer count toward a
# barrier, and every syncthreads() is the same hardware barrier (bar.sync 0).
def exited_before_barrier(barrier: str, waiting: int) -> str:
    """A thread finished the kernel without reaching the syncthreads() at `barrier` (file:line)
    that `waiting` other threads of its block wait at."""
    return (f"undefined behaviour in CUDA: this thread finished the kernel without reaching "
            f"the syncthreads() at {barrier} that {waiting} other "
            f"{'thread of its block waits' if waiting == 1 else 'threads of its block wait'} at "
            f"(it skipped the branch or left the loop the barrier is in); current GPUs let the "
            f"waiting threads pass once the others have exited, older GPUs or other compilers "
            f"may hang; put the barrier where every thread of the block reaches it")


def different_barriers(first: str, second: str) -> str:
    """Threads of one block wait at two different syncthreads() calls (file:line each)."""
    return (f"threads of the block wait at different syncthreads() calls ({first} and "
            f"{second}): undefined behaviour in CUDA; a GPU may hang, or count both calls as "
            f"one barrier so the threads pass at different points of the kernel, unordered")


def unreadable_lane_hint() -> str:
    """What to do when a shuffle reads a lane that does not take part in it (diverged, exited,
    outside the mask, past a partial warp): said by both executors (thread/block.py,
    simt/collective.py)."""
    return ("; every lane a shuffle reads must reach that same shuffle and be named in its mask: keep the "
            "shuffle outside the `if` and guard the value, not the call (lanes past the end pass a neutral value "
            "such as 0), use the full mask 0xFFFFFFFF only when all 32 lanes of the warp run it, and with a "
            "smaller mask read only lanes it names")
