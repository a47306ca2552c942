"""The judge/runner wire format (grader.wire): data only, bounded, validated, never pickled."""

import io

import numpy as np
import pytest

from grader import wire
from grader.errors import ProtocolError
from grader.wire import Bounds, CallReply, ErrorInfo, LaunchSummary, Reply
from grader.wire import frames


def roundtrip(message):
    buf = io.BytesIO()
    wire.send(buf, message)
    buf.seek(0)
    return wire.receive(buf)


def test_arrays_scalars_and_nesting_survive():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = roundtrip({"a": a, "s": np.float32(2.5), "l": [1, None, "x", np.int64(7)], "t": (True,)})
    assert got["a"].dtype == np.float32 and np.array_equal(got["a"], a)
    assert got["s"] == np.float32(2.5) and got["s"].dtype == np.float32
    assert got["l"] == [1, None, "x", 7] and got["t"] == [True]


def test_scalars_and_0d_arrays_keep_their_shape():
    got = roundtrip([np.float32(2.5), np.array(3, np.int64), np.zeros((0, 3), np.float32)])
    assert isinstance(got[0], np.float32) and got[0] == 2.5, "a scalar crosses as a scalar, not a 1-element array"
    assert got[1].shape == () and got[1] == 3 and got[2].shape == (0, 3)


def test_non_contiguous_array_is_sent_as_its_values():
    a = np.arange(20, dtype=np.int32)[::3]
    assert np.array_equal(roundtrip([a])[0], a)


@pytest.mark.parametrize("value", [np.array([object()]), {1, 2}, lambda: 0])
def test_values_that_are_not_plain_data_are_refused(value):
    with pytest.raises(ProtocolError):
        roundtrip(value)


def test_a_frame_that_lies_about_its_size_is_refused():
    buf = io.BytesIO()
    wire.send(buf, np.zeros(4, np.float32))
    raw = bytearray(buf.getvalue())
    bad = io.BytesIO(raw.replace(b'"shape": [4]', b'"shape": [5]'))
    with pytest.raises(ProtocolError, match="does not match"):
        wire.receive(bad)


@pytest.mark.parametrize("shape", [[1 << 32, 1 << 32], [1 << 40, 1 << 24, 0]], ids=["wraps-to-0", "empty-but-huge"])
def test_a_shape_whose_product_overflows_is_refused(shape):
    """[2^32, 2^32] is 0 elements in int64 and matched an empty frame: numpy's ValueError at the
    reshape, uncaught in the device process's loop, ended it (the judge then blamed the device)."""
    body = ('{"message": {"__ndarray__": 0, "dtype": "<f4", "shape": %s}, "frames": [0]}' % shape).encode()
    with pytest.raises(ProtocolError):
        wire.receive(io.BytesIO(frames._HEADER.pack(len(body)) + body))


def test_object_dtype_descriptor_from_a_hostile_runner_is_refused():
    body = b'{"message": {"__ndarray__": 0, "dtype": "|O", "shape": [1]}, "frames": [8]}'
    stream = io.BytesIO(frames._HEADER.pack(len(body)) + body + bytes(8))
    with pytest.raises(ProtocolError):
        wire.receive(stream)


def test_frames_over_the_receivers_bounds_are_refused_before_they_are_read():
    class Unreadable(io.BytesIO):
        """A stream whose frames would be 2 GiB: reading past the header is a failure."""

        def __init__(self, head):
            super().__init__(head)
            self.limit = len(head)

        def readinto(self, b):
            if self.tell() >= self.limit:
                raise AssertionError("the frames were read")
            return super().readinto(b)

    body = b'{"message": {"__ndarray__": 0, "dtype": "<f4", "shape": [536870912]}, "frames": [2147483648]}'
    stream = Unreadable(frames._HEADER.pack(len(body)) + body)
    with pytest.raises(ProtocolError, match="at most 1024 are accepted"):
        wire.receive(stream, Bounds(frame_bytes=1024))
    with pytest.raises(ProtocolError, match="a message of .* bytes; at most 10"):
        wire.receive(io.BytesIO(frames._HEADER.pack(len(body)) + body), Bounds(json_bytes=10))


def test_a_received_array_is_writable_and_owns_its_bytes():
    got = roundtrip(np.arange(6, dtype=np.int32))
    got[0] = 9  # the judge may use it freely: no read-only view of a shared buffer
    assert got[0] == 9


LAUNCH = {"kernel": "k", "grid": [4, 1, 1], "block": [128, 1, 1], "shared_bytes": 0, "device": 0,
          "executor": "simt", "fallback_reason": None,
          "counters": {"global_load_requests": 32, "global_load_sectors": 128, "global_loads": 1024,
                       "global_store_requests": 16, "global_store_sectors": 64, "global_stores": 512,
                       "shared_requests": 0, "bank_conflict_wavefronts": 0, "sectors_per_request": 4.0},
          "lines": [{"line": 7, "space": "global", "kind": "load", "requests": 32, "sectors": 128}]}


