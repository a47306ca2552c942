"""Timing an all-reduce the nccl-tests way (grader/backends/collective_timing.py): the student's
function in the student's runner (`Student.time_ranks`, bounded by the judge's clock) and NCCL's
in the trusted reference runner (`Student.nccl_allreduce`).

Without a GPU: the student's timing runs for real through a runner process on numba's stock
simulator (its times are host wall clock: the plumbing, never a speed); NCCL's answers
"unavailable" there, and its timing loop runs against a fake CuPy whose NCCL sums host arrays."""

import contextlib
import itertools
import shutil
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from grader import wire
from grader.backends import Kind
from grader.backends import collective_timing as ct
from grader.errors import ProtocolError, RunnerError, StudentCodeError, Unavailable
from grader.judge.student import BesideTheSimulator, RanksTiming, RunnerConnection, Student
from grader.runner.serve import Runner
from grader.sandbox import Limits, ProcessSandbox


ROOT = Path(__file__).resolve().parents[1]

STUDENT = textwrap.dedent("""
    from numba import cuda

    @cuda.jit
    def fill(a, value):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = value

    @cuda.jit
    def add(dst, src):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] += src[i]

    def ones(ranks, bufs):
        for r, b in zip(ranks, bufs):
            with r:
                fill[(b.size + 127) // 128, 128, r.stream](b, 1.0)

    def nan_on_the_last_rank(ranks, bufs):
        with ranks[len(ranks) - 1] as r:
            fill[1, 32, r.stream](bufs[len(bufs) - 1][5:6], float("nan"))

    def reads_another_rank(ranks, bufs):
        with ranks[0] as r:
            add[(bufs[0].size + 127) // 128, 128, r.stream](bufs[0], bufs[1])

    def fails(ranks, bufs):
        raise RuntimeError("the student's own failure")
""")


# -- through a runner process on numba's stock simulator ------------------------------------------------
@pytest.fixture(scope="module")
def on_stock_simulator(tmp_path_factory):
    """A student workspace (the reference all-reduce and some wrong ones) and a sandbox whose
    gpu-backend runners run on numba's stock simulator."""
    workspace = tmp_path_factory.mktemp("collective")
    shutil.copy(ROOT / "solutions" / "allreduce.py", workspace / "allreduce.py")
    (workspace / "wrong.py").write_text(STUDENT)
    sandbox = ProcessSandbox(Limits(call_timeout_s=120, stock_simulator=True))
    connection = RunnerConnection(str(workspace), "gpu", sandbox)
    students = {m: Student(m, str(workspace), "gpu", sandbox, connection=connection) for m in ("allreduce", "wrong")}
    yield workspace, sandbox, students
    connection.close()


def test_a_students_ring_is_timed_in_its_runner_on_zero_buffers(on_stock_simulator):
    _, _, students = on_stock_simulator
    student = students["allreduce"]
    assert student.gpu_count() == 1, "the stock simulator is one GPU: the ranks are emulated on it"
    timing = student.time_ranks("allreduce_ring", 3, 257, warmup=1, timed=3)
    assert isinstance(timing, RanksTiming)
    assert len(timing.seconds) == 3 and all(t > 0 for t in timing.seconds), timing
    assert (timing.ranks, timing.nbytes, timing.devices) == (3, 257 * 4, 1)
    assert sum(timing.seconds) <= timing.judge_wall_s, "the judge's clock bounds the runner's"
    assert timing.busbw_gbs() == pytest.approx(257 * 4 / timing.median_s / 1e9 * 4 / 3)
    piped = student.time_ranks("allreduce_pipelined", 2, 40, warmup=0, timed=2)
    assert len(piped.seconds) == 2 and piped.devices == 1


