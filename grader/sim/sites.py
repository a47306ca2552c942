"""Where the student's code made a call into the simulator (a launch, a copy): the innermost
frame outside grader, numba and numba-cuda, or the site the process that asked for it reported
(the device process runs what a runner asks for). Messages only: nothing graded reads it."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys

# frames of grader's own package are never the student's
_LIBRARY_DIRS = (os.path.dirname(os.path.abspath(sys.modules[__package__.split(".")[0]].__file__)) + os.sep,)

# the site another process reported for the request being served
_REPORTED_SITE: contextvars.ContextVar = contextvars.ContextVar("reported_launch_site", default=None)


@contextlib.contextmanager
def reported_site(site: tuple[str, int] | None):
    """The calls in this block were made at `site` (file, line) of another process."""
    token = _REPORTED_SITE.set(site)
    try:
        yield
    finally:
        _REPORTED_SITE.reset(token)


def _libraries() -> tuple[str, ...]:
    return _LIBRARY_DIRS + tuple(
        os.path.dirname(os.path.abspath(sys.modules[name].__file__)) + os.sep
        for name in ("numba", "numba_cuda") if getattr(sys.modules.get(name), "__file__", None))


def in_library(filename: str) -> bool:
    """`filename` is numba's, numba-cuda's or grader's (not code a student wrote)."""
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
    libraries = _libraries()
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename  # (absolute for imported modules: abspath only if not)
        path = name if name.startswith(os.sep) else os.path.abspath(name)
        if not path.startswith(libraries) and not name.startswith("<"):
            return name, frame.f_lineno
        frame = frame.f_back
    return None
