"""`gpugrade batch`: a class of real local git repositories graded in one command, resumable
after a kill -9, on the local pool and on a real Dask LocalCluster (grader/batch/run.py)."""

import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
# Each call's limit and the submission's: an honest submission's calls and grading finish far within
# them with the machine's cores busy (a batch of two beside another pytest-xdist worker); a hang
# ends at its call's limit.
CALL_LIMIT = "30"
SUBMISSION_LIMIT = "300"
SOLUTION = (ROOT / "solutions" / "vector_add.py").read_text()
STUB = (ROOT / "exercises" / "vector_add.py").read_text()
GIT_ENV = {"GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.com", "GIT_COMMITTER_NAME": "s",
           "GIT_COMMITTER_EMAIL": "s@example.com", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def _repo(tmp: Path, name: str, files: dict[str, str], hook: str | None = None) -> Path:
    """A bare repository with one commit of `files` (a value starting with '->' is a symlink)."""
    work, bare = tmp / "work" / name, tmp / "repos" / f"{name}.git"
    work.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=work)
    for path, text in files.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("->"):
            os.symlink(text[2:], target)
        else:
            target.write_text(text)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "submission", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp)
    if hook:
        hooks = bare / "hooks"
        for name_ in ("post-checkout", "post-merge", "post-receive", "pre-commit", "reference-transaction"):
            (hooks / name_).write_text(f"#!/bin/sh\necho ran > {hook}\n")
            (hooks / name_).chmod(0o755)
    return bare


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course with the vector_add exercise only (quick to grade), as instructors lay it out."""
    root = tmp_path_factory.mktemp("course")
    (root / "tests" / "exercises").mkdir(parents=True)
    shutil.copy(ROOT / "course.toml", root / "course.toml")
    shutil.copy(ROOT / "tests" / "exercises" / "test_vector_add.py", root / "tests" / "exercises")
    (root / "solutions").mkdir()
    shutil.copy(ROOT / "solutions" / "vector_add.py", root / "solutions")
    (root / "exercises").mkdir()
    shutil.copy(ROOT / "exercises" / "vector_add.py", root / "exercises")
    return root


def _roster(tmp: Path, rows: list[tuple[str, str]]) -> Path:
    path = tmp / "roster.csv"
    path.write_text("student_id,repo\n" + "".join(f"{sid},{repo}\n" for sid, repo in rows))
    return path


def _batch(course: Path, roster: Path, out: Path, *extra: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out), "--backend", "sim",
                           "--timeout", CALL_LIMIT, "--submission-timeout", SUBMISSION_LIMIT, *extra],
                          cwd=course, capture_output=True, text=True, timeout=timeout)


def _grades(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def test_a_class_of_git_repositories_grades_in_one_command(course, tmp_path):
    marker = tmp_path / "hook-ran"
    broken_guard = SOLUTION.replace("    if i < out.size:\n", "    if True:\n", 1)
    rows = [
        ("alice", _repo(tmp_path, "alice", {"exercises/vector_add.py": SOLUTION})),
        ("bob", _repo(tmp_path, "bob", {"vector_add.py": STUB})),
        ("carol", _repo(tmp_path, "carol", {"vector_add.py": broken_guard})),
        ("dave", tmp_path / "repos" / "dave-never-pushed.git"),
        ("erin", _repo(tmp_path, "erin", {"vector_add.py": SOLUTION.replace("def vector_add(", "def vector_add(:", 1)})),
        ("frank", _repo(tmp_path, "frank", {"vector_add.py": SOLUTION.replace(
            "    d_a = cuda.to_device(a)\n", "    while True:\n        pass\n", 1)})),
        ("grace", _repo(tmp_path, "grace", {"vector_add.py": "->/etc/passwd"}, hook=str(marker))),
        ("heidi", _plain(tmp_path, SOLUTION)),
    ]
    out = tmp_path / "out"
    done = _batch(course, _roster(tmp_path, [(s, str(r)) for s, r in rows]), out, "--jobs", "2")
    assert done.returncode == 1, done.stdout + done.stderr  # some could not be graded (dave, grace)
    lines = {line.split("] ", 1)[1].split(":", 1)[0]: line for line in done.stdout.splitlines() if line.startswith("[")}
    assert set(lines) == {s for s, _ in rows}, done.stdout  # a line per student as each finished (not a tty)
    assert "dave: not graded: " in lines["dave"] and lines["bob"].endswith(" s)")
    assert ", commit " in lines["alice"] and "commit" not in lines["heidi"]  # a folder has no commit to name
    grades = _grades(out)
    assert set(grades) == {s for s, _ in rows}
    full = float(grades["alice"]["max"])
    assert float(grades["alice"]["score"]) == full > 0 and grades["alice"]["status"] == "graded"
    assert float(grades["heidi"]["score"]) == full
    assert float(grades["bob"]["score"]) == 0
    assert 0 < float(grades["carol"]["score"]) < full
    assert grades["dave"]["status"] == "error" and "not" in grades["dave"]["reason"].lower()
    assert float(grades["erin"]["score"]) == 0 and "syntax" in (out / "feedback" / "erin.md").read_text().lower()
    assert float(grades["frank"]["score"]) < full
    assert grades["grace"]["status"] == "error" and "symlink" in grades["grace"]["reason"]
    assert not marker.exists(), "a hook of the student's repository ran"
    assert (out / "feedback" / "alice.html").read_text().startswith("<!doctype html>")
    summary = (out / "summary.html").read_text()
    assert summary.count("<svg") >= 2 and "dave" in summary and "Most common failures" in summary
    # the same command again grades nothing: every key is in the store
    again = _batch(course, _roster(tmp_path, [(s, str(r)) for s, r in rows]), out, "--jobs", "2")
    assert again.returncode == 1 and _counts(again)[:2] == (0, 6), again.stdout  # error rows are retried
    assert _grades(out) == grades
    # exports read the store: CSV with late penalties, one Gradescope results.json per student
    exported = subprocess.run([sys.executable, "-m", "grader", "export", str(out), "--csv", str(tmp_path / "x.csv"),
                               "--gradescope", str(tmp_path / "gs"), "--deadline", "2000-01-01T00:00:00+00:00",
                               "--late-per-day", "0.1", "--late-cap", "0.5"], cwd=course, capture_output=True,
                              text=True)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    with open(tmp_path / "x.csv", newline="") as f:
        late = {row["student_id"]: row for row in csv.DictReader(f)}
    assert float(late["alice"]["final"]) == pytest.approx(float(late["alice"]["score"]) * 0.5)  # capped at 50% off
    assert float(late["heidi"]["final"]) == float(late["heidi"]["score"]), "a folder has no commit time: never late"
    assert json.loads((tmp_path / "gs" / "alice" / "results.json").read_text())["score"] == pytest.approx(full * 0.5)


def _plain(tmp: Path, text: str) -> Path:
    folder = tmp / "plain" / "heidi"
    folder.mkdir(parents=True)
    (folder / "vector_add.py").write_text(text)
    return folder


def _stored(out: Path) -> int:
    """Results stored so far: 0 until the batch has made its store (the file may exist before
    its table does: a loaded machine catches it in between)."""
    try:
        with sqlite3.connect(out / "store.sqlite", timeout=5) as db:
            table = _table(db)
            return db.execute("select count(*) from " + table).fetchone()[0] if table else 0
    except sqlite3.Error:
        return 0


def _table(db) -> str | None:
    names = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
    return names[0] if names else None


def _class(tmp: Path, prefix: str, size: int) -> Path:
    """A roster of `size` repositories, every other one the solution, the rest the stub."""
    names = [f"{prefix}{i}" for i in range(size)]
    return _roster(tmp, [(name, str(_repo(tmp, name, {"vector_add.py": SOLUTION if i % 2 else STUB})))
                         for i, name in enumerate(names)])


def _batch_to_kill(course: Path, roster: Path, out: Path, *extra: str) -> subprocess.Popen:
    """A batch in a session of its own, so that killing its group ends its judges and runners too."""
    return subprocess.Popen([sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out),
                             "--backend", "sim", "--timeout", CALL_LIMIT, "--jobs", "1", *extra], cwd=course,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_kill_9_midway_then_the_same_command_gives_the_csv_of_an_uninterrupted_run(course, tmp_path):
    roster = _class(tmp_path, "s", 4)
    whole = tmp_path / "whole"
    assert _batch(course, roster, whole, "--jobs", "1").returncode == 0
    out = tmp_path / "killed"
    batch = _batch_to_kill(course, roster, out)
    deadline = time.monotonic() + 600
    while _stored(out) < 1 and batch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(batch.pid, signal.SIGKILL)  # the batch and its judge, runners, device processes
    batch.wait()
    assert 1 <= _stored(out) < 4, "killed midway"
    # (audit F2) an export now has the whole class: those not reached exported as 0, and said
    exported = subprocess.run([sys.executable, "-m", "grader", "export", str(out), "--csv", str(tmp_path / "x.csv")],
                              cwd=course, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0 and "have no grade yet" in exported.stderr, exported.stdout + exported.stderr
    with open(tmp_path / "x.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 4
    resumed = _batch(course, roster, out, "--jobs", "1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    graded, skipped, failed = _counts(resumed)
    assert graded + skipped == 4 and failed == 0 and skipped >= 1, resumed.stdout
    assert _csv_rows(out) == _csv_rows(whole)


def _counts(done) -> tuple[int, ...]:
    """(graded, already graded, not graded) from the batch's last line."""
    import re

    found = re.search(r"(\d+) graded, (\d+) already graded, (\d+) not graded", done.stdout)
    assert found, done.stdout
    return tuple(int(g) for g in found.groups())


