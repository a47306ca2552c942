"""The judge/runner wire format: data only, validated, never pickled."""

import io

import numpy as np
import pytest

from grader import protocol
from grader.errors import ProtocolError


def roundtrip(message):
    buf = io.BytesIO()
    protocol.send(buf, message)
    buf.seek(0)
    return protocol.receive(buf)


def test_arrays_scalars_and_nesting_survive():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = roundtrip({"a": a, "s": np.float32(2.5), "l": [1, None, "x", np.int64(7)], "t": (True,)})
    assert got["a"].dtype == np.float32 and np.array_equal(got["a"], a)
    assert got["s"] == np.float32(2.5) and got["s"].dtype == np.float32
    assert got["l"] == [1, None, "x", 7] and got["t"] == [True]


def test_non_contiguous_array_is_sent_as_its_values():
    a = np.arange(20, dtype=np.int32)[::3]
    assert np.array_equal(roundtrip([a])[0], a)


@pytest.mark.parametrize("value", [np.array([object()]), {1, 2}, lambda: 0])
def test_values_that_are_not_plain_data_are_refused(value):
    with pytest.raises(ProtocolError):
        roundtrip(value)


def test_a_frame_that_lies_about_its_size_is_refused():
    buf = io.BytesIO()
    protocol.send(buf, np.zeros(4, np.float32))
    raw = bytearray(buf.getvalue())
    bad = io.BytesIO(raw.replace(b'"shape": [4]', b'"shape": [5]'))
    with pytest.raises(ProtocolError, match="does not match"):
        protocol.receive(bad)


def test_object_dtype_descriptor_from_a_hostile_runner_is_refused():
    body = b'{"message": {"__ndarray__": 0, "dtype": "|O", "shape": [1]}, "frames": [8]}'
    stream = io.BytesIO(protocol._HEADER.pack(len(body)) + body + bytes(8))
    with pytest.raises(ProtocolError):
        protocol.receive(stream)
