"""The batch's results store on a real sqlite file (a real kill -9 included), and its exports."""

import csv
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pytest
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from gradescope_schema import RESULTS
from grader.batch.export import LatePolicy, gradescope_doc, write_csv, write_gradescope, write_nbgrader
from grader.batch.store import Key, Store, course_version, grader_version, graded
from grader.errors import UsageError
from grader.report.results import Results, Status, TestResult
from grader.wire.messages import Finding

ROOT = Path(__file__).resolve().parents[1]
UTC = timezone.utc
DEADLINE = datetime(2025, 3, 1, 23, 59, tzinfo=UTC)


def results(student: str, points: tuple[float, float] = (2, 3)) -> Results:
    r = Results(submission=student, backend="sim", seed="s1", execution_time=1.5)
    r.tests = [
        TestResult("vector_add::edge", "vector_add", 1, 2, points[0], Status.PASSED if points[0] == 2 else Status.FAILED),
        TestResult("matmul::tiled", "matmul", 2, 5, points[1], Status.FAILED, "out of bounds at line 7\ntrace",
                   finding=Finding("bounds", "IndexError", "a[33] out of bounds", kernel="mm", file="matmul.py",
                                   line=7, block=(1, 0, 0), thread=(1, 0, 0), array="a", index=(33,)),
                   timing={"source": "modelled", "seconds": 1e-3, "ratio": 1.2}),
    ]
    return r


def key(student="alice", commit="c1", assignment="hw1", grader="0.1.0", course="abc") -> Key:
    return Key(student, assignment, commit, grader, course)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.sqlite") as s:
        yield s


# --- the store -----------------------------------------------------------------------------------

def test_put_has_and_the_row_it_gives_back(store):
    assert not store.has(key())
    when = datetime(2025, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=-5)))
    store.put(key(), results("alice"), status="graded", committed_at=when)
    assert store.has(key())
    for other in (key(commit="c2"), key(grader="0.2.0"), key(course="def"), key(assignment="hw2"), key("bob")):
        assert not store.has(other)
    [row] = store.latest("hw1")
    assert row.key == key() and row.status == "graded" and row.reason == "" and row.attempt == 1
    assert (row.score, row.max_score) == (5, 7)
    assert row.exercises == {"vector_add": (2, 2), "matmul": (3, 5)}
    assert row.committed_at == when and row.committed_at.utcoffset() == timedelta(0)  # kept as UTC
    assert row.graded_at.tzinfo is not None and abs(row.graded_at - datetime.now(UTC)) < timedelta(minutes=1)


def test_results_round_trip_through_json(store):
    original = results("alice")
    store.put(key(), original, status="graded")
    [row] = store.latest("hw1")
    assert row.results == original
    assert row.results.tests[1].finding.index == (33,) and row.results.tests[1].status is Status.FAILED


def test_the_key_is_unique_in_the_database_itself(store):
    store.put(key(), results("alice"), status="graded")
    with store.engine.begin() as conn, pytest.raises(IntegrityError):
        conn.execute(insert(graded).values(student_id="alice", assignment="hw1", commit="c1", grader_version="0.1.0",
                                           course_version="abc", score=0, max_score=0, exercises={}, status="graded",
                                           reason="", graded_at="x", attempt=1))


def test_regrade_replaces_the_row_and_counts_the_attempt(store):
    store.put(key(), results("alice", (0, 0)), status="graded")
    store.put(key(), results("alice", (2, 5)), status="graded")
    store.put(key(), results("alice", (2, 4)), status="graded")
    [row] = store.latest("hw1")
    assert row.attempt == 3 and row.score == 6
    with store.engine.connect() as conn:
        assert len(conn.execute(graded.select()).all()) == 1


def test_latest_is_the_most_recently_graded_key_per_student(store):
    store.put(key("alice", "c1"), results("alice", (0, 0)), status="graded")
    store.put(key("bob", "b1"), results("bob"), status="graded")
    store.put(key("alice", "c2"), results("alice", (2, 5)), status="graded")
    store.put(key("carol", "x", assignment="hw2"), results("carol"), status="graded")
    rows = store.latest("hw1")
    assert [(r.key.student_id, r.key.commit, r.score) for r in rows] == [("alice", "c2", 7), ("bob", "b1", 5)]
    store.put(key("alice", "c1"), results("alice", (1, 1)), status="graded")  # regrading c1 makes it the latest
    assert [r.key.commit for r in store.latest("hw1")] == ["c1", "b1"]
    assert store.assignments() == ["hw1", "hw2"]