def _csv_rows(out: Path) -> list[dict]:
    keep = ("student_id", "score", "max", "status", "reason", "commit")
    with open(out / "grades.csv", newline="") as f:
        return sorted(({k: row[k] for k in keep if k in row} for row in csv.DictReader(f)),
                      key=lambda r: r["student_id"])


def test_the_same_roster_on_a_dask_localcluster(course, tmp_path):
    rows = [(f"d{i}", str(_repo(tmp_path, f"d{i}", {"vector_add.py": SOLUTION if i else STUB}))) for i in range(3)]
    roster = _roster(tmp_path, rows)
    out = tmp_path / "dask"
    done = _batch(course, roster, out, "--dask", "local:2")
    assert done.returncode == 0, done.stdout + done.stderr
    grades = _grades(out)
    assert float(grades["d0"]["score"]) == 0 and float(grades["d1"]["score"]) == float(grades["d1"]["max"]) > 0
    assert grades["d2"]["score"] == grades["d1"]["score"]


def test_a_malformed_roster_names_its_lines_and_grades_nothing(course, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,repo\nalice,/x\n,/y\nalice,/z\nbad id!,/w\n")
    out = tmp_path / "out"
    done = _batch(course, roster, out)
    assert done.returncode != 0
    assert "line 3" in done.stderr and "line 5" in done.stderr and "already on line 2" in done.stderr, done.stderr
    assert not (out / "grades.csv").exists()


def test_an_assignment_name_too_long_for_the_store_is_refused_before_grading(course, tmp_path):
    out = tmp_path / "out"
    done = _batch(course, _roster(tmp_path, [("alice", str(tmp_path / "nowhere.git"))]), out, "--assignment", "a" * 200)
    assert done.returncode == 2 and "at most 128" in done.stderr, done.stderr
    assert not (out / "grades.csv").exists()


def test_a_failed_fetch_on_a_rerun_keeps_the_stored_grade_and_says_so(course, tmp_path):
    alice = _repo(tmp_path, "alice", {"vector_add.py": SOLUTION})
    roster = _roster(tmp_path, [("alice", str(alice))])
    out = tmp_path / "out"
    assert _batch(course, roster, out).returncode == 0
    graded = _grades(out)["alice"]
    page = (out / "feedback" / "alice.md").read_text()
    assert graded["status"] == "graded" and float(graded["score"]) == float(graded["max"]) > 0
    # a network hiccup: the repository cannot be fetched on the re-run
    alice.rename(tmp_path / "away.git")
    hiccup = _batch(course, roster, out)
    assert hiccup.returncode == 1, hiccup.stdout + hiccup.stderr
    assert "alice: FETCH FAILED, the stored grade" in hiccup.stdout, hiccup.stdout
    row = _grades(out)["alice"]
    assert (row["status"], row["score"], row["commit"]) == ("graded", graded["score"], graded["commit"])
    assert "WARNING: the latest fetch failed" in hiccup.stdout and "alice" in hiccup.stdout, hiccup.stdout
    assert "the latest fetch failed" in row["reason"] and "does not exist" in row["reason"], row["reason"]
    assert (out / "feedback" / "alice.md").read_text() == page
    assert "Latest fetch failed" in (out / "summary.html").read_text()
    exported = subprocess.run([sys.executable, "-m", "grader", "export", str(out),
                               "--gradescope", str(tmp_path / "gs")], cwd=course, capture_output=True, text=True)
    assert exported.returncode == 0, exported.stderr
    assert json.loads((tmp_path / "gs" / "alice" / "results.json").read_text())["score"] == float(graded["score"])
    # the repository is back, the same commit: skipped, and the failure is forgotten
    (tmp_path / "away.git").rename(alice)
    again = _batch(course, roster, out)
    assert again.returncode == 0 and _counts(again) == (0, 1, 0) and "WARNING" not in again.stdout, again.stdout
    assert _grades(out)["alice"] == graded


def _rows_and_attempts(out: Path) -> tuple[int, int]:
    """(rows in the store, the highest attempt), (0, 0) while there is no store yet."""
    try:
        with sqlite3.connect(out / "store.sqlite", timeout=5) as db:
            return db.execute("select count(*), coalesce(max(attempt), 0) from graded").fetchone()
    except sqlite3.Error:
        return 0, 0


def test_force_replaces_each_row_only_when_its_regrade_is_recorded(course, tmp_path):
    roster = _class(tmp_path, "f", 3)
    out = tmp_path / "out"
    assert _batch(course, roster, out, "--jobs", "1").returncode == 0
    before = _csv_rows(out)
    batch = _batch_to_kill(course, roster, out, "--force")
    fewest, deadline = 3, time.monotonic() + 600
    while batch.poll() is None and time.monotonic() < deadline:
        count, attempt = _rows_and_attempts(out)
        fewest = min(fewest, count)
        if attempt >= 2:  # the first regrade is recorded: crash now
            break
        time.sleep(0.1)
    if batch.poll() is None:
        os.killpg(batch.pid, signal.SIGKILL)
    batch.wait()
    count, attempt = _rows_and_attempts(out)
    assert fewest == 3 and count == 3, f"the store held {fewest} rows during --force, {count} after the kill"
    assert attempt >= 2
    resumed = _batch(course, roster, out, "--jobs", "1")
    assert resumed.returncode == 0 and _counts(resumed) == (0, 3, 0), resumed.stdout
    assert _csv_rows(out) == before


def test_regrade_grades_the_named_students_again_on_the_same_commit(course, tmp_path):
    roster = _roster(tmp_path, [(s, str(_repo(tmp_path, s, {"vector_add.py": SOLUTION}))) for s in ("alice", "bob")])
    out = tmp_path / "out"
    assert _batch(course, roster, out).returncode == 0
    regrade = subprocess.run([sys.executable, "-m", "grader", "regrade", str(roster), "--out", str(out), "--backend",
                              "sim", "--timeout", CALL_LIMIT, "alice"], cwd=course, capture_output=True, text=True,
                             timeout=900)
    assert regrade.returncode == 0 and _counts(regrade) == (1, 0, 0), regrade.stdout + regrade.stderr
    with sqlite3.connect(out / "store.sqlite") as db:
        attempts = dict(db.execute("select student_id, attempt from graded"))
    assert attempts == {"alice": 2, "bob": 1}


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_log_shows_each_student_as_it_finishes_and_ctrl_c_says_what_was_kept(course, tmp_path, stop):
    rows = [(f"c{i}", str(_repo(tmp_path, f"c{i}", {"vector_add.py": SOLUTION if i else STUB}))) for i in range(3)]
    roster = _roster(tmp_path, rows)
    out = tmp_path / "out"
    # output to a pipe, as to a log file; the terminal's Ctrl-C: SIGINT to the whole process group
    batch = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out),
                              "--backend", "sim", "--timeout", CALL_LIMIT, "--jobs", "1"], cwd=course,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = batch.stdout.readline()
        running = batch.poll() is None
        assert first.startswith("[1/3] c") and first.rstrip().endswith(" s)"), first
        # the folder is the running batch's: a second one at once is refused, naming it
        second = _batch(course, roster, out, "--jobs", "1")
        running = running and batch.poll() is None
        if running:
            assert second.returncode == 2, second.stdout + second.stderr
            assert f"another batch or regrade is grading into {out} (pid {batch.pid}, since" in second.stderr
        if stop == "ctrl-c":
            os.killpg(batch.pid, signal.SIGINT)
        else:  # `kill PID`, Slurm's walltime: the batch's own process, told to end
            os.kill(batch.pid, signal.SIGTERM)
        rest, err = batch.communicate(timeout=300)
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
    if not running:
        pytest.skip("the batch ended before its first line was read (a loaded machine)")
    assert batch.returncode == 130, first + rest + err
    assert "Traceback" not in err and "interrupted: " in err and "the same command again" in err, err
    kept = _grades(out)  # the whole roster: a student the batch did not reach says so (audit F2)
    recorded = [s for s, row in kept.items() if not row["reason"].startswith("not graded yet: the batch did not")]
    assert set(kept) == {"c0", "c1", "c2"} and 1 <= len(recorded) <= 2 and len(recorded) == _stored(out), kept
    resumed = _batch(course, roster, out, "--jobs", "1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    grades = _grades(out)
    assert float(grades["c0"]["score"]) == 0 and grades["c1"]["score"] == grades["c2"]["score"] == grades["c2"]["max"]


def _processes_naming(text: str) -> list[int]:
    """The pids of this machine's processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_a_stopped_batch_stops_its_gradings_now_and_leaves_no_judge_behind(course, tmp_path, stop):
    """(audit) SIGTERM waited out the in-flight submission's call limit before the batch ended, then
    dropped it; after SIGKILL its judge went on grading for nobody. A never-ending kernel under a
    600 s call limit: the batch and its judge end within a minute either way."""
    student = f"spin{os.getpid()}x{stop}"
    judge = f"--gpugrade-submission {student} "  # (its judge's command line)
    looping = SOLUTION.replace("    d_a = cuda.to_device(a)\n", "    while True:\n        pass\n", 1)
    roster = _roster(tmp_path, [(student, str(_repo(tmp_path, student, {"vector_add.py": looping})))])
    batch = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(roster), "--out", str(tmp_path / "out"),
                              "--backend", "sim", "--timeout", "600", "--jobs", "1", "vector_add"], cwd=course,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # until its judge runs (a loaded machine starts it slowly)
        while not _processes_naming(judge) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_naming(judge), "the judge did not start"
        time.sleep(3)
        stopped = time.monotonic()
        os.kill(batch.pid, signal.SIGTERM if stop == "sigterm" else signal.SIGKILL)
        _, err = batch.communicate(timeout=120)
        if stop == "sigterm":
            assert batch.returncode == 130 and "interrupted: " in err, err
        while _processes_naming(judge) and time.monotonic() < stopped + 90:
            time.sleep(1)
        assert not _processes_naming(judge), "a judge outlived its batch"
        assert time.monotonic() - stopped < 90
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
        for pid in _processes_naming(judge):
            os.kill(pid, signal.SIGKILL)


def test_sandbox_options_reach_every_grading_and_bad_ones_are_refused_up_front(course, tmp_path):
    roster = _roster(tmp_path, [("alice", str(_repo(tmp_path, "alice", {"vector_add.py": SOLUTION})))])
    out = tmp_path / "out"
    refused = _batch(course, roster, out, "--gpus", "all")  # the process sandbox: --gpus means docker
    assert refused.returncode == 2 and "--gpus applies to --sandbox docker only" in refused.stderr, refused
    assert not (out / "grades.csv").exists()
    # --simulator reaches the judge: a value it does not know is its own error, in the grade
    from grader.batch.roster import Entry
    from grader.batch.run import Options, grade_entry

    options = Options(str(course), ("vector_add",), simulator="nonesuch", timeout=float(CALL_LIMIT),
                      submission_timeout=float(SUBMISSION_LIMIT))
    outcome = grade_entry(Entry("heidi", str(_plain(tmp_path, SOLUTION)), None, 2), options, frozenset())
    errors = "\n".join(outcome.results["errors"]) if outcome.results else outcome.problem
    assert "nonesuch" in errors, errors


def test_a_grade_the_grader_failed_is_an_error_row_graded_again_on_the_next_run(course, tmp_path):
    """A grading test that will not load (the instructor's slip; a device process that does not
    start is the same): not the student's zero recorded as graded, but an error row that says
    so, and the next run, the course fixed, grades it."""
    broken = tmp_path / "course"
    shutil.copytree(course, broken)
    test_file = broken / "tests" / "exercises" / "test_vector_add.py"
    good = test_file.read_text()
    test_file.write_text(good + "\ndef broken(:\n")
    roster = _roster(tmp_path, [("alice", str(_repo(tmp_path, "alice", {"vector_add.py": SOLUTION})))])
    out = tmp_path / "out"
    done = _batch(broken, roster, out)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "alice: not graded: grader error" in done.stdout and _counts(done) == (0, 0, 1), done.stdout
    row = _grades(out)["alice"]
    assert row["status"] == "error" and "could not collect" in row["reason"], row
    test_file.write_text(good)
    again = _batch(broken, roster, out)
    assert again.returncode == 0 and _counts(again) == (1, 0, 0), again.stdout + again.stderr
    assert _grades(out)["alice"]["status"] == "graded" and float(_grades(out)["alice"]["score"]) > 0


# --- a batch folder graded on some exercises (homework 3 is one exercise, with its own folder) ----

@pytest.fixture(scope="module")
def course_of_two(course, tmp_path_factory) -> Path:
    """The vector_add course with matmul beside it (its grading tests, solution and stub)."""
    root = tmp_path_factory.mktemp("course2") / "course"
    shutil.copytree(course, root)
    for folder, name in (("tests/exercises", "test_matmul.py"), ("solutions", "matmul.py"), ("exercises", "matmul.py")):
        shutil.copy(ROOT / folder / name, root / folder)
    return root


@pytest.fixture(scope="module")
def vector_add_only(course_of_two, tmp_path_factory):
    """A class of two (each pushed both exercises) batched on vector_add only: (roster, out, batch's run)."""
    tmp = tmp_path_factory.mktemp("selected")
    matmul = (ROOT / "solutions" / "matmul.py").read_text()
    roster = _roster(tmp, [("alice", str(_repo(tmp, "alice", {"vector_add.py": SOLUTION, "matmul.py": matmul}))),
                           ("bob", str(_repo(tmp, "bob", {"vector_add.py": STUB, "matmul.py": matmul})))])
    out = tmp / "hw1"
    return roster, out, _batch(course_of_two, roster, out, "vector_add", "--jobs", "2")


def _store_rows(out: Path) -> list:
    with sqlite3.connect(out / "store.sqlite") as db:
        return [db.execute(f"select * from {table} order by 1").fetchall() for table in ("graded", "selections")]


def test_a_class_graded_on_one_exercise_shows_only_it_with_its_maximum_in_every_export(
        course_of_two, vector_add_only, tmp_path):
    roster, out, done = vector_add_only
    assert done.returncode == 0 and _counts(done) == (2, 0, 0), done.stdout + done.stderr
    grades = _grades(out)
    assert "matmul" not in next(iter(grades.values())) and "vector_add" in grades["alice"]
    top = float(grades["alice"]["max"])
    assert float(grades["alice"]["score"]) == top and float(grades["bob"]["score"]) == 0
    summary = (out / "summary.html").read_text()
    assert "<h2>vector_add</h2>" in summary and "matmul" not in summary
    exported = subprocess.run([sys.executable, "-m", "grader", "export", str(out), "--csv", str(tmp_path / "x.csv"),
                               "--gradescope", str(tmp_path / "gs"), "--nbgrader",
                               f"sqlite:///{tmp_path / 'gradebook.db'}"],
                              cwd=course_of_two, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    with open(tmp_path / "x.csv", newline="") as f:
        csv_rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert "matmul" not in csv_rows["alice"] and {float(r["max"]) for r in csv_rows.values()} == {top}
    tests = json.loads((tmp_path / "gs" / "alice" / "results.json").read_text())["tests"]
    assert {t["tags"][0] for t in tests} == {"vector_add"} and sum(t["max_score"] for t in tests) == top
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        assignment = gb.find_assignment(out.name)  # the folder names the assignment
        assert [n.name for n in assignment.notebooks] == ["vector_add"] and assignment.max_score == top
    # the gradebook's own name for it
    export = [sys.executable, "-m", "grader", "export", str(out), "--nbgrader-assignment", "HW 1"]
    alone = subprocess.run([*export, "--csv", str(tmp_path / "y.csv")], cwd=course_of_two, capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode == 2 and "give --nbgrader DB_URL" in alone.stderr, alone.stderr
    named = subprocess.run([*export, "--nbgrader", f"sqlite:///{tmp_path / 'gradebook.db'}"], cwd=course_of_two,
                           capture_output=True, text=True, timeout=300)
    assert named.returncode == 0 and "grades of HW 1" in named.stdout, named.stdout + named.stderr
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        assert gb.find_assignment("HW 1").max_score == top


def test_a_folder_keeps_its_exercises_another_selection_is_refused_and_changes_nothing(course_of_two, vector_add_only):
    roster, out, done = vector_add_only
    assert done.returncode == 0, done.stdout + done.stderr
    before, csv_before = _store_rows(out), (out / "grades.csv").read_text()
    other = _batch(course_of_two, roster, out, "matmul")
    assert other.returncode == 2, other.stdout + other.stderr
    assert "graded on vector_add, not on matmul" in other.stderr and "another folder" in other.stderr, other.stderr
    unknown = _batch(course_of_two, roster, out, "matmull")
    assert unknown.returncode == 2 and "unknown exercise 'matmull' (this course has: vector_add, matmul)" in \
        unknown.stderr, unknown.stderr
    regrade = [sys.executable, "-m", "grader", "regrade", str(roster), "--out", str(out), "--backend", "sim",
               "--timeout", CALL_LIMIT]
    refused = subprocess.run([*regrade, "alice", "matmul"], cwd=course_of_two, capture_output=True, text=True)
    assert refused.returncode == 2 and "graded on vector_add, not on matmul" in refused.stderr, refused.stderr
    nobody = subprocess.run([*regrade, "vector_add"], cwd=course_of_two, capture_output=True, text=True)
    assert nobody.returncode == 2 and "name the students to regrade" in nobody.stderr, nobody.stderr
    assert _store_rows(out) == before and (out / "grades.csv").read_text() == csv_before
    # named again or not at all: the folder's exercises
    again = _batch(course_of_two, roster, out)
    assert again.returncode == 0 and _counts(again) == (0, 2, 0), again.stdout + again.stderr
    regraded = subprocess.run([*regrade, "alice"], cwd=course_of_two, capture_output=True, text=True, timeout=900)
    assert regraded.returncode == 0 and _counts(regraded) == (1, 0, 0), regraded.stdout + regraded.stderr
    with sqlite3.connect(out / "store.sqlite") as db:
        stored = {sid: (json.loads(ex), attempt) for sid, ex, attempt in
                  db.execute("select student_id, exercises, attempt from graded")}
    assert stored["alice"][1] == 2 and set(stored["alice"][0]) == set(stored["bob"][0]) == {"vector_add"}
    assert (out / "grades.csv").read_text().splitlines()[0] == csv_before.splitlines()[0]


def test_a_first_batch_that_graded_nobody_leaves_the_folder_s_exercises_open(course_of_two, tmp_path):
    """(audit F5) Its fetches all failed, yet it fixed the folder's exercises: the corrected batch,
    naming the homework's one exercise, was refused, and the folder had to be deleted."""
    roster = _roster(tmp_path, [("alice", str(tmp_path / "repos" / "not-pushed-yet.git"))])
    out = tmp_path / "hw1"
    first = _batch(course_of_two, roster, out)  # vector_add forgotten: all exercises
    assert first.returncode == 1 and _counts(first) == (0, 0, 1), first.stdout + first.stderr
    _repo(tmp_path, "not-pushed-yet", {"vector_add.py": SOLUTION})
    corrected = _batch(course_of_two, roster, out, "vector_add")
    assert corrected.returncode == 0, corrected.stdout + corrected.stderr
    assert f"{out} is graded on vector_add now, not on vector_add, matmul as its first batch chose" in corrected.stderr
    grades = _grades(out)["alice"]
    assert float(grades["score"]) == float(grades["max"]) > 0 and "matmul" not in grades
    other = _batch(course_of_two, roster, out, "matmul")  # a grade is stored: the folder keeps vector_add
    assert other.returncode == 2 and "graded on vector_add, not on matmul" in other.stderr, other.stderr


def _push(tmp: Path, name: str, files: dict[str, str], date: str) -> str:
    """Another commit of `files` to `name`'s repository, committed at `date`; returns its id."""
    work = tmp / "work" / name
    for path, text in files.items():
        (work / path).write_text(text)
    dated = {**os.environ, **GIT_ENV, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date}
    subprocess.run(["git", "commit", "-qam", "late"], cwd=work, check=True, capture_output=True, env=dated)
    subprocess.run(["git", "push", "-q", str(tmp / "repos" / f"{name}.git"), "main"], cwd=work, check=True,
                   capture_output=True, env=dated)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_folder_keeps_its_deadline_and_names_its_assignment(course, tmp_path):
    _repo(tmp_path, "alice", {"vector_add.py": SOLUTION})  # committed now: on time for 2090
    late = _push(tmp_path, "alice", {"vector_add.py": STUB}, "2091-01-01T00:00:00+00:00")
    roster = _roster(tmp_path, [("alice", str(tmp_path / "repos" / "alice.git"))])
    out = tmp_path / "grades" / "hw1"
    assert _batch(course, roster, out, "--deadline", "2090-01-01T00:00:00Z").returncode == 0
    on_time = _grades(out)["alice"]
    assert float(on_time["score"]) == float(on_time["max"]) > 0 and on_time["commit"] != late
    regrade = [sys.executable, "-m", "grader", "regrade", str(roster), "--backend", "sim", "--timeout", CALL_LIMIT]
    # a regrade without --deadline chooses by the folder's: the on-time commit again, not the late stub
    again = subprocess.run([*regrade, "--out", str(out), "alice"], cwd=course, capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _grades(out)["alice"]["commit"] == on_time["commit"] and _grades(out)["alice"]["score"] == on_time["score"]
    before = (out / "grades.csv").read_text()
    other = subprocess.run([*regrade, "--out", str(out), "--deadline", "2092-01-01T00:00:00Z", "alice"], cwd=course,
                           capture_output=True, text=True, timeout=300)
    assert other.returncode == 2 and "keeps its deadline" in other.stderr, other.stdout + other.stderr
    misspelt = subprocess.run([*regrade, "--out", str(tmp_path / "grades" / "hw01"), "alice"], cwd=course,
                              capture_output=True, text=True, timeout=300)
    assert misspelt.returncode == 2 and "not a batch folder" in misspelt.stderr, misspelt.stderr
    assert not (tmp_path / "grades" / "hw01").exists() and (out / "grades.csv").read_text() == before
    # the folder names its assignment: an export of another name is refused, never an empty export
    export = [sys.executable, "-m", "grader", "export", str(out), "--csv", str(tmp_path / "x.csv")]
    wrong = subprocess.run([*export, "--assignment", "hw2"], cwd=course, capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2 and "holds no assignment 'hw2' (it holds: hw1)" in wrong.stderr, wrong.stderr
    assert subprocess.run([*export, "--assignment", "hw1"], cwd=course, capture_output=True, timeout=300).returncode == 0
    # an extension: the roster's deadline column chooses this student's commit
    extended = tmp_path / "extended.csv"
    extended.write_text(f"student_id,repo,deadline\nalice,{tmp_path / 'repos' / 'alice.git'},2091-06-01T00:00:00Z\n")
    assert _batch(course, extended, tmp_path / "grades" / "hw1x", "--deadline", "2090-01-01T00:00:00Z").returncode == 0
    assert _grades(tmp_path / "grades" / "hw1x")["alice"]["commit"] == late
    # (audit) ... and the exports count her days late from it: committed 2091-01-01, before her 2091-06-01
    charged = tmp_path / "charged.csv"
    done = subprocess.run([sys.executable, "-m", "grader", "export", str(tmp_path / "grades" / "hw1x"), "--csv",
                           str(charged), "--deadline", "2090-01-01T00:00:00Z", "--late-per-day", "0.1"], cwd=course,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 student(s) have their own deadline in the roster" in done.stderr, done.stderr
    with charged.open(newline="") as f:
        [row] = list(csv.DictReader(f))
    assert (row["late_days"], row["penalty"]) == ("0", "0"), row
    # an export's --deadline other than the one the folder chose commits by is said
    done = subprocess.run([*export, "--deadline", "2089-01-01T00:00:00Z"], cwd=course, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "is not the deadline" in done.stderr, done.stderr


def test_an_extension_stays_until_a_roster_takes_it_back_and_each_line_names_its_commit(course, tmp_path):
    """(audit F1, F4) frank's extension was given in a roster of its own; the class's next batch,
    its roster without it, graded his on-time stub (25 -> 0) with nothing said, and no line or page
    said which commit was graded."""
    _repo(tmp_path, "frank", {"vector_add.py": STUB})  # committed now: on time for 2090
    late = _push(tmp_path, "frank", {"vector_add.py": SOLUTION}, "2091-01-01T00:00:00+00:00")
    on_time = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=tmp_path / "work" / "frank", check=True,
                             capture_output=True, text=True).stdout.strip()
    repo, out = tmp_path / "repos" / "frank.git", tmp_path / "grades" / "hw1"
    extended = tmp_path / "extended.csv"
    extended.write_text(f"student_id,repo,deadline\nfrank,{repo},2091-06-01T00:00:00Z\n")
    first = _batch(course, extended, out, "--deadline", "2090-01-01T00:00:00Z")
    assert first.returncode == 0, first.stdout + first.stderr
    top = _grades(out)["frank"]["max"]
    assert f"frank: {top}/{top}, commit {late[:12]} (" in first.stdout and "later commit" not in first.stdout
    page = (out / "feedback" / "frank.md").read_text()
    assert page.startswith(f"# frank\n\nGraded: commit {late[:12]} (the last before the deadline "
                           f"2091-06-01T00:00:00+00:00).\n"), page
    assert f"Graded: commit {late[:12]}" in (out / "feedback" / "frank.html").read_text()
    # the class's roster, without the extension: kept, and said once
    roster = _roster(tmp_path, [("frank", str(repo))])
    again = _batch(course, roster, out)
    assert again.returncode == 0 and _counts(again) == (0, 1, 0), again.stdout + again.stderr
    kept = "1 student(s) keep their extension recorded by an earlier roster: frank (2091-06-01T00:00:00+00:00)"
    assert again.stderr.count(kept) == 1 and "write `none`" in again.stderr, again.stderr
    assert (_grades(out)["frank"]["commit"], _grades(out)["frank"]["score"]) == (late, top)
    regrade = subprocess.run([sys.executable, "-m", "grader", "regrade", str(roster), "--out", str(out), "--backend",
                              "sim", "--timeout", CALL_LIMIT, "frank"], cwd=course, capture_output=True, text=True,
                             timeout=900)
    assert regrade.returncode == 0 and kept in regrade.stderr, regrade.stdout + regrade.stderr
    assert (_grades(out)["frank"]["commit"], _grades(out)["frank"]["score"]) == (late, top)
    # `none` takes it back: the folder's deadline chooses his commit, and the line says what was left out
    taken_back = tmp_path / "taken_back.csv"
    taken_back.write_text(f"student_id,repo,deadline\nfrank,{repo},NONE\n")
    back = _batch(course, taken_back, out)
    assert back.returncode == 0 and "keep their extension" not in back.stderr, back.stdout + back.stderr
    assert f"frank: 0/{top}, commit {on_time[:12]} (the last before the deadline; 1 later commit not graded) (" \
        in back.stdout, back.stdout
    assert (_grades(out)["frank"]["commit"], _grades(out)["frank"]["score"]) == (on_time, "0")
    assert (out / "feedback" / "frank.md").read_text().startswith(
        f"# frank\n\nGraded: commit {on_time[:12]} (the last before the deadline 2090-01-01T00:00:00+00:00; "
        f"1 later commit not graded).\n")
    with sqlite3.connect(out / "store.sqlite") as db:
        assert db.execute("select count(*) from extensions").fetchone() == (0,)


def test_the_feedback_pages_of_an_id_taken_off_the_roster_leave_the_feedback_folder(course, tmp_path):
    """(audit F6) nnia, a typo for nina, corrected in the roster: feedback/nnia.html and .md stayed
    in the folder an instructor uploads whole, a stale page beside the class's."""
    repo, out = _repo(tmp_path, "nina", {"vector_add.py": STUB}), tmp_path / "hw"
    typo = _batch(course, _roster(tmp_path, [("nnia", str(repo))]), out)
    assert typo.returncode == 0 and (out / "feedback" / "nnia.md").is_file(), typo.stdout + typo.stderr
    page = (out / "feedback" / "nnia.html").read_text()
    corrected = _batch(course, _roster(tmp_path, [("nina", str(tmp_path / "repos" / "moved.git"))]), out)
    assert corrected.returncode == 1, corrected.stdout + corrected.stderr  # (nina's fetch fails: no grading here)
    assert sorted(p.name for p in (out / "feedback").iterdir()) == ["nina.html", "nina.md"]
    assert (out / "feedback-off-roster" / "nnia.html").read_text() == page
    assert (f"moved the feedback pages of 1 student(s) not on the roster {tmp_path / 'roster.csv'} from "
            f"{out / 'feedback'} to {out / 'feedback-off-roster'} (not to be handed out): nnia") in corrected.stderr
    # on the roster again: already graded, so no page is written; the one set aside comes back
    again = _batch(course, _roster(tmp_path, [("nnia", str(repo))]), out)
    assert _counts(again) == (0, 1, 0) and "back into" in again.stderr, again.stdout + again.stderr
    assert (out / "feedback" / "nnia.html").read_text() == page
    assert sorted(p.name for p in (out / "feedback-off-roster").iterdir()) == ["nina.html", "nina.md"]


def test_grades_of_another_grader_version_are_kept_only_when_asked_and_said_everywhere(course, tmp_path):
    """(audit F3) Any change under grader/ (a pull of a fix, an edit in a shared checkout) regraded
    the whole class on the next resume, with no way to keep the stored grades."""
    repo, out = _repo(tmp_path, "alice", {"vector_add.py": SOLUTION}), tmp_path / "hw"
    roster = _roster(tmp_path, [("alice", str(repo))])
    assert _batch(course, roster, out).returncode == 0
    with sqlite3.connect(out / "store.sqlite") as db:  # as an older grader made it
        db.execute("update graded set grader_version = '0.0.9+older'")
    kept = _batch(course, roster, out, "--keep-other-grader-grades")
    assert kept.returncode == 0 and _counts(kept) == (0, 1, 0), kept.stdout + kept.stderr
    assert "1 student(s) keep grades made by another version of the grader than this one (" in kept.stderr
    assert "as --keep-other-grader-grades asks" in kept.stderr and "alice (0.0.9+older)" in kept.stderr, kept.stderr
    assert _grades(out)["alice"]["grader_version"] == "0.0.9+older"
    exported = subprocess.run([sys.executable, "-m", "grader", "export", str(out), "--csv", str(tmp_path / "x.csv")],
                              cwd=course, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr
    assert "1 student(s)' grades were made by another version of the grader than this one" in exported.stderr
    with open(tmp_path / "x.csv", newline="") as f:
        assert next(csv.DictReader(f))["grader_version"] == "0.0.9+older"
    refused = _batch(course, roster, out, "--keep-other-grader-grades", "--force")
    assert refused.returncode == 2 and "neither --force nor regrade" in refused.stderr, refused.stderr
    # asked for on that run only: the next batch without it grades again, as before
    again = _batch(course, roster, out)
    assert again.returncode == 0 and _counts(again) == (1, 0, 0) and "graded again now" in again.stderr, again.stderr
    assert _grades(out)["alice"]["grader_version"] not in ("", "0.0.9+older")