def test_a_consistent_launch_summary_is_accepted_as_sent():
    summary = LaunchSummary.parse(LAUNCH)
    assert summary.counters["global_load_sectors"] == 128 and summary.grid == (4, 1, 1)
    assert summary.as_dict()["lines"][0]["sectors"] == 128
    sample = {"lanes": [0, 1], "addresses": [0, 4096], "itemsize": 4}  # one warp's request, for a picture
    kept = LaunchSummary.parse(dict(LAUNCH, lines=[dict(LAUNCH["lines"][0], sample=sample)]))
    assert kept.as_dict()["lines"][0]["sample"] == sample


@pytest.mark.parametrize("counters, field", [
    ({"global_load_sectors": float("nan")}, "counters.global_load_sectors"),
    ({"global_load_sectors": float("inf")}, "counters.global_load_sectors"),
    ({"global_load_sectors": -1}, "counters.global_load_sectors"),
    ({"global_load_sectors": "4"}, "counters.global_load_sectors"),
    ({"global_load_sectors": 1}, "global_load_sectors = 1 for global_load_requests = 32 is impossible"),
    ({"global_load_sectors": 32 * 32 + 1}, "is impossible"),
    ({"global_load_requests": 0}, "global_load_sectors = 128 without any global_load_requests"),
    ({"global_loads": 1}, "global_loads = 1 for global_load_requests = 32 is impossible"),
    ({"shared_requests": 0, "bank_conflict_wavefronts": 3}, "without any shared_requests"),
])
def test_counters_that_are_not_finite_or_not_consistent_are_refused(counters, field):
    doc = dict(LAUNCH, counters=dict(LAUNCH["counters"], **counters))
    with pytest.raises(ProtocolError, match=field.replace("(", r"\(").replace(")", r"\)")):
        LaunchSummary.parse(doc, "launches[0]")


@pytest.mark.parametrize("change, field", [
    ({"grid": [0, 1, 1]}, "launch.grid"),
    ({"grid": [1, 1]}, "launch.grid"),
    ({"kernel": 7}, "launch.kernel"),
    ({"lines": [{"line": 1, "space": "global", "requests": 1, "sectors": 40}]}, "launch.lines"),
    ({"compiled": {"registers": float("nan")}}, "launch.compiled.registers"),
    ({"lines": [dict(LAUNCH["lines"][0], sample={"lanes": [40], "addresses": [0], "itemsize": 4})]},
     "launch.lines[0].sample"),
    ({"lines": [dict(LAUNCH["lines"][0], sample={"lanes": list(range(32)) * 2, "addresses": [0] * 64,
                                                 "itemsize": 4})]}, "launch.lines[0].sample.lanes"),
    ({"warnings": ["x"] * 20000}, "launch.warnings"),
])
def test_a_malformed_launch_summary_names_its_field(change, field):
    with pytest.raises(ProtocolError, match=field.replace("[", r"\[").replace(".", r"\.")):
        LaunchSummary.parse(dict(LAUNCH, **change))


def test_strings_from_the_runner_are_capped():
    error = ErrorInfo.parse({"kind": "exception", "type": "E" * 10_000, "message": "m" * 1_000_000,
                             "traceback": "t" * 10_000_000})
    assert len(error.type) < 300 and len(error.message) < 2100 and len(error.traceback) < 8100
    assert error.message.endswith("characters cut]")
    with pytest.raises(ProtocolError, match="error.kind"):
        ErrorInfo.parse({"kind": "score", "type": "x", "message": "y"})


def test_a_call_reply_must_give_back_the_arguments_that_were_sent():
    sent = [np.zeros(4, np.float32), 3]
    ok = CallReply.parse({"ok": True, "returned": 1.5, "args": [np.zeros(4, np.float32), None]}, sent)
    assert ok.returned == 1.5 and ok.launches == []
    for args in ([np.zeros(5, np.float32), None], [np.zeros(4, np.float64), None], [np.zeros(4, np.float32)],
                 [np.zeros(4, np.float32), np.zeros(1)]):
        with pytest.raises(ProtocolError, match="args"):
            CallReply.parse({"ok": True, "returned": None, "args": args}, sent)
    with pytest.raises(ProtocolError, match="reply.ok"):
        Reply.parse({"ok": "yes"})
    with pytest.raises(ProtocolError, match="returned"):
        CallReply.parse({"ok": True, "returned": {"score": 100}, "args": [np.zeros(4, np.float32), None]}, sent)


# -- frames through sealed shared memory (the runner <-> device process socket) ----------------
import socket as _socket  # noqa: E402

from grader.wire import shared  # noqa: E402

needs_memfd = pytest.mark.skipif(not shared.AVAILABLE, reason="memfds and SCM_RIGHTS are Linux's")


@needs_memfd
def test_large_arrays_cross_as_sealed_shared_memory_and_arrive_writable():
    left, right = _socket.socketpair()
    big = np.arange(1 << 20, dtype=np.float32)
    shared.send(left, {"big": big, "small": np.arange(3, dtype=np.int64), "s": np.float32(1.5)})
    got = shared.receive(right, Bounds())
    assert np.array_equal(got["big"], big) and np.array_equal(got["small"], [0, 1, 2]) and got["s"] == 1.5
    got["big"][0] = -1  # copy-on-write: the receiver's own
    assert big[0] == 0


