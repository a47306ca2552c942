"""Library baselines (cuBLAS SGEMM, CuPy's sum) timed in the trusted reference runner beside the
student's kernel: refused in the student's runner, "unavailable" with the reason where CuPy or a
GPU is missing (this machine), and, against a fake CuPy (the real one needs a GPU: said here), the
timing method itself: warm-up, one pair of CUDA events per timed call, the median."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest

from grader.backends import library_baselines as lb
from grader.backends import Kind
from grader.errors import Unavailable
from grader.judge import RunnerConnection, Student
from grader.judge.perf import library_baseline
from grader.report import bench
from grader.report.results import Results, Status, TestResult
from grader.runner.serve import Runner
from grader.sandbox import Limits, ProcessSandbox

ROOT = Path(__file__).resolve().parents[1]


def test_the_baseline_is_timed_only_in_the_trusted_runner_and_says_why_it_is_missing(tmp_path):
    shutil.copy(ROOT / "solutions" / "matmul.py", tmp_path / "matmul.py")
    sandbox = ProcessSandbox(Limits(call_timeout_s=120, stock_simulator=True))  # the gpu backend's path
    student = Student("matmul", str(tmp_path), "gpu", sandbox)
    reference = Student("matmul", str(tmp_path), "gpu", sandbox,
                        connection=RunnerConnection(str(tmp_path), "gpu", sandbox, trusted=True))
    try:
        with pytest.raises(ValueError, match="only in the trusted reference runner"):
            student.library_seconds("matmul", (64, 64, 64))
        with pytest.raises(Unavailable, match="matmul library baseline cannot be timed here: .*(CuPy|GPU)"):
            reference.library_seconds("matmul", (64, 64, 64))
        entry = library_baseline(reference, ("matmul", (64, 64, 64)), 1e-4)
        assert entry["name"] == "cuBLAS SGEMM (CuPy)" and "CuPy" in entry["unavailable"] and "ratio" not in entry
    finally:
        student.close()
        reference.close()


def bare_runner(tmp_path, kind: Kind) -> Runner:
    runner = Runner.__new__(Runner)  # no sys.path change, no backend opened
    runner.workspace, runner.modules = str(tmp_path), {}
    runner.backend = types.SimpleNamespace(kind=kind)
    return runner


def test_the_simulator_times_no_library_and_bad_requests_are_refused(tmp_path):
    reply = bare_runner(tmp_path, Kind.SIM).library_time({"what": "sum", "shape": [1000]})
    assert reply["error"]["kind"] == "unavailable" and "sim backend" in reply["error"]["message"]
    gpu = bare_runner(tmp_path, Kind.GPU)
    for what, shape in (("fft", [8]), ("sum", [0]), ("sum", [2, 2]), ("matmul", [4, 4]), ("matmul", [4, True, 4]),
                        ("matmul", [1 << 16, 1 << 16, 1]), ("sum", "8")):
        reply = gpu.library_time({"what": what, "shape": shape})
        assert reply["error"]["kind"] == "protocol", (what, shape, reply)


def fake_cupy():
    """CuPy's surface the baselines use, on NumPy, with events that count (no GPU here)."""
    import numpy as np

    log = types.SimpleNamespace(matmuls=[], sums=0, events=0, clock=0.0)

    class Event:
        def record(self):
            log.events += 1
            log.clock += 1.0
            self.at = log.clock

        def synchronize(self):
            pass

    rng = types.SimpleNamespace(standard_normal=lambda shape, dtype: np.ones(shape, dtype))
    cupy = types.ModuleType("cupy")
    cupy.float32 = np.float32
    cupy.empty = np.empty
    cupy.random = types.SimpleNamespace(default_rng=lambda seed: rng)

    def matmul(a, b, out):
        log.matmuls.append((a.shape, b.shape, out.shape))
        np.matmul(a, b, out=out)

    cupy.matmul = matmul
    cupy.cuda = types.SimpleNamespace(
        Event=Event, runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Device=lambda: types.SimpleNamespace(synchronize=lambda: None),
        get_elapsed_time=lambda start, end: (end.at - start.at) * 0.5)
    return cupy, log


def test_the_timing_method_against_a_fake_cupy(monkeypatch):
    cupy, log = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert lb.library_ms("matmul", (3, 5, 7), warmup=2, timed=4) == 0.5
    assert log.matmuls == [((3, 5), (5, 7), (3, 7))] * 6, "warm-up and timed calls, one SGEMM each"
    assert log.events == 8, "one pair of events per timed call"


def test_the_judge_reports_the_library_beside_the_grade_and_bench_shows_it():
    class Reference:
        def library_seconds(self, what, shape):
            return 2e-4

    entry = library_baseline(Reference(), ("sum", (1 << 20,)), 1e-4)
    assert entry == {"name": "CuPy's sum", "shape": [1 << 20], "seconds": 2e-4, "ratio": 0.5}
    assert library_baseline(Reference(), None, 1e-4) is None
    timing = {"source": "measured", "gpu": "H200", "seconds": 1e-4, "bound": "measured", "bandwidth_fraction": 0.8,
              "global_bytes": 4e6, "reference_seconds": 1e-4, "ratio": 1.0, "max_time_ratio": 1.2, "credit": 1.0,
              "library": entry}
    results = Results("s", "gpu", tests=[TestResult("reduction::tree_perf", "reduction", 1, 3, 3, Status.PASSED,
                                                    timing=timing)])
    assert "0.50 (CuPy's sum)" in bench.table(results, width=220)