@pytest.mark.parametrize("function, words", [
    ("ones", ["ones() changed the zero buffers", "rank 0's element 0 is 1.0 after 2 calls", "not an all-reduce"]),
    ("nan_on_the_last_rank", ["rank 2's element 5 is nan", "not an all-reduce"]),
])
def test_a_function_that_changes_the_zero_buffers_is_no_all_reduce(on_stock_simulator, function, words):
    _, _, students = on_stock_simulator
    with pytest.raises(StudentCodeError) as info:
        students["wrong"].time_ranks(function, 3, 100, warmup=1, timed=1)
    assert info.value.exc_type == "NotAnAllReduce", info.value
    for text in words:
        assert text in str(info.value), (text, str(info.value))


def test_the_rank_guard_and_the_students_errors_hold_while_timing(on_stock_simulator):
    _, _, students = on_stock_simulator
    with pytest.raises(StudentCodeError) as info:
        students["wrong"].time_ranks("reads_another_rank", 2, 64, warmup=0, timed=1)
    assert info.value.exc_type == "RankMemoryError" and "memory of rank 1" in info.value.message, info.value
    with pytest.raises(StudentCodeError) as info:
        students["wrong"].time_ranks("fails", 2, 64, warmup=1, timed=1)
    assert info.value.exc_type == "RuntimeError" and "the student's own failure" in info.value.message
    assert "wrong.py" in info.value.where, "the place in the student's file"
    # and the runner is still the same, answering
    assert len(students["allreduce"].time_ranks("allreduce_naive", 2, 8, warmup=0, timed=1).seconds) == 1


def test_nccl_is_timed_only_in_the_trusted_runner_and_is_unavailable_without_cupy(on_stock_simulator):
    workspace, sandbox, students = on_stock_simulator
    with pytest.raises(ValueError, match="only in the trusted reference runner"):
        students["allreduce"].nccl_allreduce(2, 257)
    reference = Student("allreduce", str(workspace), "gpu", sandbox,
                        connection=RunnerConnection(str(workspace), "gpu", sandbox, trusted=True))
    try:
        with pytest.raises(Unavailable) as info:
            reference.nccl_allreduce(2, 257, warmup=1, timed=3)
        reason = info.value.reason
        assert isinstance(info.value, RunnerError), "a RunnerError a test can tell apart"
        assert "NCCL" in reason and ("CuPy" in reason or "GPU" in reason), reason
        assert reference.gpu_count() == 1
    finally:
        reference.close()


# -- the runner's ops, in this process ------------------------------------------------------------------
def bare_runner(tmp_path, kind: Kind = Kind.GPU, rank_devices: int = 1) -> Runner:
    runner = Runner.__new__(Runner)  # no sys.path change, no backend opened
    runner.workspace, runner.modules = str(tmp_path), {}
    runner.backend = types.SimpleNamespace(kind=kind, rank_devices=lambda: rank_devices,
                                           device_name=lambda: "A Test GPU")
    return runner


def test_the_simulator_backend_times_no_collective_and_bad_requests_are_refused(tmp_path):
    sim = bare_runner(tmp_path, Kind.SIM, 8)
    for reply in (sim.time_ranks({"module": "m", "function": "f", "ranks": 2, "count": 8, "warmup": 0, "timed": 1}),
                  sim.nccl_allreduce({"ranks": 2, "count": 8, "warmup": 0, "timed": 1})):
        assert reply["ok"] is False and reply["error"]["kind"] == "unavailable", reply
        assert "sim backend" in reply["error"]["message"]
    assert sim.rank_devices() == {"ok": True, "devices": 8}
    gpu = bare_runner(tmp_path)
    good = {"module": "m", "function": "f", "ranks": 2, "count": 8, "warmup": 0, "timed": 1}
    for key, value in (("ranks", 0), ("count", 0), ("count", True), ("warmup", -1), ("timed", 1001),
                       ("timed", 2.0), ("ranks", None)):
        for op in (gpu.time_ranks, gpu.nccl_allreduce):
            reply = op({**good, key: value})
            assert reply["error"]["kind"] == "protocol" and key in reply["error"]["message"], (key, value, reply)


