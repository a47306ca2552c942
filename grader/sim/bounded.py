"""Bounded memo tables for the simulator's module-level caches."""

from __future__ import annotations


class BoundedCache(dict):
    """A dict of at most `maxsize` entries: inserting a new key into a full one drops the oldest.

    The simulator memoises per kernel (marked code, typing, lockstep compilations, compile-check
    reports); unbounded, those tables grow for the life of a process that simulates many kernels
    (a test session, a benchmark, a long-lived device process). Lookups stay plain dict lookups."""

    __slots__ = ("maxsize",)

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = maxsize

    def __setitem__(self, key, value) -> None:
        if key not in self and len(self) >= self.maxsize:
            del self[next(iter(self))]
        super().__setitem__(key, value)
