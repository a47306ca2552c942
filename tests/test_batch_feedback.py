"""`gpugrade feedback FOLDER STUDENT`: one student's stored result, read from a real sqlite store the
way an instructor answering that student's email would (grader/batch/student.py)."""

import csv
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from grader.batch.store import Key, Store
from grader.report.results import Results, Status, TestResult

UTC = timezone.utc
DEADLINE = datetime(2025, 3, 1, 23, 59, tzinfo=UTC)


def _results(student: str, edge: float) -> Results:
    r = Results(submission=student, backend="sim")
    r.tests = [TestResult("vector_add::edge", "vector_add", 1, 2, edge, Status.PASSED if edge == 2 else Status.FAILED,
                          "" if edge == 2 else "vector_add(a, b): 3 of 33 elements wrong\ndetails"),
               TestResult("vector_add::big", "vector_add", 2, 5, 3, Status.FAILED, "out of bounds at line 7\ntrace")]
    return r


@pytest.fixture
def folder(tmp_path):
    """hw1: alice on time, bob 1.5 days late with an extension of one day, carol's fetch failed, dave
    not reached yet, and nnia (a typo'd id since corrected) off the roster."""
    out = tmp_path / "hw1"
    out.mkdir()
    with Store(out / "store.sqlite") as store:
        for sid, edge, late in (("alice", 2, -1 / 24), ("bob", 0, 1.5), ("nnia", 2, 0)):
            store.put(Key(sid, "hw1", f"{sid}c0ffee1234567", "0.1.0+g", "c"), _results(sid, edge), status="graded",
                      committed_at=DEADLINE + timedelta(days=late))
        store.put(Key("carol", "hw1", "", "0.1.0+g", "c"), None, status="error", reason="repository not found")
        store.record_selection("hw1", ["vector_add"])
        store.record_roster("hw1", ["alice", "bob", "carol", "dave"])
        store.record_deadline("hw1", None)  # graded on the latest commits: the export charges lateness
        store.record_extensions("hw1", {"bob": DEADLINE + timedelta(days=1)})
    (out / "feedback").mkdir()
    (out / "feedback" / "alice.html").write_text("<!doctype html>")
    (out / "feedback" / "alice.md").write_text("# alice")
    return out


def _feedback(*args: str, cwd):
    return subprocess.run([sys.executable, "-m", "grader", "feedback", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_a_students_commit_scores_messages_and_feedback_page(folder):
    done = _feedback(folder, "alice", cwd=folder.parent)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Graded: commit alicec0ffee1 of 2025-03-01T22:59:00+00:00" in out, out
    assert "Commit chosen by: no deadline: their latest commit" in out and "Score: 5/7; not late" in out
    assert "vector_add::big" in out and "out of bounds at line 7" in out  # every test, each failure's message
    assert "First failing test: vector_add::big" in out and "  trace" in out  # the first failure whole
    assert f"Feedback page: {folder / 'feedback' / 'alice.html'}, {folder / 'feedback' / 'alice.md'}" in out


def test_lateness_and_penalty_are_the_exports_and_json_has_each_tests_message(folder, tmp_path):
    late = ("--deadline", DEADLINE.isoformat(), "--late-per-day", "0.1")
    done = _feedback(folder, "bob", "--format", "json", *late, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bob = json.loads(done.stdout)
    exported = subprocess.run([sys.executable, "-m", "grader", "export", str(folder), "--csv", str(tmp_path / "x.csv"),
                               *late], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    with (tmp_path / "x.csv").open(newline="") as f:
        row = {r["student_id"]: r for r in csv.DictReader(f)}["bob"]
    # 1.5 days after the class's deadline, half a day after his own: 1 day, 10% off, as the export says
    assert (bob["late"]["days"], bob["late"]["penalty"], bob["late"]["final"]) == (1, 0.1, 2.7)
    assert (str(bob["late"]["days"]), row["penalty"], row["final"]) == (row["late_days"], "0.1", "2.7")
    assert bob["extension"] == (DEADLINE + timedelta(days=1)).isoformat() and bob["commit"].startswith("bobc0ffee")
    assert [(t["name"], t["score"], t["message"].split("\n")[0]) for t in bob["tests"]] == [
        ("vector_add::edge", 0, "vector_add(a, b): 3 of 33 elements wrong"),
        ("vector_add::big", 3, "out of bounds at line 7")]
    assert bob["feedback"] == [] and bob["on_roster"] is True
    text = _feedback(folder, "bob", *late, cwd=tmp_path).stdout
    assert "their extension 2025-03-02T23:59:00+00:00" in text, text
    assert "Score: 3/7; 1 day(s) late: 10% off, final 2.7" in text, text
    assert "Feedback page: none in the folder" in text


@pytest.mark.parametrize("student, said", [
    ("carol", "Not graded: repository not found"),
    ("dave", "Not graded: not graded yet: the batch did not reach them"),
    ("nnia", "NOT ON THE ROSTER of the latest batch: left out of grades.csv"),
])
def test_a_student_not_graded_not_reached_or_off_the_roster_says_so(folder, student, said):
    done = _feedback(folder, student, cwd=folder.parent)
    assert done.returncode == 0 and said in done.stdout, done.stdout + done.stderr


def test_an_unknown_id_is_refused_naming_those_close_to_it(folder):
    for typed, near in (("alcie", "did you mean alice?"), ("BOB", "did you mean bob?"),
                        ("zed", "none is close; it has 5: alice, bob, carol, dave, nnia")):
        done = _feedback(folder, typed, cwd=folder.parent)
        assert done.returncode == 2 and not done.stdout, done.stdout
        assert f"has no student '{typed}' in assignment 'hw1'" in done.stderr and near in done.stderr, done.stderr


def test_a_folder_no_batch_graded_is_refused(tmp_path):
    done = _feedback(tmp_path, "alice", cwd=tmp_path)
    assert done.returncode == 2 and "is not a batch folder (no store.sqlite)" in done.stderr, done.stderr
    with Store(tmp_path / "store.sqlite") as store:  # a first batch killed before its first grade
        store.record_roster(tmp_path.name, ["alice"])
    done = _feedback(tmp_path, "alice", cwd=tmp_path)
    assert done.returncode == 2 and "has graded nobody of assignment" in done.stderr, done.stderr