def test_error_rows_and_status_validation(store):
    store.put(key("dave"), None, status="error", reason="repository not found: /repos/dave.git")
    [row] = store.latest("hw1")
    assert (row.status, row.reason, row.score, row.exercises, row.results) == (
        "error", "repository not found: /repos/dave.git", 0, {}, None)
    with pytest.raises(ValueError, match="status"):
        store.put(key(), results("alice"), status="done")
    with pytest.raises(ValueError, match="Results"):
        store.put(key(), None, status="graded")
    with pytest.raises(ValueError, match="time zone"):
        store.put(key(), results("alice"), status="graded", committed_at=datetime(2025, 1, 1))
    assert not store.has(key())


def test_a_failed_fetch_never_hides_a_graded_row(store):
    # a re-run that could fetch nothing (no commit): the graded row stays the student's row
    store.put(key("alice", "c1"), results("alice"), status="graded")
    store.put(key("bob", "b1"), results("bob"), status="graded")
    store.put(key("alice", ""), None, status="error", reason="the repository /r/alice.git does not exist")
    store.put(key("dave", ""), None, status="error", reason="the repository /r/dave.git does not exist")
    alice, bob, dave = store.latest("hw1")
    assert (alice.key.commit, alice.status, alice.score) == ("c1", "graded", 5)
    assert alice.latest_failure == "the repository /r/alice.git does not exist"
    assert bob.latest_failure == "" and bob.status == "graded"
    assert (dave.status, dave.latest_failure) == ("error", "")  # nothing graded to keep: the error is the row
    assert [r.key.commit for r in store.latest("hw1", ["alice"])] == ["c1"]
    # a submission graded after the failure: the failure is old news
    store.put(key("alice", "c2"), results("alice", (2, 5)), status="graded")
    [alice] = store.latest("hw1", ["alice"])
    assert (alice.key.commit, alice.latest_failure) == ("c2", "")
    # a fetch that works again on the same commit forgets the failures
    store.put(key("bob", ""), None, status="error", reason="timed out")
    assert store.latest("hw1", ["bob"])[0].latest_failure == "timed out"
    assert store.forget_fetch_failures("hw1", "bob") == 1
    assert store.latest("hw1", ["bob"])[0].latest_failure == ""


def test_forget_removes_only_those_students_of_that_assignment(store):
    for s in ("alice", "bob", "carol"):
        store.put(key(s, "c1"), results(s), status="graded")
    store.put(key("alice", "c2"), results("alice"), status="graded")
    store.put(key("alice", assignment="hw2"), results("alice"), status="graded")
    assert store.forget("hw1", ["alice", "bob", "nobody"]) == 3
    assert store.forget("hw1", []) == 0
    assert [r.key.student_id for r in store.latest("hw1")] == ["carol"]
    assert store.has(key("alice", assignment="hw2"))


def test_every_sized_column_holds_the_longest_value_the_batch_makes(tmp_path):
    # sqlite ignores a column's size; a server database (PostgreSQL) refuses the row
    from grader.batch.roster import Entry
    from grader.batch.store import _utc_text
    from grader.batch.submissions import fetch

    folder = tmp_path / "heidi"
    folder.mkdir()
    (folder / "vector_add.py").write_text("x = 1\n")
    commit = fetch(Entry("heidi", str(folder), None, 2), ["vector_add"], tmp_path / "taken").commit
    assert commit.startswith("sha256:") and len(commit) == 71
    longest = {"commit": commit, "student_id": "s" * 64, "assignment": "a" * 128,  # longer: refused by run_batch
               "grader_version": grader_version() + "+0123456789ab+dirty", "course_version": course_version(ROOT),
               "status": "graded",
               "committed_at": _utc_text(datetime(2025, 1, 1, tzinfo=timezone(timedelta(hours=-9)))),
               "graded_at": _utc_text(datetime.now(UTC))}
    for name, value in longest.items():
        assert len(value) <= graded.c[name].type.length, (name, value)


def test_a_path_is_a_sqlite_file_in_wal_mode_and_a_url_opens_the_same(tmp_path):
    path = tmp_path / "store.sqlite"
    with Store(str(path)) as s:
        s.put(key(), results("alice"), status="graded")
    with Store(f"sqlite:///{path}") as s:
        assert s.has(key())
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


