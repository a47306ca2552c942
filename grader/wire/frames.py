"""Frames: how a message crosses between the judge (trusted) and a runner (untrusted).

A message is a length-prefixed JSON document followed by zero or more raw array frames. Arrays are
sent as bytes plus a validated numeric dtype (or a record of numeric fields) and shape; nothing is ever pickled, so a hostile runner
can at worst send wrong numbers, never code. The receiver says how much it accepts (`Bounds`): the
JSON part and the frames are refused before they are read when they are over it, and an array is
read once, into its own buffer (no second copy).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

_HEADER = struct.Struct("!Q")
ALLOWED_KINDS = set("biufc")  # bool, int, uint, float, complex; records of these: wire/dtypes.py


class ProtocolError(Exception):
    """A message across the judge/runner boundary is malformed: never trusted, never unpickled.
    (grader.errors names it among gpugrade's errors; it lives here, where the wire is checked.)"""


@dataclass(frozen=True)
class Bounds:
    """What a receiver accepts in one message."""

    json_bytes: int = 16 << 20
    frame_bytes: int = 1 << 31   # all array frames together

    def __post_init__(self):
        if self.json_bytes < 0 or self.frame_bytes < 0:
            raise ValueError("bounds must be >= 0")


def _encode(value: Any, frames: list) -> Any:
    if isinstance(value, np.ndarray):
        # (np.ascontiguousarray would make a 0-d array 1-d: a scalar must come back a scalar)
        arr = value if value.flags.c_contiguous else np.ascontiguousarray(value)
        desc = arr.dtype.str if arr.dtype.kind in ALLOWED_KINDS else _dtypes().describe(arr.dtype)
        frames.append(arr)
        return {"__ndarray__": len(frames) - 1, "dtype": desc, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return _encode(np.asarray(value).reshape(()), frames) | {"scalar": True}
    if isinstance(value, dict):
        if "__ndarray__" in value:
            raise ProtocolError("reserved key __ndarray__ in a message")
        return {str(k): _encode(v, frames) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, frames) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ProtocolError(f"cannot send a value of type {type(value).__name__}")


def _decode(value: Any, frames: list[bytearray]) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _decode_array(value, frames)
        return {k: _decode(v, frames) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, frames) for v in value]
    return value


def _decode_array(spec: dict, frames: list[bytearray]) -> Any:
    try:
        index, shape = int(spec["__ndarray__"]), tuple(int(s) for s in spec["shape"])
        dtype = _dtypes().parse(spec["dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed array descriptor: {exc}") from None
    if any(s < 0 for s in shape) or not 0 <= index < len(frames):
        raise ProtocolError("invalid array descriptor")
    raw = frames[index]
    if len(raw) != dtype.itemsize * math.prod(shape):  # (exact: int64 wraps [2^32, 2^32] to 0)
        raise ProtocolError("array frame size does not match its shape and dtype")
    try:
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape)  # a bytearray: writable, owned, not copied
    except ValueError as exc:  # empty, but too many elements for numpy ([2^40, 2^24, 0])
        raise ProtocolError(f"invalid array descriptor: {exc}") from None
    if spec.get("scalar"):
        if arr.size != 1:
            raise ProtocolError("a scalar descriptor of more than one value")
        return arr.reshape(())[()]
    return arr


def _dtypes():
    from . import dtypes  # (it checks with this module's ProtocolError)

    return dtypes


def send(stream: BinaryIO, message: Any) -> None:
    frames: list[np.ndarray] = []
    body = json.dumps({"message": _encode(message, frames), "frames": [f.nbytes for f in frames]}).encode()
    stream.write(_HEADER.pack(len(body)) + body)
    for frame in frames:
        if frame.nbytes:
            stream.write(frame.reshape(-1).view(np.uint8).data)
    stream.flush()


def _read_into(stream: BinaryIO, buffer: bytearray) -> bytearray:
    view, filled = memoryview(buffer), 0
    while filled < len(buffer):
        readinto = getattr(stream, "readinto", None)
        if readinto is not None:
            n = readinto(view[filled:])
        else:
            chunk = stream.read(len(buffer) - filled)
            n = len(chunk)
            view[filled:filled + n] = chunk
        if not n:
            raise EOFError("the other side closed the channel")
        filled += n
    return buffer


def read_document(stream: BinaryIO, head: bytes, bounds: Bounds) -> tuple[dict, Any, list[int]]:
    """After the length header `head`: the JSON document, its message and its frame sizes, all
    checked against `bounds` before a frame is read."""
    (length,) = _HEADER.unpack(head)
    if length > bounds.json_bytes:
        raise ProtocolError(f"a message of {length} bytes; at most {bounds.json_bytes} are accepted here")
    try:
        doc = json.loads(_read_into(stream, bytearray(length)))
        sizes = [int(s) for s in doc["frames"]]
        message = doc["message"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"malformed message: {exc}") from None
    if any(s < 0 for s in sizes):
        raise ProtocolError("a negative array frame size")
    if sum(sizes) > bounds.frame_bytes:
        raise ProtocolError(f"array frames of {sum(sizes)} bytes; at most {bounds.frame_bytes} are accepted here")
    return doc, message, sizes


def receive(stream: BinaryIO, bounds: Bounds = Bounds()) -> Any:
    _, message, sizes = read_document(stream, bytes(_read_into(stream, bytearray(_HEADER.size))), bounds)
    frames = [_read_into(stream, bytearray(s)) for s in sizes]
    return _decode(message, frames)


def exchange(out: BinaryIO, inp: BinaryIO, message: Any, bounds: Bounds = Bounds()) -> Any:
    """One request and its reply."""
    send(out, message)
    return receive(inp, bounds)
