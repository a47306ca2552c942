"""Frames through shared memory, on a Unix socket: the runner <-> device process channel.

The same messages as grader.wire.frames, but an array frame of SHARED_MIN bytes or more travels
as a sealed memfd passed with the message (SCM_RIGHTS) instead of through the socket: the sender
writes it once, seals it (no write, shrink or grow: the receiver's view cannot change under it),
and the receiver maps it copy-on-write, so the array is usable and writable at no further copy.
Bounds, dtypes and sizes are checked as for any frame; a descriptor that is not a sealed memfd
of exactly the announced size is a ProtocolError. Where memfds do not exist (not Linux), every
frame goes through the socket, as does one larger than the sender may write to a file
(RLIMIT_FSIZE, which binds memfds too).
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import resource
import socket
from typing import Any

import numpy as np

from .frames import _HEADER, Bounds, ProtocolError, _decode, _encode, _read_into, read_document

SHARED_MIN = 1 << 16
MAX_FDS = 64  # shared frames in one message
_SEALS = getattr(fcntl, "F_SEAL_WRITE", 8) | getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4)
AVAILABLE = hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and hasattr(socket, "send_fds")


def _sealed(array: np.ndarray) -> int:
    fd = os.memfd_create("gpugrade-frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(array.reshape(-1).view(np.uint8))
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | getattr(fcntl, "F_SEAL_SEAL", 1))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _largest_file() -> int:
    """The most bytes this process may write to one file (RLIMIT_FSIZE: a sandboxed runner's
    and device process's are bounded; a memfd is a file too, and a write past it fails with
    EFBIG): a frame larger than that goes through the socket."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return 1 << 62 if soft == resource.RLIM_INFINITY else soft


def send(sock: socket.socket, message: Any) -> None:
    frames: list[np.ndarray] = []
    encoded = _encode(message, frames)
    largest = _largest_file()
    shared = [i for i, f in enumerate(frames) if AVAILABLE and SHARED_MIN <= f.nbytes <= largest][:MAX_FDS]
    body = json.dumps({"message": encoded, "frames": [f.nbytes for f in frames], "shared": shared}).encode()
    fds = [_sealed(frames[i]) for i in shared]
    try:
        head = _HEADER.pack(len(body))
        if fds:
            sent = socket.send_fds(sock, [head], fds)  # the descriptors travel with the first bytes
            if sent < len(head):
                sock.sendall(head[sent:])
        else:
            sock.sendall(head)
        sock.sendall(body)
        for i, frame in enumerate(frames):
            if frame.nbytes and i not in shared:
                sock.sendall(frame.reshape(-1).view(np.uint8).data)
    finally:
        for fd in fds:
            os.close(fd)


def receive(sock: socket.socket, bounds: Bounds = Bounds()) -> Any:
    data, fds, _, _ = socket.recv_fds(sock, _HEADER.size, MAX_FDS) if AVAILABLE else (sock.recv(_HEADER.size), [], 0, 0)
    try:
        if not data:
            raise EOFError("the other side closed the channel")
        stream = sock.makefile("rb", buffering=0)  # the rest: plain reads of the same socket
        head = bytes(data) + bytes(_read_into(stream, bytearray(_HEADER.size - len(data))))
        doc, message, sizes = read_document(stream, head, bounds)
        try:
            shared = [int(i) for i in doc.get("shared", [])]
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed message: {exc}") from None
        if len(shared) != len(fds) or len(set(shared)) != len(shared) or any(not 0 <= i < len(sizes) for i in shared):
            raise ProtocolError(f"{len(fds)} shared frames passed for {len(shared)} announced")
        mapped = dict(zip(shared, (_map(fd, sizes[i]) for i, fd in zip(shared, fds))))
        frames = [mapped[i] if i in mapped else _read_into(stream, bytearray(s)) for i, s in enumerate(sizes)]
        return _decode(message, frames)
    finally:
        for fd in fds:
            os.close(fd)


def _map(fd: int, size: int):
    """A sealed memfd of exactly `size` bytes, mapped copy-on-write."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise ProtocolError("a shared frame that is not a memfd") from None
    if seals & _SEALS != _SEALS:
        raise ProtocolError("a shared frame that is not sealed against writes")
    if os.fstat(fd).st_size != size:
        raise ProtocolError("a shared frame whose size is not the announced one")
    if size == 0:
        return bytearray()
    return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def exchange(sock: socket.socket, message: Any, bounds: Bounds = Bounds()) -> Any:
    send(sock, message)
    return receive(sock, bounds)
