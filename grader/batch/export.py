"""Exports of a batch's grades (the rows of its store): a CSV, Gradescope results, an nbgrader
gradebook, each with the same late-penalty policy applied from the commit time."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import UsageError
from ..report.gradescope import gradescope
from .store import Key, Row

DAY = 86400.0


@dataclass(frozen=True)
class LatePolicy:
    """`per_day` of the score is removed for each started day after `deadline`, at most `cap` of
    it. A row without a commit time (a plain folder) is never late: there is nothing to date it by."""

    deadline: datetime | None = None
    per_day: float = 0.0
    cap: float = 1.0
    # a student's own deadline (an extension: the roster's deadline column, Store.extensions), by id;
    # applied where there is a class deadline to be late for at all
    extensions: Mapping[str, datetime] = field(default_factory=dict)

    def __post_init__(self):
        if self.deadline is not None and self.deadline.utcoffset() is None:
            raise ValueError("the deadline needs a time zone")
        if not (self.per_day >= 0 and 0 <= self.cap <= 1):
            raise ValueError(f"per_day must be >= 0 and cap in [0, 1], not {self.per_day} and {self.cap}")

    def of(self, student_id: str) -> "LatePolicy":
        """The policy for one student: their own deadline where they have one."""
        own = self.extensions.get(student_id)
        return self if own is None or self.deadline is None else replace(self, deadline=own, extensions={})

    def days_late(self, committed_at: datetime | None) -> int:
        if self.deadline is None or committed_at is None:
            return 0
        late = (committed_at - self.deadline).total_seconds()
        return math.ceil(late / DAY) if late > 0 else 0

    def penalty(self, committed_at: datetime | None) -> float:
        """The fraction of the score removed."""
        return round(min(self.cap, self.per_day * self.days_late(committed_at)), 9)

    def final(self, score: float, committed_at: datetime | None) -> float:
        return round(score * (1 - self.penalty(committed_at)), 6)


ON_TIME = LatePolicy()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(round(x, 6))


def _score(row: Row) -> float:
    return row.score if row.status == "graded" else 0.0


NOT_REACHED = ("not graded yet: the batch did not reach them (run gpugrade batch again with the same --out to "
               "finish)")


def with_unreached(rows: list[Row], roster: list[str] | None, assignment: str) -> tuple[list[Row], list[str]]:
    """`rows` and, for each student of the recorded `roster` without one (a batch killed before it
    reached them), a row not graded, by student id; and those students' ids. Exported as a fetch
    failure is (0 of the assignment's maximum, the reason saying why) rather than left out: a class
    uploaded with students missing would look whole."""
    have = {r.key.student_id for r in rows}
    missing = [sid for sid in roster or () if sid not in have]
    now = datetime.now(timezone.utc)
    added = [Row(Key(sid, assignment, "", "", ""), 0.0, 0.0, {}, "error", NOT_REACHED, None, now, None)
             for sid in missing]
    return sorted([*rows, *added], key=lambda r: r.key.student_id), missing


def reason(row: Row) -> str:
    """The row's reason, and where a later fetch failed (the stored row stands), that failure."""
    if not row.latest_failure:
        return row.reason
    note = f"the latest fetch failed, this is the stored row of commit {row.key.commit}: {row.latest_failure}"
    return f"{row.reason}; {note}" if row.reason else note


@contextmanager
def _atomic(path: Path):
    """A file that appears complete at `path` or not at all: readers of a file the batch keeps
    rewriting never see half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would make it (mkstemp's 0600: a TA group could not read it)
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without setting it (os.umask sets it: other threads create files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def first_failure(row: Row) -> str:
    """The first failing test of a graded row, as "exercise stage K: its message's first line"
    (a performance test skipped for a failure already named left out); "" where none failed."""
    from ..report.text import first_line

    for test in (row.results.tests if row.results is not None and row.status == "graded" else ()):
        if test.failed_itself:
            return f"{test.exercise} stage {test.stage}: {first_line(test.output) or test.name}"[:300]
    return ""


def write_csv(rows: Iterable[Row], path: str | Path, exercises: list[str], policy: LatePolicy = ON_TIME) -> None:
    """One line per student: id, score, max, each exercise's score, status, reason, the first
    failing test, commit, commit time, days late, penalty (a fraction), the final score and the
    version of the grader that made the row (a batch may keep another version's: docs/BATCH.md). A row
    that could not be graded scores 0 of the assignment's maximum (its graded rows'), each exercise
    0, so a gradebook's percentages hold on every line."""
    rows = list(rows)
    maximum = max((r.max_score for r in rows if r.status == "graded"), default=0.0)
    with _atomic(Path(path)) as f:
        out = csv.writer(f)
        out.writerow(["student_id", "score", "max", *exercises, "status", "reason", "first_failure", "commit",
                      "committed_at", "late_days", "penalty", "final", "grader_version"])
        for row in rows:
            score = _score(row)
            graded = row.status == "graded"
            late = policy.of(row.key.student_id)
            out.writerow([
                row.key.student_id, _number(score), _number(row.max_score if graded else maximum),
                *(_number(row.exercises[e][0] if graded else 0) if e in row.exercises or not graded else ""
                  for e in exercises),
                row.status, reason(row), first_failure(row), row.key.commit,
                row.committed_at.isoformat() if row.committed_at else "",
                late.days_late(row.committed_at), _number(late.penalty(row.committed_at)),
                _number(late.final(score, row.committed_at)), row.key.grader_version,
            ])


def other_graders(rows: Iterable[Row], current: str) -> list[str]:
    """`student (version)` of each graded row another version of the grader than `current` made."""
    return [f"{r.key.student_id} ({r.key.grader_version})" for r in rows
            if r.status == "graded" and r.key.grader_version != current]


def _folder_name(student_id: str) -> str:
    # the id names a folder: never one that leaves the export folder or hides in it
    if not student_id or student_id in (".", "..") or any(c in student_id for c in "/\\\0") or student_id.startswith("."):
        raise UsageError(f"student id {student_id!r} cannot name a folder")
    return student_id


def gradescope_doc(row: Row, policy: LatePolicy = ON_TIME) -> dict:
    """Gradescope's results.json for one row; its top-level score is the final one."""
    if row.results is None:
        return {"score": 0.0, "output": f"Not graded: {row.reason}", "output_format": "text",
                "visibility": "visible", "tests": []}
    doc = gradescope(row.results)
    if row.status != "graded":
        doc["output"] += f"\nNot graded: {row.reason}"
    score = _score(row)
    policy = policy.of(row.key.student_id)
    days, penalty = policy.days_late(row.committed_at), policy.penalty(row.committed_at)
    doc["score"] = policy.final(score, row.committed_at)
    if penalty:
        doc["output"] += (f"\nSubmitted {days} day{'s' if days != 1 else ''} late: {penalty:.0%} off, "
                          f"{_number(score)} -> {_number(doc['score'])}.")
    return doc


def write_gradescope(rows: Iterable[Row], folder: str | Path, policy: LatePolicy = ON_TIME) -> tuple[int, list[str]]:
    """`<folder>/<student_id>/results.json` per row; (how many were written, the students whose
    folder from an earlier export was removed: one holding nothing but its results.json, of a
    student no longer in the rows, would go on to Gradescope with an old grade)."""
    folder = Path(folder)
    written: set[str] = set()
    for row in rows:
        name = _folder_name(row.key.student_id)
        with _atomic(folder / name / "results.json") as f:
            json.dump(gradescope_doc(row, policy), f, indent=1)
        written.add(name)
    removed = []
    for stale in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in written):
        if [p.name for p in stale.iterdir()] == ["results.json"]:  # ours alone: anything else is left
            (stale / "results.json").unlink()
            stale.rmdir()
            removed.append(stale.name)
    return len(written), removed


