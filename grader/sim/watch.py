"""Where a kernel running in another thread of this process is, in the student's terms: for the
message of a call that ran out of time ("the kernel was at reduction.py:149 in
reduce_grid_stride_kernel, blocks 0 to 255 of 1,056, in the loop of line 148 at iteration 3,120
of up to 540,679 in a thread"). Feedback only: nothing graded reads it.

Both executors run a kernel in frames of the student's file (the lockstep one compiles its
transform with the kernel's file name and lines), so the innermost such frame is where it is;
a lockstep frame also holds its batch (`__c`), whose open loops say how far it got.
"""

from __future__ import annotations

import os
from types import FrameType
from typing import Callable

from .simt.mask import MaskStack
from .simt.progress import describe


def where_running(frame: FrameType | None, workspace: "str | Callable[[str], bool]") -> str:
    """The kernel's place, from the innermost frame of `frame`'s stack in a file under
    `workspace` (the folder kernels' files are named in, ending in "/"; or a test of a file
    name); "" when no frame of theirs is running (a copy, the device's own work)."""
    theirs = workspace if callable(workspace) else (lambda name: name.startswith(workspace))
    inner, ctx = None, None
    while frame is not None:
        if theirs(frame.f_code.co_filename):
            if inner is None:
                inner = frame
            batch = frame.f_locals.get("__c")
            if isinstance(batch, MaskStack):
                ctx = batch
                break
        frame = frame.f_back
    if inner is None:
        return ""
    text = f"{os.path.basename(inner.f_code.co_filename)}:{inner.f_lineno} in {inner.f_code.co_name}"
    progress = describe(ctx) if ctx is not None else ""
    return f"{text}, {progress}" if progress else text