# -- NCCL's timing, against a fake CuPy whose NCCL sums host arrays -------------------------------------
def fake_cupy(gpus: int, extra: float = 0.0):
    """(cupy, its nccl, a log): enough of CuPy for collective_timing; allReduce sums the arrays
    behind the pointers at groupEnd (plus `extra`: a broken NCCL)."""
    log = types.SimpleNamespace(groups=[], destroyed=0, freed=0, devices=[])
    arrays: dict[int, np.ndarray] = {}
    pointers = itertools.count(1 << 20, 4096)
    pending: list[tuple] = []

    class Array:
        def __init__(self, host):
            self.host = np.array(host, copy=True)
            self.data = types.SimpleNamespace(ptr=next(pointers))
            arrays[self.data.ptr] = self.host

        def fill(self, value):
            self.host[...] = value

    @contextlib.contextmanager
    def device_context(r):
        log.devices.append(r)
        yield

    class Device:
        def __init__(self, r):
            self.r = r

        def __enter__(self):
            self._context = device_context(self.r)
            return self._context.__enter__()

        def __exit__(self, *exc):
            return self._context.__exit__(*exc)

        def synchronize(self):
            pass

    class Stream:
        ptrs = itertools.count(7)

        def __init__(self, non_blocking=False):
            assert non_blocking
            self.ptr = next(Stream.ptrs)

        def synchronize(self):
            pass

    class Communicator:
        @classmethod
        def initAll(cls, devices):
            assert devices == list(range(len(devices)))
            return [cls() for _ in devices]

        def allReduce(self, send, recv, count, dtype, op, stream):
            pending.append((send, recv, count, dtype, op, stream))

        def destroy(self):
            log.destroyed += 1

    def group_end():
        total = sum(arrays[send][:count] for send, _, count, *_ in pending)
        for _, recv, count, *_ in pending:
            arrays[recv][:count] = total + extra
        log.groups.append(list(pending))
        pending.clear()

    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available, nccl.NCCL_FLOAT32, nccl.NCCL_SUM = True, 7, 0
    nccl.NcclCommunicator, nccl.groupStart, nccl.groupEnd = Communicator, lambda: None, group_end
    nccl.get_version = lambda: 22703
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl, cuda.Device, cuda.Stream = nccl, Device, Stream
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: gpus)
    cupy = types.ModuleType("cupy")
    cupy.__version__, cupy.cuda = "13.fake", cuda
    cupy.asarray, cupy.asnumpy = Array, lambda a: a.host.copy()

    def free_all_blocks():
        log.freed += 1
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=free_all_blocks)
    return cupy, nccl, log


@pytest.fixture
def install(monkeypatch):
    def put(cupy, nccl):
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
        monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    return put


def test_nccl_is_timed_in_place_one_group_per_call_and_cleaned_up(install, tmp_path):
    cupy, nccl, log = fake_cupy(gpus=4)
    install(cupy, nccl)
    assert ct.load_nccl()[2] == {"cupy": "13.fake", "nccl": "2.27.3"}
    seconds, devices = ct.time_nccl_allreduce(3, 33, warmup=2, timed=5)
    assert len(seconds) == 5 and all(t > 0 for t in seconds) and devices == 3
    assert len(log.groups) == 7, "warm-up calls and timed calls: one group each"
    for group in log.groups:
        assert len(group) == 3 and len({send for send, *_ in group}) == 3
        assert all(send == recv and count == 33 and dtype == 7 and op == 0 for send, recv, count, dtype, op, _ in group)
    assert log.destroyed == 3 and log.freed == 3
    reply = bare_runner(tmp_path).nccl_allreduce({"ranks": 2, "count": 5, "warmup": 0, "timed": 4})
    parsed = wire.RanksTimingReply.parse(reply, 4, 2)
    assert parsed.ok and len(parsed.seconds) == 4 and parsed.devices == 2
    assert parsed.device == "A Test GPU", "the GPU's name, for the model's preset beside the measurement"


