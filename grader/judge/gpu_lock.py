"""One machine's GPUs, many grades at once: a timing has them to itself.

`gpugrade validate` and `batch --jobs N`, Dask workers, two instructors on one server: grades
run side by side and share the GPUs. A kernel timed while another grade's kernels run is timed
with theirs, and the verdict would depend on who else was grading. So every request a judge
sends to a GPU runner holds the machine's GPU lock shared, and every timing (a student's, the
reference's, the copy bandwidth, a library baseline, NCCL) holds it alone: timings wait for the
calls in flight, and calls wait for the timing.

A lock file with fcntl.flock: across processes and threads (each hold opens the file afresh, and
flock locks of two opens conflict even in one process), released by the kernel when a holder
dies. Held by the judge, never by a runner, so a student's process can neither skip nor hog it
beyond its call's timeout. Writers first: a timing waiting for the lock closes a turnstile that
new shared holders pass through, so a stream of overlapping calls cannot starve it. A thread
holding the lock alone passes its own calls through (the timing's warm-up is such a call).
Where there is no fcntl (Windows) there is no lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

DEFAULT_PATH = "/tmp/gpugrade-gpu.lock"
_held = threading.local()  # .alone: this thread holds the lock alone


def lock_path() -> str:
    """The machine's lock file (`GPUGRADE_GPU_LOCK` to put it elsewhere: all judges sharing the
    GPUs must name the same file)."""
    return os.environ.get("GPUGRADE_GPU_LOCK") or DEFAULT_PATH


def _open(path: str) -> int:
    # O_CREAT only when missing: with fs.protected_regular, O_CREAT on a file another user
    # created in sticky /tmp is refused even where its mode allows the open
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    with contextlib.suppress(OSError):  # other users' judges lock it too
        os.fchmod(fd, 0o666)
    return fd


@contextlib.contextmanager
def holding(alone: bool = False, path: str | None = None) -> Iterator[float]:
    """Hold the GPU lock (shared, or `alone`) for the block; yields the seconds spent waiting."""
    if fcntl is None or getattr(_held, "alone", False):
        yield 0.0
        return
    path = path or lock_path()
    began = time.monotonic()
    turnstile, main = _open(path + ".turnstile"), _open(path)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(main, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        waited = time.monotonic() - began
        _held.alone = alone
        try:
            yield waited
        finally:
            _held.alone = False
            fcntl.flock(main, fcntl.LOCK_UN)
    finally:
        os.close(main)
        os.close(turnstile)
