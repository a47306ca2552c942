"""Array dtypes as data: what may cross between processes and how it is written.

A plain numeric dtype (bool, int, uint, float, complex) is its `str` ("<f4"). A record dtype of
numeric fields (numba.cuda.random's xoroshiro128p states: two uint64 fields, aligned) is an
object: names, formats, offsets, itemsize, aligned; nothing nested, no objects, no subarrays,
bounded sizes. Anything else (object, string, void without fields) is refused, so a hostile
runner can at worst describe wrong numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .frames import ALLOWED_KINDS, ProtocolError

MAX_FIELDS = 64
MAX_RECORD_BYTES = 4096
MAX_FIELD_NAME = 64


def describe(dtype: np.dtype) -> str | dict:
    """`dtype` as data (ProtocolError for one that may not cross)."""
    dtype = np.dtype(dtype)
    if dtype.kind in ALLOWED_KINDS:
        return dtype.str
    if dtype.fields is not None and dtype.names:
        formats = []
        for name in dtype.names:
            field = dtype.fields[name][0]
            if field.kind not in ALLOWED_KINDS or field.shape:
                raise ProtocolError(f"a record field {name!r} of dtype {field} cannot cross the boundary")
            formats.append(field.str)
        return {"names": list(dtype.names), "formats": formats,
                "offsets": [int(dtype.fields[name][1]) for name in dtype.names],
                "itemsize": int(dtype.itemsize), "aligned": bool(dtype.isalignedstruct)}
    raise ProtocolError(f"arrays of dtype {dtype} cannot cross the boundary")


def parse(desc: Any) -> np.dtype:
    """The dtype `describe` wrote, checked (ProtocolError for anything else)."""
    if isinstance(desc, str):
        try:
            dtype = np.dtype(desc)
        except TypeError:
            raise ProtocolError(f"not a dtype: {desc[:40]!r}") from None
        if dtype.kind not in ALLOWED_KINDS:
            raise ProtocolError(f"arrays of dtype {desc[:40]!r} cannot cross the boundary")
        return dtype
    if not isinstance(desc, dict):
        raise ProtocolError("a dtype must be a string or a record description")
    names, formats, offsets = desc.get("names"), desc.get("formats"), desc.get("offsets")
    itemsize, aligned = desc.get("itemsize"), desc.get("aligned", False)
    if not (isinstance(names, list) and isinstance(formats, list) and isinstance(offsets, list)
            and 0 < len(names) == len(formats) == len(offsets) <= MAX_FIELDS):
        raise ProtocolError("a record dtype needs names, formats and offsets of one length")
    if not (isinstance(itemsize, int) and not isinstance(itemsize, bool) and 0 < itemsize <= MAX_RECORD_BYTES):
        raise ProtocolError(f"a record itemsize of {itemsize!r}")
    fields = []
    for name, fmt, offset in zip(names, formats, offsets):
        if not (isinstance(name, str) and 0 < len(name) <= MAX_FIELD_NAME and name.isidentifier()):
            raise ProtocolError(f"a record field name {str(name)[:40]!r}")
        field = parse(fmt) if isinstance(fmt, str) else None
        if field is None:
            raise ProtocolError("a record field must be a plain number")
        if not (isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset
                and offset + field.itemsize <= itemsize):
            raise ProtocolError(f"a record field offset {offset!r} outside its {itemsize}-byte record")
        fields.append(field)
    try:
        return np.dtype({"names": names, "formats": fields, "offsets": offsets, "itemsize": itemsize},
                        align=bool(aligned))
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"an impossible record dtype: {exc}") from None
