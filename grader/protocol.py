"""The wire format between the judge (trusted) and the runner (untrusted).

A message is a length-prefixed JSON document followed by zero or more raw array frames. Arrays are
sent as bytes plus a validated numeric dtype and shape; nothing is ever pickled, so a hostile runner
can at worst send wrong numbers, never code.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

import numpy as np

from .errors import ProtocolError

_HEADER = struct.Struct("!Q")
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_ARRAY_BYTES = 1 << 31
ALLOWED_KINDS = set("biufc")  # bool, int, uint, float, complex: no object or void dtypes


def _encode(value: Any, frames: list[bytes]) -> Any:
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype.kind not in ALLOWED_KINDS:
            raise ProtocolError(f"arrays of dtype {arr.dtype} cannot cross the boundary")
        frames.append(arr.tobytes())
        return {"__ndarray__": len(frames) - 1, "dtype": arr.dtype.str, "shape": list(arr.shape)}
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


def _decode(value: Any, frames: list[bytes]) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _decode_array(value, frames)
        return {k: _decode(v, frames) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, frames) for v in value]
    return value


def _decode_array(spec: dict, frames: list[bytes]) -> Any:
    try:
        index, dtype, shape = int(spec["__ndarray__"]), np.dtype(spec["dtype"]), tuple(int(s) for s in spec["shape"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed array descriptor: {exc}") from None
    if dtype.kind not in ALLOWED_KINDS or any(s < 0 for s in shape) or not 0 <= index < len(frames):
        raise ProtocolError("invalid array descriptor")
    raw = frames[index]
    if len(raw) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise ProtocolError("array frame size does not match its shape and dtype")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return arr[()] if spec.get("scalar") else arr


def send(stream: BinaryIO, message: Any) -> None:
    frames: list[bytes] = []
    body = json.dumps({"message": _encode(message, frames), "frames": [len(f) for f in frames]}).encode()
    stream.write(_HEADER.pack(len(body)) + body)
    for frame in frames:
        stream.write(frame)
    stream.flush()


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream: BinaryIO) -> Any:
    (length,) = _HEADER.unpack(_read_exact(stream, _HEADER.size))
    if length > MAX_JSON_BYTES:
        raise ProtocolError(f"message of {length} bytes is over the limit")
    try:
        doc = json.loads(_read_exact(stream, length))
        sizes = [int(s) for s in doc["frames"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"malformed message: {exc}") from None
    if sum(sizes) > MAX_ARRAY_BYTES or any(s < 0 for s in sizes):
        raise ProtocolError("array frames over the limit")
    frames = [_read_exact(stream, s) for s in sizes]
    return _decode(doc["message"], frames)


def exchange(out: BinaryIO, inp: BinaryIO, message: Any) -> Any:
    """One request and its reply."""
    send(out, message)
    return receive(inp)