CHILD = """
import sys
from grader.batch.store import Key, Store
from grader.report.results import Results, TestResult
path, run, progress = sys.argv[1:]
store = Store(path)
big = "x" * 20000  # a few hundred KB per row: a kill often lands inside a write
with open(progress, "a") as log:
    for i in range(10**9):
        r = Results(submission=str(i), backend="sim",
                    tests=[TestResult(f"ex{j}::t", f"ex{j}", 1, 2.0, float(i % 3), "passed", big) for j in range(20)])
        student = f"s{i % 20}"  # 20 new rows, then regrades of them
        store.put(Key(student, "hw1", run, "g", "c"), r, status="graded")
        log.write(f"{student} {i}\\n")
        log.flush()
"""


@pytest.mark.slow
def test_kill_9_at_any_moment_leaves_whole_rows_and_a_working_store(tmp_path):
    path, progress = tmp_path / "store.sqlite", tmp_path / "progress"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(13)
    for run in ("r0", "r1", "r2", "r3"):
        progress.write_text("")
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), run, str(progress)], env=env)
        try:
            deadline = time.monotonic() + 60
            while not progress.read_text() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert progress.read_text(), "the child never wrote a row"
            time.sleep(rng.uniform(0.0, 0.6))
        finally:
            child.kill()  # SIGKILL
            child.wait()
        assert child.returncode == -9
        committed: dict[str, int] = {}
        for line in progress.read_text().splitlines():
            student, i = line.split()
            committed[student] = int(i)

        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        with Store(path) as s:
            rows = {r.key.student_id: r for r in s.latest("hw1") if r.key.commit == run}
            # every put that returned is there, with the grade it wrote or a later one
            assert set(committed) <= set(rows)
            for student, row in rows.items():
                i = int(row.results.submission)
                assert i >= committed.get(student, 0) and f"s{i % 20}" == student
                assert row.score == 20 * (i % 3) and row.max_score == 40
                assert row.exercises == {f"ex{j}": (i % 3, 2) for j in range(20)}
                assert all(t.output == "x" * 20000 for t in row.results.tests)
            s.put(Key("after", "hw1", run, "g", "c"), results("after"), status="graded")
            assert s.has(Key("after", "hw1", run, "g", "c"))


# --- versions ------------------------------------------------------------------------------------

def test_grader_version_is_the_installed_one_plus_a_digest_of_grader_alone(tmp_path):
    """(audit) Keyed on the checkout's HEAD, any commit of the course repository, a hint's typo,
    regraded the whole class. The key follows what is under grader/, bytecode left out."""
    from importlib import metadata

    from grader.batch.store import tree_digest

    v = grader_version()
    package = ROOT / "grader"
    assert v == grader_version() == f"{metadata.version('gpugrade')}+{tree_digest(package)}"
    copy = tmp_path / "grader"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert tree_digest(copy) == tree_digest(package)
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    assert tree_digest(copy) == tree_digest(package)
    (copy / "perf_model" / "gpus.toml").write_text((copy / "perf_model" / "gpus.toml").read_text() + "\n")
    assert tree_digest(copy) != tree_digest(package)


def make_course(root: Path) -> Path:
    (root / "tests" / "exercises").mkdir(parents=True)
    (root / "solutions").mkdir()
    (root / "course.toml").write_text("[exercises]\n")
    (root / "tests" / "exercises" / "test_add.py").write_text("def test_add(): pass\n")
    (root / "solutions" / "add.py").write_text("def add(a, b): return a + b\n")
    return root


def test_course_version_is_stable_and_changes_with_what_grades(tmp_path):
    course = make_course(tmp_path / "course")
    v = course_version(course)
    assert len(v) == 16 and int(v, 16) >= 0 and course_version(course) == v
    (course / "README.md").write_text("not graded")
    (course / "exercises").mkdir()
    (course / "exercises" / "add.py").write_text("# the student's stub")
    assert course_version(course) == v
    (course / "tests" / "exercises" / "test_add.py").write_text("def test_add(): assert False\n")
    changed = course_version(course)
    assert changed != v
    (course / "solutions" / "add.py").write_text("def add(a, b): return b + a\n")
    assert course_version(course) not in (v, changed)
    assert len({course_version(ROOT), course_version(ROOT)}) == 1


