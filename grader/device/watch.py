"""The device's side of a call that runs out of time: shortly before the judge's limit (the
call's `watch_s`, as the runner's faulthandler dump), one line on stderr says where the kernel
running then is (grader.sim.watch). The judge reads it from this process's output when it kills
the call (grader/judge/stuck.py). Feedback only: nothing graded reads it.

A timer thread of this process (the device process is ours) reads the serving thread's stack
while that thread runs the kernel: the interpreter hands the lock over between bytecodes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from types import FrameType

MARK = "gpugrade-device-watch"
# said where no kernel runs at that moment (grader/judge/stuck.py reads it): the host is looping
IDLE = "no kernel running"
AFTER = "; launches before it in this call: "  # after where a kernel is: a host loop launching it again
MAX_TEXT = 500


class Watch:
    """One timer at a time, armed at a call's begin, cancelled at its end."""

    def __init__(self, where: Callable[[FrameType | None], str]):
        self._where = where  # the serving thread's frame -> where its kernel is ("" if none)
        self._serving = threading.get_ident()
        self._timer: threading.Timer | None = None

    def arm(self, call: int, seconds: float) -> None:
        self.cancel()
        timer = threading.Timer(seconds, self._say, (call,))
        timer.daemon = True
        try:
            timer.start()
        except RuntimeError:  # no thread to be had (a process limit): the message goes without it
            return
        self._timer = timer

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _say(self, call: int) -> None:
        frame = sys._current_frames().get(self._serving)
        try:
            text = self._where(frame)
        except Exception:  # noqa: BLE001 - a message's detail, never worth the call
            text = ""
        finally:
            del frame
        if text:
            text = " ".join(text.split())[:MAX_TEXT]
            with contextlib.suppress(OSError, ValueError, AttributeError):  # (no stderr left: nothing to say)
                sys.__stderr__.write(f"{MARK} call {call}: {text}\n")
                sys.__stderr__.flush()