def test_nccl_needs_a_gpu_per_rank_and_a_wrong_sum_is_an_error(install, tmp_path):
    install(*fake_cupy(gpus=1)[:2])
    with pytest.raises(ct.TimingUnavailable, match="one GPU per rank: 2 ranks, but this machine has 1 GPU$"):
        ct.time_nccl_allreduce(2, 8, 0, 1)
    reply = bare_runner(tmp_path).nccl_allreduce({"ranks": 2, "count": 8, "warmup": 0, "timed": 1})
    assert reply["error"]["kind"] == "unavailable" and "1 GPU" in reply["error"]["message"]
    cupy, nccl, log = fake_cupy(gpus=2, extra=0.5)
    install(cupy, nccl)
    with pytest.raises(RuntimeError, match="left 1.5 at rank 0's element 0"):
        ct.time_nccl_allreduce(2, 8, 1, 1)
    assert log.destroyed == 2, "the communicators are freed even then"
    reply = bare_runner(tmp_path).nccl_allreduce({"ranks": 2, "count": 8, "warmup": 0, "timed": 1})
    assert reply["ok"] is False and reply["error"]["kind"] == "exception"


def test_the_benchmark_uses_the_graders_nccl_and_timing(install):
    import importlib.util

    spec = importlib.util.spec_from_file_location("allreduce_gpus", ROOT / "benchmarks" / "allreduce_gpus.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name in ("load_nccl", "nccl_setup", "seconds_of", "busbw_gbs", "algbw_gbs", "bus_factor", "allreduce_call"):
        assert getattr(bench, name) is getattr(ct, name), name
    cupy, nccl, log = fake_cupy(gpus=2)
    call, check = bench.nccl_allreduce(cupy, nccl, 2, 100)
    assert check(), "the benchmark's untimed check passes on a summing NCCL"
    assert len(log.groups) == 1


# -- the wire: a typed, bounded reply ------------------------------------------------------------------
def test_a_ranks_timing_reply_is_parsed():
    reply = wire.RanksTimingReply.parse({"ok": True, "seconds": [0.5, 1, 2e-6], "devices": 2}, timed=3, ranks=4)
    assert reply.ok and reply.seconds == [0.5, 1.0, 2e-6] and reply.devices == 2
    failed = wire.RanksTimingReply.parse({"ok": False, "error": {"kind": "unavailable", "type": "Unavailable",
                                                                 "message": "no CuPy"}})
    assert not failed.ok and failed.error.kind == "unavailable" and failed.error.message == "no CuPy"


@pytest.mark.parametrize("doc, why", [
    ({"ok": True, "seconds": [0.1, -0.1], "devices": 1}, r"seconds\[1\]"),
    ({"ok": True, "seconds": [0.0], "devices": 1}, r"seconds\[0\]: 0.0 is not a positive time"),
    ({"ok": True, "seconds": [float("nan")], "devices": 1}, r"seconds\[0\]: nan"),
    ({"ok": True, "seconds": [float("inf")], "devices": 1}, r"seconds\[0\]: inf"),
    ({"ok": True, "seconds": [0.1] * 1001, "devices": 1}, "1001 entries, at most 1000"),
    ({"ok": True, "seconds": [], "devices": 1}, "no timed call"),
    ({"ok": True, "seconds": [0.1], "devices": 0}, "devices: expected an integer >= 1"),
    ({"ok": True, "seconds": [0.1], "devices": True}, "devices"),
    ({"ok": True, "seconds": [0.1], "devices": 1.0}, "devices"),
    ({"ok": True, "seconds": [0.1]}, "devices"),
    ({"ok": True, "seconds": "0.1", "devices": 1}, "seconds: expected a list"),
    ({"ok": True, "seconds": ["0.1"], "devices": 1}, r"seconds\[0\]: expected a number"),
    ({"ok": True, "seconds": [True], "devices": 1}, r"seconds\[0\]: expected a number"),
    ({"ok": True, "devices": 1}, "seconds: expected a list"),
    ({"ok": "yes", "seconds": [0.1], "devices": 1}, "reply.ok"),
    ([0.1], "expected an object"),
    ({"ok": False, "error": {"kind": "anything", "message": "x"}}, "error.kind"),
])
def test_a_malformed_ranks_timing_reply_is_a_protocol_error(doc, why):
    with pytest.raises(ProtocolError, match=why):
        wire.RanksTimingReply.parse(doc)


def test_a_ranks_timing_reply_must_answer_what_was_asked():
    with pytest.raises(ProtocolError, match="2 timed calls for 3 asked"):
        wire.RanksTimingReply.parse({"ok": True, "seconds": [0.1, 0.1], "devices": 1}, timed=3)
    with pytest.raises(ProtocolError, match="devices: 5, more than 4 for 4 ranks"):
        wire.RanksTimingReply.parse({"ok": True, "seconds": [0.1], "devices": 5}, timed=1, ranks=4)


# -- the judge's clock ---------------------------------------------------------------------------------
class FakeConnection:
    """A runner connection answering at once with the documents given: the judge's arithmetic."""

    def __init__(self, answers: dict, trusted: bool = False):
        self.answers, self.trusted, self.closed, self.sent = answers, trusted, 0, []
        self.sandbox = types.SimpleNamespace(limits=Limits(call_timeout_s=30))

    def request(self, message, timeout=None, bounds=None, parse=wire.Reply.parse):
        return self.call(message, timeout, bounds, parse, report=False)[0]

    def call(self, message, timeout, bounds, parse, report=True):
        self.sent.append(message)
        answer = self.answers.get(message["op"], {"ok": True})
        return parse(answer() if callable(answer) else answer), None

    def alone(self):  # the GPU lock: tests/test_gpu_lock.py
        return contextlib.nullcontext(0.0)

    def close(self):
        self.closed += 1


def fake_student(tmp_path, answers: dict, trusted: bool = False) -> Student:
    (tmp_path / "mine.py").write_text("def allreduce(ranks, bufs):\n    pass\n")
    return Student("mine", str(tmp_path), "gpu", None, allowed_imports=None,
                   connection=FakeConnection(answers, trusted))


def test_times_adding_up_to_more_than_the_judges_wall_time_are_a_forgery(tmp_path):
    forged = {"ok": True, "seconds": [5.0, 5.0], "devices": 1}
    student = fake_student(tmp_path, {"time_ranks": forged, "nccl_allreduce": forged}, trusted=True)
    with pytest.raises(RunnerError, match=r"add up to 10.000 s, more than the .* s the judge waited: a forged timing"):
        student.time_ranks("allreduce", 2, 1024, warmup=0, timed=2)
    assert student.connection.closed == 1, "the runner is dropped"
    assert student.connection.sent[-1] == {"op": "time_ranks", "module": "mine", "function": "allreduce",
                                           "ranks": 2, "count": 1024, "warmup": 0, "timed": 2}
    with pytest.raises(RunnerError, match="a forged timing"):
        student.nccl_allreduce(2, 1024, warmup=0, timed=2)
    assert student.connection.sent[-1] == {"op": "nccl_allreduce", "ranks": 2, "count": 1024, "warmup": 0,
                                           "timed": 2}


def test_times_within_the_judges_wall_time_are_believed(tmp_path):
    import time

    def honest():
        time.sleep(0.05)
        return {"ok": True, "seconds": [0.01, 0.02, 0.01], "devices": 2}

    student = fake_student(tmp_path, {"time_ranks": honest, "nccl_allreduce": honest}, trusted=True)
    timing = student.time_ranks("allreduce", 2, 1 << 20, warmup=1, timed=3)
    assert timing.seconds == [0.01, 0.02, 0.01] and timing.devices == 2 and timing.nbytes == 4 << 20
    assert timing.judge_wall_s >= 0.05 and student.connection.closed == 0
    assert student.nccl_allreduce(2, 1 << 20, warmup=1, timed=3).median_s == 0.01


def test_unavailable_and_failures_are_told_apart(tmp_path):
    unavailable = {"ok": False, "error": {"kind": "unavailable", "type": "Unavailable",
                                          "message": "NCCL cannot be timed here: no CuPy"}}
    broken = {"ok": False, "error": {"kind": "exception", "type": "NcclError", "message": "unhandled cuda error"}}
    student = fake_student(tmp_path, {"time_ranks": unavailable, "nccl_allreduce": unavailable}, trusted=True)
    with pytest.raises(Unavailable, match="no CuPy") as info:
        student.nccl_allreduce(2, 8)
    assert info.value.reason.endswith("no CuPy")
    with pytest.raises(Unavailable, match="the student's all-reduce cannot be timed here"):
        student.time_ranks("allreduce", 2, 8)
    student = fake_student(tmp_path, {"nccl_allreduce": broken, "time_ranks": broken}, trusted=True)
    with pytest.raises(RunnerError, match="NCCL's all-reduce failed in the reference runner: NcclError") as info:
        student.nccl_allreduce(2, 8)
    assert not isinstance(info.value, Unavailable) and student.connection.closed == 1
    with pytest.raises(StudentCodeError, match="unhandled cuda error"):
        student.time_ranks("allreduce", 2, 8)
    with pytest.raises(ValueError, match="count"):
        student.time_ranks("allreduce", 2, 0)
    with pytest.raises(ValueError, match="ranks"):
        student.nccl_allreduce(0, 8)


def test_gpu_count_is_the_runners_rank_devices(tmp_path):
    assert fake_student(tmp_path, {"rank_devices": {"ok": True, "devices": 8}}).gpu_count() == 8
    for forged in (0, -1, True, "8", 1 << 20):
        student = fake_student(tmp_path, {"rank_devices": {"ok": True, "devices": forged}})
        with pytest.raises(RunnerError, match="the runner broke the protocol"):
            student.gpu_count()


def test_beside_the_simulator_times_on_the_gpu():
    calls = []

    class Connection:
        def close(self):
            calls.append(("closed",))

    class Gpu:
        connection = Connection()

        def gpu_count(self):
            return 4

        def time_ranks(self, *args, **kwargs):
            calls.append(("time_ranks", args, kwargs))
            return "gpu timing"

        def nccl_allreduce(self, *args, **kwargs):
            calls.append(("nccl_allreduce", args, kwargs))
            return "gpu nccl"

    both = BesideTheSimulator(Gpu(), object())
    assert both.gpu_count() == 4
    assert both.time_ranks("allreduce_pipelined", 4, 1 << 24, warmup=2, timed=9) == "gpu timing"
    assert both.nccl_allreduce(4, 1 << 24, timed=9) == "gpu nccl"
    # (the runner that held the GPUs for the student's timing closed at once after it)
    assert calls == [("time_ranks", ("allreduce_pipelined", 4, 1 << 24), {"warmup": 2, "timed": 9}), ("closed",),
                     ("nccl_allreduce", (4, 1 << 24), {"timed": 9})]


# -- the arithmetic -------------------------------------------------------------------------------------
def test_busbw_is_nccl_tests_algbw_times_2_n_minus_1_over_n():
    timing = RanksTiming(seconds=[0.3, 0.1, 0.2], ranks=4, nbytes=1 << 30, devices=4, judge_wall_s=1.0)
    assert timing.median_s == 0.2
    assert timing.algbw_gbs() == pytest.approx((1 << 30) / 0.2 / 1e9)
    assert timing.busbw_gbs() == pytest.approx((1 << 30) / 0.2 / 1e9 * 1.5)
    assert RanksTiming([0.5, 0.5], 8, 2_000_000_000, 8, 2.0).busbw_gbs() == pytest.approx(4.0 * 1.75)
    two = RanksTiming([0.25, 0.75], 2, 10**9, 1, 2.0)
    assert two.median_s == 0.5 and two.busbw_gbs() == two.algbw_gbs() == pytest.approx(2.0)
    assert RanksTiming([1.0], 1, 10**9, 1, 1.0).busbw_gbs() == 0.0, "one rank moves nothing between ranks"