def test_course_version_of_some_exercises_ignores_the_others_and_hints(tmp_path):
    # a folder graded on vector_add is not regraded (hours, for a class) for an edit to matmul's
    # solution, or a hint's typo fixed
    root = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", root / "tests" / "exercises")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    shutil.copy(ROOT / "course.toml", root / "course.toml")
    v, everything = course_version(root, ["vector_add"]), course_version(root)
    assert v != everything and v != course_version(root, ["matmul"])
    with open(root / "solutions" / "matmul.py", "a") as f:
        f.write("# a comment\n")
    manifest = root / "course.toml"
    manifest.write_text(manifest.read_text().replace("Thread i of the whole grid", "Thread number i of the grid", 1))
    assert course_version(root, ["vector_add"]) == v and course_version(root) != everything
    (root / "tests" / "exercises" / "conftest.py").write_text("# shared by every exercise's tests\n")
    assert course_version(root, ["vector_add"]) != v
    (root / "tests" / "exercises" / "conftest.py").unlink()
    manifest.write_text(manifest.read_text().replace("max_time_ratio = 1.2", "max_time_ratio = 1.3", 1))
    assert course_version(root, ["vector_add"]) != v  # vector_add's first threshold: graded differently


# --- exports -------------------------------------------------------------------------------------

def rows_of(store):
    store.put(key("alice"), results("alice"), status="graded", committed_at=DEADLINE - timedelta(hours=1))
    store.put(key("bob"), results("bob", (0, 5)), status="graded", committed_at=DEADLINE + timedelta(days=1.5))
    store.put(key("carol"), None, status="error", reason="repository not found")
    return store.latest("hw1")


def test_late_policy_arithmetic():
    p = LatePolicy(DEADLINE, per_day=0.1, cap=0.3)
    assert (p.days_late(DEADLINE), p.penalty(DEADLINE), p.final(10, DEADLINE)) == (0, 0, 10)
    assert p.days_late(DEADLINE - timedelta(days=3)) == 0 and p.penalty(None) == 0
    late = DEADLINE + timedelta(days=1.5)
    assert (p.days_late(late), p.penalty(late), p.final(10, late)) == (2, 0.2, 8)
    assert p.days_late(DEADLINE + timedelta(seconds=1)) == 1
    assert p.penalty(DEADLINE + timedelta(days=10)) == 0.3  # the cap
    assert LatePolicy(None, per_day=0.5).penalty(late) == 0
    assert LatePolicy(DEADLINE, per_day=0.6).final(10, DEADLINE + timedelta(days=2)) == 0  # default cap: all of it
    with pytest.raises(ValueError):
        LatePolicy(datetime(2025, 3, 1))
    with pytest.raises(ValueError):
        LatePolicy(DEADLINE, cap=1.5)


def test_csv_has_a_line_per_student_with_exercises_and_the_penalty(store, tmp_path):
    out = tmp_path / "grades.csv"
    write_csv(rows_of(store), out, ["vector_add", "matmul"], LatePolicy(DEADLINE, per_day=0.1))
    with out.open(newline="") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == ["student_id", "score", "max", "vector_add", "matmul", "status", "reason",
                              "first_failure", "commit", "committed_at", "late_days", "penalty", "final",
                              "grader_version"]
    alice, bob, carol = lines
    assert (alice["score"], alice["max"], alice["vector_add"], alice["matmul"], alice["final"]) == ("5", "7", "2", "3", "5")
    assert alice["committed_at"] == "2025-03-01T22:59:00+00:00" and alice["late_days"] == "0"
    assert (bob["score"], bob["late_days"], bob["penalty"], bob["final"]) == ("5", "2", "0.2", "4")
    # what to open first, without opening 300 feedback pages
    assert alice["first_failure"] == "matmul stage 2: out of bounds at line 7"
    assert bob["first_failure"] == "vector_add stage 1: vector_add::edge"  # (no message: the test's name)
    # not graded: 0 of the assignment's maximum, never of 0 (a gradebook's percentage would break)
    assert (carol["status"], carol["reason"], carol["score"], carol["max"], carol["vector_add"], carol["final"],
            carol["first_failure"]) == ("error", "repository not found", "0", "7", "0", "0", "")


