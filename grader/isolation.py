"""Linux confinement for a runner process when the judge runs as root.

Called in the child between fork and exec: a private mount namespace where the course's
solutions/ and tests/ and the judge's private folder are covered by empty read-only tmpfs mounts,
a network namespace with no interfaces up (no network at all), then either the unprivileged
uid/gid `nobody` or, where `nobody` cannot reach the Python interpreter (a pyenv under /root),
root with every capability dropped, so the covering mounts cannot be undone and file modes bind.
Not root (a student's laptop): none of this applies, and the rlimits still do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 1, 2, 4, 0x4000, 1 << 18
NOBODY = 65534

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def can_isolate() -> bool:
    return os.name == "posix" and os.uname().sysname == "Linux" and os.geteuid() == 0


def reachable_by_others(path: str) -> bool:
    """Whether a user who is neither owner nor group could open `path` (every folder searchable)."""
    path = os.path.realpath(path)
    parts = [path] + [p for p in _parents(path)]
    return all(os.stat(p).st_mode & 0o001 for p in parts if os.path.isdir(p)) and bool(os.stat(path).st_mode & 0o004)


def _parents(path: str):
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return
        yield parent
        path = parent


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    PR_SET_NO_NEW_PRIVS, LINUX_CAPABILITY_VERSION_3 = 38, 0x20080522
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def isolate(hidden_paths: tuple[str, ...], as_nobody: bool, uid: int = NOBODY) -> None:
    """Namespaces, hidden paths, no network, unprivileged uid. Raises OSError if a step fails."""
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS | CLONE_NEWNET) failed")
    # Our mounts must not propagate back to the host's namespace.
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private failed")
    for path in hidden_paths:
        if os.path.isdir(path) and _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs",
                                               MS_RDONLY | MS_NOSUID | MS_NODEV, b"size=4k,mode=000") != 0:
            raise OSError(ctypes.get_errno(), f"hiding {path} failed")
    if as_nobody:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    else:
        drop_all_capabilities()
