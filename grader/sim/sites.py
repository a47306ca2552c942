"""Where the student's code made a call into the simulator (a launch, a copy): the innermost
frame outside grader, numba and numba-cuda, or the site the process that asked for it reported
(the device process runs what a runner asks for). Messages only: nothing graded reads it."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import sysconfig

# frames of grader's own package are never the student's, nor the standard library's (runpy's under
# `gpugrade run`: a frozen module, "<frozen runpy>", only from Python 3.11 on)
_LIBRARY_DIRS = (os.path.dirname(os.path.abspath(sys.modules[__package__.split(".")[0]].__file__)) + os.sep,
                 os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep)

# the site another process reported for the request being served, and the student's frames there
_REPORTED_SITE: contextvars.ContextVar = contextvars.ContextVar("reported_launch_site", default=None)
_REPORTED_STACK: contextvars.ContextVar = contextvars.ContextVar("reported_launch_stack", default=None)
STACK_FRAMES = 3  # the student's frames a launch is told by: the launch, the helper's caller, its caller


@contextlib.contextmanager
def reported_site(site: tuple[str, int] | None, stack: list[tuple[str, int, str]] | None = None):
    """The calls in this block were made at `site` (file, line) of another process, `stack`
    (file, line, function; innermost first) the student's frames there."""
    token, frames = _REPORTED_SITE.set(site), _REPORTED_STACK.set(stack)
    try:
        yield
    finally:
        _REPORTED_STACK.reset(frames)
        _REPORTED_SITE.reset(token)


def _libraries() -> tuple[str, ...]:
    return _LIBRARY_DIRS + tuple(
        os.path.dirname(os.path.abspath(sys.modules[name].__file__)) + os.sep
        for name in ("numba", "numba_cuda") if getattr(sys.modules.get(name), "__file__", None))


def in_library(filename: str) -> bool:
    """`filename` is numba's, numba-cuda's, grader's or the standard library's (not code a student wrote)."""
    return os.path.abspath(filename).startswith(_libraries())


def caller_in(filename: str) -> int | None:
    """The line of the innermost frame running code of `filename` (the kernel's line that called
    the library device function a finding is in), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame.f_lineno
        frame = frame.f_back
    return None


def launch_site() -> tuple[str, int] | None:
    """(file, line) of the student's call, or None when no frame is the student's."""
    reported = _REPORTED_SITE.get()
    if reported is not None:
        return reported
    frames = _student_frames(1)
    return frames[0][:2] if frames else None


def launch_stack() -> list[tuple[str, int, str]]:
    """(file, line, function) of the student's call and of its callers, innermost first (at most
    STACK_FRAMES): a launch in a helper of the stub's is told with the student's call of it."""
    reported = _REPORTED_STACK.get()
    return reported if reported is not None else _student_frames(STACK_FRAMES)


def _student_frames(limit: int) -> list[tuple[str, int, str]]:
    libraries = _libraries()
    frame, found = sys._getframe(2), []
    while frame is not None and len(found) < limit:
        name = frame.f_code.co_filename  # (absolute for imported modules: abspath only if not)
        path = name if name.startswith(os.sep) else os.path.abspath(name)
        if path.startswith(libraries):
            if found:  # the student's frames end where grader's resume: what started it (the
                break  # `gpugrade` console script under `gpugrade run`) is no caller of theirs
        elif not name.startswith("<"):
            found.append((name, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return found


def launched(stack: list[tuple[str, int, str]]) -> str:
    """Where the host launched a kernel, in words: "launched at f.py:95 in add_on, called at
    f.py:127 in allreduce_ring"."""
    return "launched " + called_at(stack) if stack else ""


def called_at(stack: list[tuple[str, int, str]]) -> str:
    """`stack` (`launch_stack`) in words: "at f.py:95 in add_on, called at f.py:127 in allreduce_ring"."""
    return ", called ".join(f"at {file}:{line} in {function}" for file, line, function in stack)