def test_a_students_own_deadline_in_the_roster_counts_their_days_late(store, tmp_path):
    """(audit) An extension chose the student's commit in the batch, but every export charged the
    days from the class's deadline: grace, 2 days late for the class and on time for herself, lost 20%."""
    from datetime import timedelta

    store.record_extensions("hw1", {"bob": DEADLINE + timedelta(days=3), "alice": None})
    assert store.extensions("hw1") == {"bob": DEADLINE + timedelta(days=3)}
    policy = LatePolicy(DEADLINE, per_day=0.1, extensions=store.extensions("hw1"))
    out = tmp_path / "grades.csv"
    write_csv(rows_of(store), out, ["vector_add", "matmul"], policy)
    with out.open(newline="") as f:
        bob = next(line for line in csv.DictReader(f) if line["student_id"] == "bob")
    assert (bob["late_days"], bob["penalty"], bob["final"]) == ("0", "0", "5")
    [doc] = [gradescope_doc(r, policy) for r in rows_of(store) if r.key.student_id == "bob"]
    assert doc["score"] == 5 and "late" not in doc["output"]
    # without a class deadline nobody is late, extension or not
    assert LatePolicy(extensions={"bob": DEADLINE}).of("bob").deadline is None
    store.record_extensions("hw1", {"bob": None})  # a roster's `none` takes it back: the class's again
    assert store.extensions("hw1") == {}


def test_the_summary_names_the_students_under_each_failure(store):
    from grader.batch.summary import summary_page

    page = summary_page(rows_of(store), ["vector_add", "matmul"], "hw1")
    assert "<td>2</td><td><code>out of bounds at line N</code></td><td>alice, bob</td>" in page
    assert "<td>carol</td><td>repository not found</td>" in page


def test_csv_is_replaced_atomically(store, tmp_path):
    out = tmp_path / "grades.csv"
    rows = rows_of(store)
    write_csv(rows[:1], out, ["vector_add"])
    before = out.read_text()

    def broken():
        yield rows[1]
        raise RuntimeError("the batch died mid-write")

    with pytest.raises(RuntimeError):
        write_csv(broken(), out, ["vector_add"])
    assert out.read_text() == before  # never half a file
    write_csv(rows, out, ["vector_add"])
    assert len(out.read_text().splitlines()) == 4
    assert not list(tmp_path.glob("*.tmp"))  # no temp file left behind
    # (audit) as open() makes a file, not mkstemp's 0600: a TA group reads the grades it is pointed to
    mask = os.umask(0o022)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_gradescope_files_follow_the_schema_and_carry_the_final_score(store, tmp_path):
    policy = LatePolicy(DEADLINE, per_day=0.1)
    (tmp_path / "gs" / "ken").mkdir(parents=True)  # (audit) off the roster since an earlier export
    (tmp_path / "gs" / "ken" / "results.json").write_text('{"score": 25}')
    (tmp_path / "gs" / "notes").mkdir()  # not only an export's: left alone
    (tmp_path / "gs" / "notes" / "todo.txt").write_text("x")
    assert write_gradescope(rows_of(store), tmp_path / "gs", policy) == (3, ["ken"])
    assert not (tmp_path / "gs" / "ken").exists() and (tmp_path / "gs" / "notes" / "todo.txt").exists()
    docs = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "gs").glob("*/results.json")}
    assert sorted(docs) == ["alice", "bob", "carol"]
    for doc in docs.values():
        jsonschema.validate(doc, RESULTS)
    assert docs["alice"]["score"] == 5 and len(docs["alice"]["tests"]) == 2
    assert docs["bob"]["score"] == 4 and "2 days late: 20% off, 5 -> 4" in docs["bob"]["output"]
    assert docs["carol"]["score"] == 0 and "repository not found" in docs["carol"]["output"]


def test_gradescope_refuses_a_student_id_that_leaves_the_folder(store):
    store.put(key("../evil"), results("x"), status="graded")
    with pytest.raises(UsageError, match="cannot name a folder"):
        write_gradescope(store.latest("hw1"), store.url.database + ".gs")
    assert gradescope_doc(store.latest("hw1")[0])["score"] == 5


