"""The results store: every graded submission of a batch, keyed so that a rerun skips what is done.

A row is keyed by (student, assignment, commit, grader version, course version): the same commit
graded by the same grader against the same course is the same grade, so the batch asks `has(key)`
before grading and `put`s after. Anything else (a new commit, a changed test, a grader upgrade)
is a new key and is graded again. Beside the rows, each assignment's selection of exercises
(grader.batch.selection): every row of it is graded on those.

Storage goes through SQLAlchemy: an embedded sqlite file by default (`Store("out/store.sqlite")`),
and any SQLAlchemy URL (`postgresql+psycopg://host/db`, ...) where one file on one machine is too
small, e.g. many batch hosts writing to one server. Crash safety comes from the database alone:
each `put` is one transaction and there is no state outside it, so a `kill -9` at any moment
leaves either the whole row or nothing. On sqlite the journal is WAL with `synchronous=FULL`
(a committed row survives a power loss too; WAL needs a local filesystem, not NFS). Open one
`Store` per process: an engine must not cross a fork.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from sqlalchemy import (JSON, CheckConstraint, Column, Float, Index, Integer, MetaData, String, Table, Text,
                        UniqueConstraint, and_, case, create_engine, delete, event, func, inspect, insert, select,
                        update)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError

from ..report.results import Results

STATUSES = ("graded", "error")  # "error": no grade could be made (a repository that cannot be fetched, ...)
KEY = ("student_id", "assignment", "commit", "grader_version", "course_version")
# column sizes: sqlite ignores them, a server database refuses a longer value (a row never stored)
COMMIT_LENGTH = 128
ASSIGNMENT_LENGTH = 128

_meta = MetaData()
graded = Table(
    "graded", _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("student_id", String(128), nullable=False),
    Column("assignment", String(ASSIGNMENT_LENGTH), nullable=False),
    # a git commit (40 hex, 64 in a sha256 repository) or a folder's "sha256:<64 hex>": 71
    Column("commit", String(COMMIT_LENGTH), nullable=False),
    Column("grader_version", String(128), nullable=False),
    Column("course_version", String(64), nullable=False),
    Column("score", Float, nullable=False),
    Column("max_score", Float, nullable=False),
    Column("exercises", JSON, nullable=False),                   # {exercise: [score, max]}
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("results", JSON(none_as_null=True), nullable=True),   # Results.to_dict()
    # UTC ISO 8601 text with microseconds: portable across databases, keeps the zone (sqlite's
    # DateTime drops it) and sorts in time order as text
    Column("committed_at", String(40), nullable=True),
    Column("graded_at", String(40), nullable=False),
    Column("attempt", Integer, nullable=False),                  # 1, then +1 per regrade of the key
    UniqueConstraint(*KEY, name="uq_graded_key"),
    CheckConstraint("status IN ('graded', 'error')", name="ck_graded_status"),
    Index("ix_graded_assignment_student", "assignment", "student_id"),
)
# the exercises an assignment is graded on, recorded by its first batch: every row of it is graded
# on these, never some on one exercise and some on four. A table of its own, so that create_all
# adds it to a store made before it (whose assignments, with no row here, were graded on all)
selections = Table(
    "selections", _meta,
    Column("assignment", String(ASSIGNMENT_LENGTH), primary_key=True),
    Column("exercises", JSON, nullable=False),                   # [exercise, ...]
    Column("recorded_at", String(40), nullable=False),
)
# the deadline an assignment's commits are chosen by, recorded by its first batch (NULL: none, the
# latest commit), so that a later batch or regrade without --deadline chooses as it did; an
# assignment with no row here was graded before deadlines were recorded
deadlines = Table(
    "deadlines", _meta,
    Column("assignment", String(ASSIGNMENT_LENGTH), primary_key=True),
    Column("deadline", String(40), nullable=True),                # UTC ISO 8601, as committed_at
    Column("recorded_at", String(40), nullable=False),
)
NOT_RECORDED = object()  # Store.deadline of an assignment whose deadline was never recorded
# the student ids of an assignment's roster as its latest batch read it: a student since taken off
# the roster (a typo'd id corrected, a student who dropped the course) keeps the rows, and leaves
# grades.csv, the summary and every export
rosters = Table(
    "rosters", _meta,
    Column("assignment", String(ASSIGNMENT_LENGTH), primary_key=True),
    Column("students", JSON, nullable=False),                    # [student_id, ...]
    Column("recorded_at", String(40), nullable=False),
)
# a student's own deadline (an extension: the roster's deadline column) as the latest roster giving
# one (or taking it back: `none`) read it, to choose their commit and for the exports' late penalty;
# a student without a row has the class's
extensions = Table(
    "extensions", _meta,
    Column("assignment", String(ASSIGNMENT_LENGTH), primary_key=True),
    Column("student_id", String(128), primary_key=True),
    Column("deadline", String(40), nullable=False),               # UTC ISO 8601, as committed_at
)


@dataclass(frozen=True)
class Key:
    student_id: str
    assignment: str
    commit: str
    grader_version: str
    course_version: str


@dataclass(frozen=True)
class Row:
    key: Key
    score: float
    max_score: float
    exercises: dict[str, tuple[float, float]]
    status: str
    reason: str
    committed_at: datetime | None
    graded_at: datetime
    results: Results | None
    attempt: int = 1
    # this graded row is shown, but a later attempt could fetch nothing (a network hiccup, a moved
    # repository): that attempt's reason, so every output can say its grade is the stored one
    latest_failure: str = ""


def _utc_text(when: datetime) -> str:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"a naive datetime ({when.isoformat()}) is ambiguous: give it a time zone")
    return when.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _is_key(key: Key):
    return [graded.c[name] == getattr(key, name) for name in KEY]


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")   # readers (exports) never block the batch's writes
    cursor.execute("PRAGMA synchronous=FULL")   # per connection: a commit is on disk when it returns
    cursor.close()


class Store:
    """The graded submissions of one batch folder (or of one server database)."""

    def __init__(self, url_or_path: str | Path):
        text = str(url_or_path)
        url = make_url(text) if "://" in text else make_url(f"sqlite:///{Path(text).resolve()}")
        self.url = url
        if url.get_backend_name() == "sqlite":
            # wait for another process's write instead of failing with "database is locked"
            self.engine = create_engine(url, connect_args={"timeout": 60})
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = create_engine(url, pool_pre_ping=True)
        try:
            _meta.create_all(self.engine)
        except OperationalError:
            # two processes creating the schema at once: the loser's CREATE fails, the table is there
            if not all(inspect(self.engine).has_table(table) for table in _meta.tables):
                raise

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def has(self, key: Key) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(graded.c.id).where(*_is_key(key)).limit(1)).first() is not None

    def put(self, key: Key, results: Results | None, *, status: str, reason: str = "",
            committed_at: datetime | None = None) -> None:
        """Record one graded submission in one transaction; a row already there for the key is
        replaced (a regrade) and its attempt counted up."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        if status == "graded" and results is None:
            raise ValueError("a graded row needs its Results")
        values = {
            "score": results.score if results else 0.0,
            "max_score": results.max_score if results else 0.0,
            "exercises": {e: list(results.subtotal(e)) for e in results.exercises()} if results else {},
            "status": status, "reason": reason,
            "results": results.to_dict() if results else None,
            "committed_at": None if committed_at is None else _utc_text(committed_at),
            "graded_at": _utc_text(datetime.now(timezone.utc)),
        }
        for tries_left in (1, 0):
            try:
                with self.engine.begin() as conn:
                    done = conn.execute(update(graded).where(*_is_key(key))
                                        .values(**values, attempt=graded.c.attempt + 1))
                    if done.rowcount == 0:
                        conn.execute(insert(graded).values(**{n: getattr(key, n) for n in KEY}, **values, attempt=1))
                return
            except IntegrityError:
                # another writer inserted the same key between our update and insert: now it is
                # there, so the update path applies
                if not tries_left:
                    raise

    def latest(self, assignment: str, students: list[str] | None = None) -> list[Row]:
        """One row per student of `assignment` (or of these `students`): the key graded most
        recently, by student id. A fetch failure (an error row without a commit: nothing was
        fetched, so nothing says the submission changed) never hides a row that has a commit: that
        row is given, its `latest_failure` set to the newer failure's reason."""
        fetch_failed = and_(graded.c.status == "error", graded.c.commit == "")
        where = [graded.c.assignment == assignment]
        if students is not None:
            where.append(graded.c.student_id.in_(list(students)))
        newest_first = func.row_number().over(partition_by=graded.c.student_id,
                                              order_by=(case((fetch_failed, 1), else_=0),
                                                        graded.c.graded_at.desc(), graded.c.id.desc()))
        ranked = select(graded, newest_first.label("newest")).where(*where).subquery()
        query = select(ranked).where(ranked.c.newest == 1).order_by(ranked.c.student_id)
        failures = (select(graded.c.student_id, graded.c.reason, graded.c.graded_at).where(*where, fetch_failed)
                    .order_by(graded.c.graded_at, graded.c.id))
        with self.engine.connect() as conn:
            rows = [_row(r) for r in conn.execute(query).mappings()]
            newest_failure = {sid: (when, reason) for sid, reason, when in conn.execute(failures)}  # last wins
        for i, row in enumerate(rows):
            failure = newest_failure.get(row.key.student_id)
            if row.key.commit and failure and failure[0] > _utc_text(row.graded_at):
                rows[i] = replace(row, latest_failure=failure[1])
        return rows

    def forget_fetch_failures(self, assignment: str, student_id: str) -> int:
        """Delete this student's fetch failures (error rows without a commit) of `assignment`: a
        later fetch worked, so the stored grade is the current one again. Returns how many went."""
        with self.engine.begin() as conn:
            return conn.execute(delete(graded).where(graded.c.assignment == assignment,
                                                     graded.c.student_id == student_id,
                                                     graded.c.status == "error", graded.c.commit == "")).rowcount

    def assignments(self) -> list[str]:
        """The assignments with rows here (what an export of a batch folder offers)."""
        with self.engine.connect() as conn:
            return list(conn.execute(select(graded.c.assignment).distinct().order_by(graded.c.assignment)).scalars())

    def selection(self, assignment: str) -> list[str] | None:
        """The exercises `assignment` is graded on, or None where none is recorded (a new
        assignment, or one graded before selections were recorded: on all the course's)."""
        with self.engine.connect() as conn:
            return conn.execute(select(selections.c.exercises)
                                .where(selections.c.assignment == assignment)).scalar_one_or_none()

    def record_selection(self, assignment: str, exercises: list[str]) -> list[str]:
        """Record the exercises of `assignment` unless some are recorded already; returns the
        recorded ones (another writer's, where it recorded first)."""
        self._record_once(selections, assignment=assignment, exercises=list(exercises))
        return self.selection(assignment)

    def deadline(self, assignment: str):
        """The deadline recorded for `assignment` (a datetime, or None for no deadline), or
        NOT_RECORDED where none was (a new assignment, or one graded before deadlines were)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(deadlines.c.deadline).where(deadlines.c.assignment == assignment)).first()
        if row is None:
            return NOT_RECORDED
        return None if row[0] is None else datetime.fromisoformat(row[0])

    def record_deadline(self, assignment: str, deadline: datetime | None):
        """Record the deadline of `assignment` unless one is recorded already; returns the recorded
        one (another writer's, where it recorded first)."""
        self._record_once(deadlines, assignment=assignment, deadline=None if deadline is None else _utc_text(deadline))
        return self.deadline(assignment)

    def replace_selection(self, assignment: str, exercises: list[str]) -> None:
        """Record the exercises of `assignment` in place of those recorded (a first batch that graded
        nobody chose them: nothing is graded on them yet)."""
        self._replace(selections, assignment, exercises=list(exercises))

    def has_grades(self, assignment: str) -> bool:
        """Whether a grade of `assignment` is stored (an error row is none: nothing was graded)."""
        with self.engine.connect() as conn:
            return conn.execute(select(graded.c.id).where(graded.c.assignment == assignment,
                                                          graded.c.status == "graded").limit(1)).first() is not None

    def _replace(self, table: Table, assignment: str, **values) -> None:
        """The row of `table` keyed by `assignment` set to `values` (inserted where there is none)."""
        values["recorded_at"] = _utc_text(datetime.now(timezone.utc))
        with self.engine.begin() as conn:
            if not conn.execute(update(table).where(table.c.assignment == assignment).values(**values)).rowcount:
                conn.execute(insert(table).values(assignment=assignment, **values))

    def replace_deadline(self, assignment: str, deadline: datetime | None) -> None:
        """Record the deadline of `assignment` in place of the recorded one (chosen by a first batch
        that graded nobody)."""
        self._replace(deadlines, assignment, deadline=None if deadline is None else _utc_text(deadline))

    def _record_once(self, table: Table, **values) -> None:
        """A row of `table` (keyed by its assignment) unless one is there: the first record stands."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(table).values(**values, recorded_at=_utc_text(datetime.now(timezone.utc))))
        except IntegrityError:
            pass  # recorded before (by another writer an instant before, too)

    def roster(self, assignment: str) -> list[str] | None:
        """The student ids of the roster the latest batch of `assignment` read; None where none
        was recorded (a store made before rosters were)."""
        with self.engine.connect() as conn:
            return conn.execute(select(rosters.c.students)
                                .where(rosters.c.assignment == assignment)).scalar_one_or_none()

    def rostered(self) -> list[str]:
        """The assignments with a recorded roster (a batch's, graded or not yet)."""
        with self.engine.connect() as conn:
            return list(conn.execute(select(rosters.c.assignment).order_by(rosters.c.assignment)).scalars())

    def record_roster(self, assignment: str, students: list[str]) -> None:
        """Record (replace) the student ids of the roster of `assignment`."""
        self._replace(rosters, assignment, students=list(students))

    def extensions(self, assignment: str) -> dict[str, datetime]:
        """Each student's own deadline for `assignment` (the roster's deadline column), by id."""
        with self.engine.connect() as conn:
            found = conn.execute(select(extensions.c.student_id, extensions.c.deadline)
                                 .where(extensions.c.assignment == assignment)).all()
        return {student: datetime.fromisoformat(deadline) for student, deadline in found}

    def record_extensions(self, assignment: str, deadlines: dict[str, datetime | None]) -> None:
        """Record (replace) the own deadline of each of these students; None: they have none."""
        if not deadlines:
            return
        with self.engine.begin() as conn:
            conn.execute(delete(extensions).where(extensions.c.assignment == assignment,
                                                  extensions.c.student_id.in_(list(deadlines))))
            given = [{"assignment": assignment, "student_id": s, "deadline": _utc_text(d)}
                     for s, d in deadlines.items() if d is not None]
            if given:
                conn.execute(insert(extensions), given)

    def on_roster(self, assignment: str) -> tuple[list[Row], list[str]]:
        """`latest(assignment)` of the students on its recorded roster (all, where none is
        recorded), and the ids of those left out."""
        rows, ids = self.latest(assignment), self.roster(assignment)
        if ids is None:
            return rows, []
        keep = set(ids)
        return [r for r in rows if r.key.student_id in keep], [r.key.student_id for r in rows
                                                                 if r.key.student_id not in keep]

    def forget(self, assignment: str, student_ids: list[str]) -> int:
        """Delete every row of these students for `assignment`, so the next batch grades them
        again; returns how many rows went. No ids forget nothing (never the whole class)."""
        if not student_ids:
            return 0
        with self.engine.begin() as conn:
            return conn.execute(delete(graded).where(graded.c.assignment == assignment,
                                                     graded.c.student_id.in_(list(student_ids)))).rowcount


def _row(r) -> Row:
    return Row(
        key=Key(*(r[n] for n in KEY)),
        score=r["score"], max_score=r["max_score"],
        exercises={e: (float(s), float(m)) for e, (s, m) in r["exercises"].items()},
        status=r["status"], reason=r["reason"],
        committed_at=None if r["committed_at"] is None else datetime.fromisoformat(r["committed_at"]),
        graded_at=datetime.fromisoformat(r["graded_at"]),
        results=None if r["results"] is None else Results.from_dict(r["results"]),
        attempt=r["attempt"],
    )


@functools.lru_cache(maxsize=1)
def grader_version() -> str:
    """The installed gpugrade version plus a digest of what is under grader/ (every file but
    compiled bytecode: sorted paths and their bytes; 12 hex digits of a sha256): a changed grader
    may grade differently, and only a change there is one. Read once a process, as the code it
    runs was (a commit of the course repository that leaves grader/ alone, a hint's typo, is no
    new grader: keyed on the checkout's HEAD, every commit regraded a whole class)."""
    try:
        version = metadata.version("gpugrade")
    except metadata.PackageNotFoundError:
        from .. import __version__ as version
    return f"{version}+{tree_digest(Path(__file__).resolve().parents[1])}"


def tree_digest(folder: Path) -> str:
    """12 hex digits of a sha256 of every file under `folder` but compiled bytecode: sorted
    relative paths and their bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix not in (".pyc", ".pyo")):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:12]


def course_version(course_root: str | Path, exercises: list[str] | None = None) -> str:
    """A digest of what decides a grade of these `exercises` (None: all) in the course: course.toml
    (its `[course]` table and these exercises' tables, hints left out: they change no grade), and
    the grading tests and reference solutions of these exercises and of none (helpers, conftest):
    sorted paths and their bytes; the first 16 hex digits of a sha256. An edit to another exercise,
    or a hint's typo fixed, regrades nobody of a folder graded on these."""
    root = Path(course_root)
    manifest = tomllib.loads((root / "course.toml").read_text(encoding="utf-8"))  # no course.toml, no course
    known = set(manifest.get("exercises", {}))
    wanted = known if exercises is None else set(exercises)
    manifest["exercises"] = {name: _without_hints(table) for name, table in manifest.get("exercises", {}).items()
                             if name in wanted}

    def graded_here(stem: str) -> bool:
        return stem in wanted or stem not in known

    files = [*(p for p in (root / "tests" / "exercises").glob("*.py") if graded_here(p.stem.removeprefix("test_"))),
             *(p for p in (root / "solutions").glob("*.py") if graded_here(p.stem))]
    digest = hashlib.sha256()
    digest.update(json.dumps(manifest, sort_keys=True, default=str).encode())
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        data = path.read_bytes()
        name = path.relative_to(root).as_posix().encode()
        # lengths first: no two different file sets hash the same bytes
        digest.update(b"%d:%s%d:" % (len(name), name, len(data)) + data)
    return digest.hexdigest()[:16]


def _without_hints(value):
    if isinstance(value, dict):
        return {k: _without_hints(v) for k, v in value.items() if k != "hints"}
    if isinstance(value, list):
        return [_without_hints(v) for v in value]
    return value
