"""What the simulator reports: one base class, one subclass per finding, and the setting that
turns chosen checkers into warnings.

Every finding's message is the whole diagnostic (kernel, student file:line, block, thread, array,
index), so a grader can show `str(err)` as is.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field


class SimError(Exception):
    """Base of everything the simulator raises about the simulated program."""

    check = "error"  # the Checks name of the checker that raises it

    def __init__(self, message: str, *, kernel: str | None = None, filename: str | None = None,
                 line: int | None = None, block=None, thread=None, array: str | None = None,
                 index=None):
        super().__init__(message)
        self.kernel, self.filename, self.line = kernel, filename, line
        self.block, self.thread, self.array, self.index = block, thread, array, index

    def record(self, relative=lambda path: path) -> dict:
        """The finding as plain data (what crosses to the judge): checker, type, message, kernel,
        file, line, block, thread, array, index (coordinates as lists of ints). `relative` makes
        the paths in the message and the file the student's (no workspace folder)."""
        def coords(value):
            if value is None:
                return None
            items = value if isinstance(value, (tuple, list)) else (value,)
            try:
                return [int(v) for v in items][:8] or None
            except (TypeError, ValueError):
                return None

        return {"check": self.check, "type": type(self).__name__, "message": relative(str(self)), "kernel": self.kernel,
                "file": relative(self.filename) if self.filename else None,
                "line": None if self.line is None else int(self.line),
                "block": coords(self.block), "thread": coords(self.thread), "array": self.array,
                "index": coords(self.index)}


class OutOfBoundsError(SimError, IndexError):
    check = "bounds"


class RaceError(SimError):
    check = "races"


class UninitialisedReadError(SimError):
    check = "uninitialised"


class BarrierDivergenceError(SimError):
    check = "barriers"


class WarpOpError(SimError):
    check = "warps"


class DeadlockError(SimError):
    check = "deadlock"


class LaunchConfigError(SimError, ValueError):
    check = "launch"


class WrongDeviceError(SimError):
    check = "devices"


class StreamRaceError(SimError):
    """Two accesses of the same device memory on two streams, at least one a write, that nothing
    orders (no event, no synchronisation): a race on a GPU, though the simulator ran them one after
    the other (grader/sim/streams.py)."""

    check = "streams"


class CompileError(SimError):
    """The kernel runs in Python but would not compile for a GPU (numba's typing or ptxas refused it)."""

    check = "compile"


class NotSimulatedError(SimError, NotImplementedError):
    """A CUDA feature the simulator does not model; the message names it."""

    check = "unsupported"


class SimWarning(UserWarning):
    """A finding of a checker that `Checks.warn` downgraded."""


CHECKERS = ("bounds", "races", "uninitialised", "barriers", "warps", "deadlock")


@dataclass(frozen=True)
class Checks:
    """Which checkers raise. Names in `warn` only warn (kept in `LaunchRecord.warnings`);
    names in `off` are not evaluated at all (bounds can never be off: memory would be corrupted).
    """

    warn: frozenset[str] = field(default_factory=frozenset)
    off: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self):
        for name in (*self.warn, *self.off):
            if name not in CHECKERS:
                raise ValueError(f"unknown checker {name!r}; known: {', '.join(CHECKERS)}")
        if "bounds" in self.off:
            raise ValueError("the bounds checker cannot be turned off, only downgraded to warn")
        object.__setattr__(self, "warn", frozenset(self.warn))
        object.__setattr__(self, "off", frozenset(self.off))

    def enabled(self, name: str) -> bool:
        return name not in self.off

    def report(self, err: SimError, sink: list[str] | None = None) -> None:
        """Raise `err`, or warn with its message when its checker is downgraded."""
        if err.check not in self.warn:
            raise err
        if sink is not None:
            sink.append(str(err))
        warnings.warn(str(err), SimWarning, stacklevel=3)


def where(kernel: str, filename: str, line: int, block=None, thread=None) -> str:
    """The common prefix of a diagnostic: `kernel at file:line, block (x, y, z), thread (...)`."""
    text = f"kernel {kernel!r} at {filename}:{line}"
    if block is not None:
        text += f", block {tuple(block)}"
    if thread is not None:
        text += f", thread {tuple(thread)}"
    return text
