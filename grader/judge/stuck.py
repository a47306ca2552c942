"""Where a call that timed out was stuck, from the runner's last words.

Just before the judge's limit a runner dumps every thread's stack to stderr (faulthandler, armed
by the call's `watch_s`; grader/runner/serve.py). The judge kills the runner at the limit and
reads what it wrote: the innermost frame in the student's files says where the call was, and
frames of the device client above it say it was waiting for a kernel. Feedback only: the runner
runs the student's code, so nothing graded is read from here.
"""

from __future__ import annotations

import os
import re

DUMP_START = re.compile(r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$", re.M)
THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)$')
WAITING_FOR_DEVICE = ("/grader/device/client.py", "/grader/sim/")


def watch_after(limit: float) -> float:
    """When the runner dumps its stacks, for a call limited to `limit` seconds: shortly before."""
    return max(0.1, limit - 2.0) if limit > 4.0 else limit * 0.5


def split_dump(output: str) -> tuple[str, str]:
    """(what the student's code printed, the faulthandler dump after it)."""
    found = DUMP_START.search(output)
    return (output, "") if found is None else (output[:found.start()].rstrip(), output[found.start():])


def stuck_at(dump: str, student_files: set[str]) -> tuple[str, bool]:
    """("file.py:LINE in function", waiting for the device) of the first thread whose stack holds
    a frame of the student's files (by name), the innermost such frame; ("", False) if none."""
    frames: list[tuple[str, int, str]] = []
    blocks: list[list[tuple[str, int, str]]] = []
    for line in dump.splitlines():
        if THREAD.match(line):
            frames = []
            blocks.append(frames)
        elif (match := FRAME.match(line)) and blocks:
            frames.append((match["path"], int(match["line"]), match["name"]))
    for block in blocks:
        for depth, (path, line, name) in enumerate(block):  # most recent call first
            if os.path.basename(path) in student_files:
                waiting = any(marker in inner for inner, _, _ in block[:depth] for marker in WAITING_FOR_DEVICE)
                return f"{os.path.basename(path)}:{line} in {name}", waiting
    return "", False


def timeout_message(function: str, reason: str, dump: str, student_files: set[str]) -> str:
    """The timed-out call's first line: which function, the limit, where it was."""
    where, waiting = stuck_at(dump, student_files)
    text = f"{function}() {reason}"
    if not where:
        return text + " (a loop that never ends, in its host code or in a kernel?)"
    if waiting:
        return text + f": it was at {where}, waiting for a kernel launched there (does a loop in the kernel never end?)"
    return text + f": it was at {where} (a loop that never ends?)"
