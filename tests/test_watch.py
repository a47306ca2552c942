"""`gpugrade check --watch` (grader/course/watch.py): a save grades again and only what changed is
said; the real command, stopped with Ctrl-C (SIGINT)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from grader.course.watch import changes, watch
from grader.report.results import Results, Status, TestResult

ROOT = Path(__file__).resolve().parents[1]


def _results(score_a: float, message: str = "") -> Results:
    status = Status.PASSED if score_a else Status.FAILED
    return Results("s", "sim", tests=[TestResult("ex::a", "ex", 1, 1, score_a, status, message),
                                      TestResult("ex::b", "ex", 2, 1, 1, Status.PASSED)])


def test_changes_names_only_the_stages_that_changed():
    first = _results(0, "out-of-bounds access at index 33")
    assert changes(None, first) == ["ex stage 1: 0/1: out-of-bounds access at index 33", "ex stage 2: 1/1: ok (1 test)",
                                     "total: 1/2"]
    # the total after every regrade (learner audit: only "no change: 1/2" said it)
    assert changes(first, _results(1)) == ["ex stage 1: 1/1 (was 0/1): ok (1 test)", "total: 2/2 (was 1/2)"]
    assert changes(first, first) == ["no change: 1/2"]


def test_a_save_grades_again(tmp_path):
    (tmp_path / "ex.py").write_text("x = 1\n")
    graded, shown, ticks = [], [], iter(range(100))

    def grade():
        graded.append((tmp_path / "ex.py").read_text())
        return _results(1 if "2" in graded[-1] else 0, "wrong")

    def sleep(_):
        if next(ticks) == 2:
            (tmp_path / "ex.py").write_text("x = 2\n")

    watch(tmp_path, ["ex"], grade, shown.append, interval=0, settle=0, sleep=sleep, stop=lambda: len(graded) >= 2)
    assert graded == ["x = 1\n", "x = 2\n"]
    assert shown[-1] == ["ex stage 1: 1/1 (was 0/1): ok (1 test)", "total: 2/2 (was 1/2)"]


def test_the_command_regrades_on_save_and_stops_on_ctrl_c(tmp_path):
    course = tmp_path / "course"
    (course / "tests" / "exercises").mkdir(parents=True)
    shutil.copy(ROOT / "course.toml", course)
    shutil.copy(ROOT / "tests" / "exercises" / "test_vector_add.py", course / "tests" / "exercises")
    for folder in ("exercises", "solutions"):
        (course / folder).mkdir()
        shutil.copy(ROOT / folder / "vector_add.py", course / folder)
    log = tmp_path / "watch.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "grader", "check", "vector_add", "--stage", "1", "--watch",
                                 "--backend", "sim"], cwd=course, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(log, "vector_add stage 1: 0/", proc)
        shutil.copy(ROOT / "solutions" / "vector_add.py", course / "exercises" / "vector_add.py")
        _wait_for(log, "(was 0/", proc)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    text = log.read_text()
    assert "vector_add stage 1: 11/11 (was 0/11)" in text and "\ntotal: 11/11 (was 0/11)\n" in text, text
    assert proc.returncode == 0


def _wait_for(log: Path, needle: str, proc, limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while needle not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
