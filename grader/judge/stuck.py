"""Where a call that timed out was stuck, from the runner's last words.

Just before the judge's limit a runner dumps every thread's stack to stderr (faulthandler, armed
by the call's `watch_s`; grader/runner/serve.py). The judge kills the runner at the limit and
reads what it wrote: the innermost frame in the student's files says where the call was, and
frames of the device client above it say it was waiting for a kernel. The simulated GPU's device
process says at the same time where that kernel is, and how far its loops got
(grader/device/watch.py). Feedback only: the runner runs the student's code, so nothing graded
is read from here.
"""

from __future__ import annotations

import os
import re

DUMP_START = re.compile(r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$", re.M)
THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)$')
WAITING_FOR_DEVICE = ("/grader/device/client.py", "/grader/sim/")
KERNEL_AT = re.compile(r"^gpugrade-device-watch call (\d+): (.{1,500})$", re.M)  # (grader.device.watch.MARK)
# the simulated GPU ran no kernel then: "no kernel running, N launched in this call" (grader.device.watch.IDLE)
IDLE = re.compile(r"^no kernel running, (\d+) launched in this call$")
# where a kernel was, and how many the call launched before it (grader.device.watch.AFTER)
AFTER = re.compile(r"^(?P<where>.*); launches before it in this call: (?P<launched>\d+)$")
# a call that launched this many kernels before the one running is looping on the host, not in it
MANY_LAUNCHES = 100


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
    chain, waiting = _student_frames(dump, student_files)
    return (chain[0], waiting) if chain else ("", False)


def _student_frames(dump: str, student_files: set[str]) -> tuple[list[str], bool]:
    """Every frame of the student's files ("file.py:LINE in function", innermost first) of the
    first thread that has one, and whether it was waiting for the device there."""
    frames: list[tuple[str, int, str]] = []
    blocks: list[list[tuple[str, int, str]]] = []
    for line in dump.splitlines():
        if THREAD.match(line):
            frames = []
            blocks.append(frames)
        elif (match := FRAME.match(line)) and blocks:
            frames.append((match["path"], int(match["line"]), match["name"]))
    for block in blocks:
        for depth, (path, _, _) in enumerate(block):  # most recent call first
            if os.path.basename(path) in student_files:
                waiting = any(marker in inner for inner, _, _ in block[:depth] for marker in WAITING_FOR_DEVICE)
                return [f"{os.path.basename(p)}:{n} in {f}" for p, n, f in block[depth:]
                        if os.path.basename(p) in student_files], waiting
    return [], False


def kernel_at(device_output: str, call: int) -> str:
    """Where the device process said call `call`'s kernel was, from its output ("" if it said
    nothing of that call): "reduction.py:149 in reduce_grid_stride_kernel, in the loop of line
    148 at iteration 3,120 of up to 540,679 in a thread"."""
    said = [m[2] for m in KERNEL_AT.finditer(device_output) if int(m[1]) == call]
    return "".join(c for c in said[-1] if c.isprintable()) if said else ""


def timeout_message(function: str, reason: str, dump: str, student_files: set[str], kernel: str = "") -> str:
    """The timed-out call's first line: which function, the limit, where it was (`kernel`: where
    the device said the kernel it waited for was, `kernel_at`)."""
    chain, waiting = _student_frames(dump, student_files)
    where = chain[0] if chain else ""
    text = f"{function}() {reason}"
    if not where:
        return text + " (a loop that never ends, in its host code or in a kernel?)"
    idle, after = IDLE.match(kernel), AFTER.match(kernel)
    kernel, launched = (after["where"], int(after["launched"])) if after else (kernel, 0)
    if waiting and (idle or launched >= MANY_LAUNCHES):
        # the kernels it launched end: the host keeps launching them (a while loop whose step is never taken)
        called = f" (called from {', from '.join(chain[1:4])})" if len(chain) > 1 else ""
        state = (f"launching a kernel or copying, but no kernel was running then ({int(idle[1]):,} launched in this "
                 f"call, each of which ended)" if idle else
                 f"waiting for a kernel launched there, which was at {kernel}, after {launched:,} others of this "
                 f"call, each of which ended")
        return text + (f": it was at {where}{called}, {state}: a loop in the host code that never ends? (a while loop "
                       f"whose condition never changes)")
    if waiting and kernel:
        bounded = " of up to " in kernel  # (a range() loop: it ends, after that many iterations)
        question = "does each thread need that many?" if bounded else "does a loop in the kernel never end?"
        return text + f": it was at {where}, waiting for a kernel launched there, which was at {kernel} ({question})"
    if waiting:
        return text + f": it was at {where}, waiting for a kernel launched there (does a loop in the kernel never end?)"
    return text + f": it was at {where} (a loop that never ends?)"


def import_timeout_message(module: str, reason: str, dump: str, student_files: set[str]) -> str:
    """An import of the student's module that timed out: where its top level was (a notebook's
    cell is part of it), so a loop left in a cell is not taken for the kernel's."""
    where, _ = stuck_at(dump, student_files)
    text = f"importing {module}.py {reason}"
    if not where:
        return text + " (a loop that never ends, at its top level?)"
    return text + (f": it was at {where.removesuffix(' in <module>')} (code at the top level of a module, or in "
                   f"a notebook's cell, runs when the module is imported: a loop that never ends?)")
