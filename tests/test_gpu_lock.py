"""The machine's GPU lock (grader.judge.gpu_lock): a timing has the GPUs to itself, calls share
them, a waiting timing is not starved by a stream of calls, a dead holder frees the lock. Other
processes hold it here as other grades would (each test its own lock file)."""

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.backends import Kind
from grader.judge import gpu_lock
from grader.judge.student import RunnerConnection, Student

ROOT = Path(__file__).resolve().parents[1]
HOLDER = """
import sys
from grader.judge import gpu_lock
with gpu_lock.holding(alone=sys.argv[1] == "alone"):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def lock(tmp_path, monkeypatch):
    path = str(tmp_path / "gpu.lock")
    monkeypatch.setenv("GPUGRADE_GPU_LOCK", path)
    return path


def _holder(how: str):
    """Another grade holding the lock (`alone` or `shared`) until its stdin gets a line."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release(proc) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=60) == 0


def _free(path: str, mode: int) -> bool:
    """Whether the lock could be taken now in `mode` (a probe of the real file, not waiting)."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _in_thread(fn, order: list, name: str) -> threading.Thread:
    def run():
        with fn():
            order.append(name)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_timing_excludes_every_other_grades_calls(lock):
    other = _holder("alone")
    assert not _free(lock, fcntl.LOCK_SH)
    order = []
    waiting = _in_thread(lambda: gpu_lock.holding(), order, "call")
    waiting.join(0.5)
    assert order == [], "a call ran on the GPU while another grade was timing"
    _release(other)
    waiting.join(60)
    assert order == ["call"]


def test_calls_share_the_gpu_and_a_timing_waits_for_them(lock):
    other = _holder("shared")
    order = []
    _in_thread(lambda: gpu_lock.holding(), order, "call").join(60)
    assert order == ["call"], "two grades' calls must not wait for each other"
    timing = _in_thread(lambda: gpu_lock.holding(alone=True), order, "timing")
    timing.join(0.5)
    assert order == ["call"], "a timing started while another grade's call was on the GPU"
    _release(other)
    timing.join(60)
    assert order == ["call", "timing"]


def test_a_waiting_timing_goes_before_calls_that_come_after_it(lock):
    """Writers first: with calls overlapping back to back the timing would never find the GPU free."""
    other = _holder("shared")
    order = []
    timing = _in_thread(lambda: gpu_lock.holding(alone=True), order, "timing")
    deadline = time.monotonic() + 60
    while _free(lock + ".turnstile", fcntl.LOCK_EX):  # the timing is queued once it holds the turnstile
        assert time.monotonic() < deadline, "the timing never queued"
        time.sleep(0.01)
    later = _in_thread(lambda: gpu_lock.holding(), order, "later call")
    later.join(0.5)
    assert order == []
    _release(other)
    timing.join(60)
    later.join(60)
    assert order == ["timing", "later call"]


def test_a_timing_passes_its_own_calls_through(lock):
    with gpu_lock.holding(alone=True):
        with gpu_lock.holding() as waited, gpu_lock.holding(alone=True):
            assert waited == 0.0
        assert not _free(lock, fcntl.LOCK_SH), "the inner block must not release the timing's hold"
    assert _free(lock, fcntl.LOCK_EX)


def test_a_holder_that_dies_frees_the_gpu(lock):
    other = _holder("alone")
    other.kill()
    other.wait(timeout=60)
    with gpu_lock.holding(alone=True):
        assert not _free(lock, fcntl.LOCK_SH)


class _ProbingRunner:
    """Answers every request, noting how the GPU lock stood while it was sent."""

    def __init__(self, lock: str, seen: list):
        self.lock, self.seen = lock, seen

    def request(self, message, timeout=None, bounds=None):
        state = ("free" if _free(self.lock, fcntl.LOCK_EX) else
                 "shared" if _free(self.lock, fcntl.LOCK_SH) else "alone")
        self.seen.append((message["op"], state))
        return {"ok": True, "ms": 1.0}

    def output_tail(self):
        return ""

    def close(self):
        pass


class _Sandbox:
    hosts_device = False

    def __init__(self, runner):
        self.runner = runner

    def start(self, workspace, backend, devices, trusted=False, device=None):
        return self.runner


@pytest.mark.parametrize("backend", [Kind.GPU, Kind.SIM])
def test_the_judge_holds_the_lock_around_its_gpu_requests(lock, tmp_path, backend):
    """What the judge sends a GPU runner: calls with the lock shared, timings alone; nothing on
    the simulator. (A runner that only answers stands in for a GPU runner: no GPU here.)"""
    seen = []
    connection = RunnerConnection(str(tmp_path), backend, _Sandbox(_ProbingRunner(lock, seen)), trusted=True)
    student = Student.__new__(Student)
    student.connection = connection
    connection.request({"op": "ping"})
    student.copy_bandwidth(1 << 20)
    held = "shared", "alone"
    if backend == Kind.SIM:
        held = "free", "free"
    assert seen == [("configure", held[0]), ("ping", held[0]), ("copy_bandwidth", held[1])]