def test_nbgrader_gradebook_gets_students_the_assignment_and_grades(store, tmp_path):
    api = pytest.importorskip("nbgrader.api")
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    rows = rows_of(store)
    policy = LatePolicy(DEADLINE, per_day=0.1)
    assert write_nbgrader(rows, db, "hw1", policy) == 3
    assert write_nbgrader(rows, db, "hw1", policy) == 3  # a rerun updates in place
    with api.Gradebook(db) as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob", "carol"]
        hw1 = gb.find_assignment("hw1")
        assert hw1.max_score == 7 and hw1.duedate == DEADLINE.replace(tzinfo=None)
        assert sorted(n.name for n in hw1.notebooks) == ["matmul", "vector_add"]
        alice, bob, carol = (gb.find_submission("hw1", s) for s in ("alice", "bob", "carol"))
        assert (alice.score, alice.late_submission_penalty) == (5, 0)
        assert gb.find_grade("matmul", "matmul", "hw1", "alice").auto_score == 3
        assert not alice.needs_manual_grade
        assert bob.score == 5 and bob.late_submission_penalty == pytest.approx(1.0)  # 20% of 5 points
        assert bob.timestamp == (DEADLINE + timedelta(days=1.5)).replace(tzinfo=None)
        assert carol.score == 0
        assert len(gb.db.query(api.Grade).all()) == 6


def test_nbgrader_penalty_is_the_csvs_without_float_noise(store, tmp_path):
    api = pytest.importorskip("nbgrader.api")
    r = Results(submission="alice", backend="sim")
    r.tests = [TestResult(f"{e}::t", e, 1, top, top, Status.PASSED) for e, top in
               (("allreduce", 36), ("matmul", 23), ("reduction", 27), ("vector_add", 25))]
    store.put(key(), r, status="graded", committed_at=DEADLINE + timedelta(days=1.5))
    policy = LatePolicy(DEADLINE, per_day=0.1)  # 2 days late: 20% of 111 points
    write_csv(store.latest("hw1"), tmp_path / "hw1.csv", ["vector_add"], policy)
    with (tmp_path / "hw1.csv").open(newline="") as f:
        assert next(csv.DictReader(f))["final"] == "88.8"
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    write_nbgrader(store.latest("hw1"), db, "hw1", policy)
    with api.Gradebook(db) as gb:
        submission = gb.find_submission("hw1", "alice")
        assert (submission.score, submission.late_submission_penalty) == (111, 22.2)  # not 22.200000000000003


def test_export_refuses_late_options_it_would_ignore_or_misread(store, tmp_path):
    rows_of(store)
    out = tmp_path / "x.csv"

    def export(*extra):
        return subprocess.run([sys.executable, "-m", "grader", "export", str(tmp_path), "--csv", str(out),
                               "--course", str(ROOT), *extra], capture_output=True, text=True, timeout=120)

    no_deadline = export("--late-per-day", "0.1")  # nobody would be late: no penalty, silently
    assert no_deadline.returncode == 2 and "need --deadline" in no_deadline.stderr, no_deadline.stderr
    naive = export("--deadline", "2025-03-01T23:59:00", "--late-per-day", "0.1")  # was taken as UTC
    assert naive.returncode == 2 and "no time zone" in naive.stderr, naive.stderr
    capped = export("--deadline", "2025-03-01T23:59:00Z", "--late-cap", "2")
    assert capped.returncode == 2 and "Traceback" not in capped.stderr, capped.stderr
    assert not out.exists()
    done = export("--deadline", "2025-03-01T23:59:00Z", "--late-per-day", "0.1")
    assert done.returncode == 0, done.stderr
    with out.open(newline="") as f:
        assert {r["student_id"]: r["final"] for r in csv.DictReader(f)}["bob"] == "4"


def test_nbgrader_missing_says_how_to_install_it(monkeypatch, store):
    monkeypatch.setitem(sys.modules, "nbgrader", None)
    monkeypatch.setitem(sys.modules, "nbgrader.api", None)
    with pytest.raises(UsageError, match=r"pip install 'gpugrade\[export\]'"):
        write_nbgrader([], "sqlite:///unused.db", "hw1")


