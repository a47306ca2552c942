"""A few threads of this process for work that lets go of the GIL: hashing (hashlib) and NumPy's
gathers, on the arrays a GPU timing moves (2^24 elements each).

One pool per process, made on first use (and made anew in a forked child, whose parent's threads
are not there); where no thread can be started (a process limit) or there is one core, the work
runs in the caller's thread, with the same results.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 8
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the pid it was made in, the pool)
_lock = threading.Lock()


def spread(function: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """[function(item) for item in items], on the pool's threads where there are some."""
    items = list(items)
    pool = _threads() if len(items) > 1 else None
    if pool is not None:
        try:
            return list(pool.map(function, items))
        except RuntimeError:  # "can't start new thread" (or shutting down): the same work, in this one
            pass
    return [function(item) for item in items]


def _threads() -> ThreadPoolExecutor | None:
    global _pool
    workers = min(MAX_THREADS, os.cpu_count() or 1)
    if workers < 2:
        return None
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(workers, thread_name_prefix="gpugrade-worker"))
        return _pool[1]