@contextmanager
def _alembic_on_path():
    # nbgrader's Gradebook runs the `alembic` command when it creates a gradebook; from a venv
    # that is not activated it is next to our interpreter, not on PATH
    here = str(Path(sys.executable).parent)
    before = os.environ.get("PATH", "")
    add = shutil.which("alembic") is None and shutil.which("alembic", path=here) is not None
    if add:
        os.environ["PATH"] = here + os.pathsep + before
    try:
        yield
    finally:
        if add:
            os.environ["PATH"] = before


def write_nbgrader(rows: Iterable[Row], db_url: str, assignment: str, policy: LatePolicy = ON_TIME) -> int:
    """Students, the assignment and its grades into an nbgrader gradebook (`sqlite:///gradebook.db`).

    nbgrader grades notebooks cell by cell; here each exercise is a notebook of that name holding
    one autograded code cell of that name, whose maximum is the exercise's. The commit time is the
    submission's timestamp, the deadline the assignment's due date, and the late penalty (in points,
    the CSV's score - final) is set on the first notebook, so nbgrader's score less its penalty is
    the final one. Rerunning updates in place
    (manual grades and comments an instructor added stay). One writer at a time: nbgrader's sqlite
    gradebook is not safe for concurrent writers. Returns how many students were written."""
    try:
        from nbgrader.api import Grade, Gradebook, MissingEntry, SubmittedNotebook
    except ImportError as exc:
        raise UsageError("the nbgrader export needs nbgrader: pip install 'gpugrade[export]'") from exc
    rows = list(rows)
    maxima: dict[str, float] = {}
    for row in rows:
        for exercise, (_, top) in row.exercises.items():
            maxima[exercise] = max(maxima.get(exercise, 0.0), top)
    with _alembic_on_path(), warnings.catch_warnings(), Gradebook(db_url) as gb:
        # nbgrader's own SQLAlchemy models warn (SAWarning) on every query: noise between the
        # export's lines, about nbgrader, nothing the instructor can act on (this is our command)
        warnings.filterwarnings("ignore", module=r"nbgrader(\.|$)")
        warnings.filterwarnings("ignore", module=r"sqlalchemy(\.|$)")
        gb.update_or_create_assignment(assignment, duedate=policy.deadline)
        # the structure first: add_submission mirrors the assignment's notebooks and cells
        cells = {}
        for exercise, top in maxima.items():
            gb.update_or_create_notebook(exercise, assignment)
            cells[exercise] = gb.update_or_create_grade_cell(exercise, exercise, assignment, max_score=top,
                                                             cell_type="code")
        for row in rows:
            student = row.key.student_id
            gb.update_or_create_student(student)
            late = policy.of(student)
            # an extension, as nbgrader keeps one: the time past the assignment's due date
            extension = (late.deadline - policy.deadline if late.deadline and policy.deadline
                         and late.deadline > policy.deadline else None)
            submission = gb.update_or_create_submission(assignment, student, timestamp=row.committed_at,
                                                        extension=extension)
            # the penalty in points, rounded as the CSV's final score is; all of it on the first
            # notebook: nbgrader sums the notebooks' penalties, and a sum of per-notebook shares
            # carries float noise (22.200000000000003)
            total = _score(row)
            penalty = round(total - late.final(total, row.committed_at), 6)
            for index, (exercise, cell) in enumerate(cells.items()):
                score = row.exercises.get(exercise, (0.0, 0.0))[0] if row.status == "graded" else 0.0
                try:
                    notebook = gb.find_submission_notebook(exercise, assignment, student)
                except MissingEntry:  # an exercise new since this submission was first exported
                    notebook = SubmittedNotebook(notebook=cell.notebook, assignment=submission)
                    gb.db.add(notebook)
                try:
                    grade = gb.find_grade(exercise, exercise, assignment, student)
                except MissingEntry:
                    grade = Grade(cell_id=cell.id, notebook=notebook)
                    gb.db.add(grade)
                grade.auto_score = score
                grade.needs_manual_grade = False
                notebook.late_submission_penalty = penalty if index == 0 else 0.0
            gb.db.commit()
    return len(rows)