def test_a_batch_counts_the_stored_grades_a_course_edit_makes_it_grade_again(tmp_path):
    from grader.batch.roster import Entry
    from grader.batch.run import Batch
    from grader.course import Course

    root = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", root / "tests" / "exercises")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    shutil.copy(ROOT / "course.toml", root / "course.toml")
    entries = [Entry(s, "/x", None, 2) for s in ("alice", "bob")]

    def stored(batch, student):
        batch.store.put(batch.key(student, "c1"), results(student), status="graded")

    batch = Batch(tmp_path / "hw1", Course(root), "")
    try:
        assert batch.assignment == "hw1" and batch.select(["vector_add"]) == ["vector_add"]
        stored(batch, "alice")
        stored(batch, "bob")
        assert batch.changed_since_graded(entries) == 0
    finally:
        batch.close()
    with open(root / "solutions" / "matmul.py", "a") as f:  # another exercise's: nobody graded again
        f.write("# a comment\n")
    batch = Batch(tmp_path / "hw1", Course(root), "")
    try:
        batch.select([])
        assert batch.changed_since_graded(entries) == 0
        batch.close()
        with open(root / "solutions" / "vector_add.py", "a") as f:
            f.write("# a comment\n")
        batch = Batch(tmp_path / "hw1", Course(root), "")
        batch.select([])
        assert batch.changed_since_graded(entries) == 2 and batch.changed_since_graded(entries[:1]) == 1
    finally:
        batch.close()


def test_students_off_the_latest_roster_leave_the_exports_and_keep_their_rows(store):
    rows_of(store)  # alice, bob, carol
    assert store.roster("hw1") is None and [r.key.student_id for r in store.on_roster("hw1")[0]] == [
        "alice", "bob", "carol"]  # a store from before rosters were recorded: everyone
    store.record_roster("hw1", ["alice", "carol", "dave"])  # bob dropped the course; dave not graded yet
    rows, gone = store.on_roster("hw1")
    assert [r.key.student_id for r in rows] == ["alice", "carol"] and gone == ["bob"]
    store.record_roster("hw1", ["alice", "bob", "carol"])  # replaced by the next batch's
    assert store.on_roster("hw1")[1] == [] and len(store.latest("hw1")) == 3


def test_an_export_of_a_batch_that_did_not_finish_has_every_student_of_its_roster(store, tmp_path):
    """(audit F2) A batch killed before it reached some students: the export wrote the graded ones
    alone, exit 0, nothing said; a class uploaded with students missing looked whole."""
    api = pytest.importorskip("nbgrader.api")
    rows_of(store)  # alice and bob graded, carol's fetch failed
    store.record_roster("hw1", ["alice", "bob", "carol", "dave", "erin"])  # killed before dave and erin
    book = f"sqlite:///{tmp_path / 'gradebook.db'}"
    done = subprocess.run([sys.executable, "-m", "grader", "export", str(tmp_path), "--csv", str(tmp_path / "x.csv"),
                           "--gradescope", str(tmp_path / "gs"), "--nbgrader", book, "--course", str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING: 2 student(s) of the roster have no grade yet" in done.stderr and "dave, erin" in done.stderr
    assert "(5 students)" in done.stdout, done.stdout
    with (tmp_path / "x.csv").open(newline="") as f:
        lines = {line["student_id"]: line for line in csv.DictReader(f)}
    assert list(lines) == ["alice", "bob", "carol", "dave", "erin"]
    dave = lines["dave"]
    assert (dave["status"], dave["score"], dave["max"], dave["final"]) == ("error", "0", "7", "0")
    assert dave["reason"].startswith("not graded yet: the batch did not reach them (run gpugrade batch again")
    doc = json.loads((tmp_path / "gs" / "erin" / "results.json").read_text())
    jsonschema.validate(doc, RESULTS)
    assert doc["score"] == 0 and "not graded yet" in doc["output"]
    with api.Gradebook(book) as gb:  # as a fetch failure is there: the student, a submission of 0
        assert sorted(s.id for s in gb.students) == ["alice", "bob", "carol", "dave", "erin"]
        for student in ("carol", "dave"):
            submission = gb.find_submission("hw1", student)
            assert (submission.score, submission.timestamp) == (0, None)


def test_an_export_of_a_batch_that_graded_nobody_says_so_rather_than_ask_for_an_assignment(tmp_path):
    folder = tmp_path / "hw4"
    folder.mkdir()
    with Store(folder / "store.sqlite") as s:  # a first batch killed before its first grade
        s.record_selection("hw4", ["vector_add"])
        s.record_roster("hw4", ["alice", "mallory", "frank", "eve"])
    for named in ((), ("--assignment", "hw4")):
        done = subprocess.run([sys.executable, "-m", "grader", "export", str(folder), *named, "--csv",
                               str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "--assignment" not in done.stderr, done.stderr
        assert "has graded nobody of assignment 'hw4' yet (its roster has 4 students): run gpugrade batch again " \
               "with the same --out" in done.stderr, done.stderr
    assert not (tmp_path / "x.csv").exists()