def _raw(sock, doc: dict, fds: list[int]) -> None:
    body = __import__("json").dumps(doc).encode()
    _socket.send_fds(sock, [frames._HEADER.pack(len(body))], fds)
    sock.sendall(body)


@needs_memfd
@pytest.mark.parametrize("problem", ["unsealed", "wrong size", "missing fd"])
def test_a_shared_frame_that_is_not_sealed_or_not_the_announced_size_is_refused(problem):
    import os

    left, right = _socket.socketpair()
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.write(fd, bytes(1 << 16))
    if problem != "unsealed":
        import fcntl

        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    size = (1 << 17) if problem == "wrong size" else (1 << 16)
    doc = {"message": {"__ndarray__": 0, "dtype": "|u1", "shape": [size]}, "frames": [size], "shared": [0]}
    _raw(left, doc, [] if problem == "missing fd" else [fd])
    with pytest.raises(ProtocolError, match="sealed|size|announced"):
        shared.receive(right, Bounds())


def test_a_finding_is_a_checked_record():
    from grader.wire import Finding

    doc = {"check": "races", "type": "RaceError", "message": "data race on shared array 'sA'", "kernel": "k",
           "file": "matmul.py", "line": 42, "block": [1, 0, 0], "thread": [3, 2, 0], "array": "sA", "index": [2, 5]}
    finding = ErrorInfo.parse({"kind": "simulator", "type": "RaceError", "message": "m", "finding": doc}).finding
    assert isinstance(finding, Finding) and finding.block == (1, 0, 0) and finding.as_dict()["index"] == [2, 5]
    for bad in ({"check": "score"}, {"line": -1}, {"block": list(range(20))}, {"thread": ["x"]}):
        with pytest.raises(ProtocolError, match="finding"):
            ErrorInfo.parse({"kind": "simulator", "type": "RaceError", "message": "m", "finding": dict(doc, **bad)})


def test_a_name_that_is_not_a_string_is_a_protocol_error():
    from grader.wire import ErrorInfo, ProtocolError

    with pytest.raises(ProtocolError, match=r"error\.kind: .* is not one of"):
        ErrorInfo.parse({"kind": ["simulator"], "type": "X", "message": "m"})


def test_record_arrays_of_numbers_cross_and_nothing_else_does():
    """numba.cuda.random's states (an aligned record of two uint64) cross as a described record;
    object fields, nested records and impossible layouts are refused."""
    import io

    from grader.wire import dtypes, frames

    states = np.dtype([("s0", np.uint64), ("s1", np.uint64)], align=True)
    data = np.arange(8, dtype=np.uint64).view(states)
    stream = io.BytesIO()
    frames.send(stream, {"states": data})
    stream.seek(0)
    got = frames.receive(stream)["states"]
    assert got.dtype == states and got.dtype.isalignedstruct and np.array_equal(got.view(np.uint64), np.arange(8))
    for bad in (np.dtype([("o", object)]), np.dtype([("r", [("x", np.int32)])]), np.dtype("U4"), np.dtype("V8")):
        with pytest.raises(ProtocolError):
            dtypes.describe(bad)
    desc = dtypes.describe(states)
    for change in ({"offsets": [0, 12]}, {"itemsize": 1 << 20}, {"names": ["s0", "__class__.x"]},
                   {"formats": ["<u8", "|O"]}, {"formats": ["<u8", {"names": []}]}):
        with pytest.raises(ProtocolError):
            dtypes.parse({**desc, **change})


def test_a_digest_is_of_dtype_and_bytes_in_one_pass_or_in_chunks_alike(monkeypatch):
    from grader.wire import digests, parallel

    big = np.random.default_rng(0).standard_normal(3 * digests.CHUNK // 4 + 5).astype(np.float64)  # > CHUNK bytes
    key = digests.digest(big)
    assert key == digests.digest(big.reshape(-1, 1)) == digests.digest(big[::-1][::-1].copy())  # shape aside
    assert key != digests.digest(big.astype(np.float32).astype(np.float64)) != digests.digest(big.view(np.int64))
    monkeypatch.setattr(parallel, "_threads", lambda: None)  # one core, or no thread to be had: the same digest
    assert digests.digest(big) == key
    # a small array holding a big one's chunk digests is not the big one
    import hashlib
    chunks = memoryview(big).cast("B")
    forged = np.frombuffer(b"".join(hashlib.sha256(chunks[i:i + digests.CHUNK]).digest()
                                    for i in range(0, len(chunks), digests.CHUNK)), np.float64)
    assert digests.digest(forged) != key


def test_spread_keeps_the_order_and_works_without_threads(monkeypatch):
    from grader.wire import parallel

    assert parallel.spread(lambda x: x * x, range(50)) == [x * x for x in range(50)]

    class NoThreads:
        def map(self, *_):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(parallel, "_threads", lambda: NoThreads())
    assert parallel.spread(lambda x: -x, [1, 2, 3]) == [-1, -2, -3]
