"""An array's digest: what the judge and the device process compare (the data flow, the replay).

SHA-256 (the CPU's SHA instructions: 1.6x blake2b's speed here) over the dtype, the byte count and
the C-order bytes; an array of more than CHUNK bytes is hashed in chunks by a few threads
(grader.wire.parallel), their digests hashed in turn. The byte count and the form are in
what is hashed, so a small array never has the digest of a large one's chunk digests. On a GPU a
timed call's inputs and answer are digested by both sides: 192 MiB at 2^24 elements.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .parallel import spread

CHUNK = 4 << 20


def digest(array: np.ndarray) -> str:
    """An array's dtype and C-order bytes, hashed. Not its shape: a matrix copied to the GPU
    flattened (`A.ravel()`, indexed `A[row * K + k]`), or an answer reshaped on the host, holds
    the same data."""
    array = np.ascontiguousarray(array)
    data = memoryview(array).cast("B")
    chunked = len(data) > CHUNK
    h = hashlib.sha256(f"{array.dtype.str}|{len(data)}|{'chunks' if chunked else 'bytes'}|".encode())
    if not chunked:
        h.update(data)
    else:
        for part in spread(_sha256, [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]):
            h.update(part)
    return h.hexdigest()[:32]


def _sha256(chunk: memoryview) -> bytes:
    return hashlib.sha256(chunk).digest()


def text_digest(text: str) -> str:
    """A source file's text (as Python reads it: decoded, universal newlines), hashed: what the
    judge saw in a workspace and what the device process accepts of a kernel's file."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
