"""`gpugrade batch`: a whole class graded, in parallel, resumable after any crash.

Each roster entry is one job: fetch the submission (grader.batch.submissions: only the files the
course names, no hook or filter of the student's repository runs), then grade it (grading.grade:
the judge in a child process, student code in its sandboxes). Jobs run on a local pool of
`--jobs` workers, or on Dask (`--dask local:N` starts a LocalCluster of N single-threaded workers;
`--dask tcp://host:port` uses a running scheduler: workers started by dask-jobqueue on a Slurm
cluster, docs/BATCH.md). Jobs return plain data; only this process writes the results store
(grader.batch.store), one transaction per submission, then the student's feedback pages and a
fresh grades.csv. A kill -9 at any moment loses at most the jobs in flight: the same command
again skips every submission the store already holds for the same (student, assignment, commit,
grader version, course version), so nothing recorded is graded twice.

On a GPU machine the timing jobs must not share a GPU: with Dask each job asks for the resource
`GPU=1` when the backend is gpu (workers started with `--resources GPU=1` each), so at most one
runs per GPU; the local pool runs one job at a time on the gpu backend for the same reason.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Callable

from ..course import Course
from ..errors import UsageError
from ..report.results import Results
from ..report.text import first_line, listed
from .roster import Entry, read_roster

GRADES_CSV = "grades.csv"
SUMMARY = "summary.html"
STORE_FILE = "store.sqlite"
FEEDBACK = "feedback"
# the feedback pages of students no longer on the roster (a typo'd id corrected, a student who
# dropped): beside feedback/, never in it, so a folder handed out or uploaded whole holds no stale page
OFF_ROSTER = "feedback-off-roster"


@dataclass(frozen=True)
class Options:
    """What every job needs to grade one submission (plain data: it travels to Dask workers)."""

    course_root: str
    exercises: tuple[str, ...]    # those named (none: all); run_batch sets the batch folder's selection
    backend: str = "sim"
    sandbox: str = "process"
    docker_image: str = ""
    gpus: str = ""                # --gpus: the docker sandbox's GPUs
    simulator: str = "device"     # --simulator: the simulated GPU in a device process, or inline
    timeout: float | None = None
    submission_timeout: float = 1800.0
    deadline: datetime | None = None
    seed: str = ""
    # a folder of this machine the batch's gradings share the reference's counters in
    # (grading.grade's shared_reference; run_batch makes it for a run on this machine)
    shared_reference: str = ""
    # each fetch's bounds (--fetch-timeout, --max-repo-mib: a course whose repositories carry
    # datasets or build outputs needs more than the defaults)
    fetch_timeout_s: float = 120.0
    max_repo_mib: float = 200.0

    def fetch_limits(self):
        from .submissions import MiB, FetchLimits

        return FetchLimits(timeout_s=self.fetch_timeout_s, max_repo_bytes=int(self.max_repo_mib * MiB))

    def sandbox_spec(self):
        """The sandbox every submission is graded in (a SandboxSpec)."""
        from ..sandbox import SandboxSpec

        return SandboxSpec(self.sandbox, self.docker_image or SandboxSpec().docker_image, self.gpus)


@dataclass
class Outcome:
    """One job's result, as plain data."""

    student_id: str
    commit: str | None = None
    committed_at: datetime | None = None
    results: dict | None = None  # Results.to_dict()
    problem: str = ""            # why it could not be graded (a clear reason, the student's row says it)
    skipped: bool = False        # already in the store for the same key
    seconds: float = 0.0
    # nothing could be fetched, and the store's graded row stays the student's grade:
    # (score, max, commit) of that row (set when recorded)
    kept: tuple[float, float, str] | None = None
    later: int = 0                      # commits after the graded one on the ref, left out by the deadline
    deadline: datetime | None = None    # the deadline that chose a git commit (the student's own or the folder's)


def graded_commit(outcome: Outcome, *, dated: bool = False) -> str:
    """Which commit a git submission's grade is of: "commit <12 hex>", and where a deadline chose one
    older than the ref's newest, that and how many later commits were not graded (`dated`: the
    deadline named, as the student's feedback says it); "" for a folder, which has no commit to name."""
    if outcome.committed_at is None or not outcome.commit:
        return ""
    said = []
    if outcome.later or (dated and outcome.deadline is not None):
        said.append("the last before the deadline" + (f" {outcome.deadline.isoformat()}" if dated else ""))
    if outcome.later:
        said.append(f"{outcome.later} later commit{'s' if outcome.later != 1 else ''} not graded")
    return f"commit {outcome.commit[:12]}" + (f" ({'; '.join(said)})" if said else "")


def grade_entry(entry: Entry, options: Options, graded: frozenset[tuple[str, str]]) -> Outcome:
    """Fetch and grade one roster entry (runs in a pool thread or on a Dask worker). `graded`:
    the (student, commit) pairs the store already holds for this grader and course version."""
    from ..grading import grade
    from .submissions import fetch

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"gpugrade-batch-{entry.student_id}-"))
    try:
        deadline = entry.deadline or options.deadline  # an extension in the roster, or the folder's
        fetched = fetch(entry, list(options.exercises), work / "submission", limits=options.fetch_limits(),
                        deadline=deadline)
        outcome = Outcome(entry.student_id, fetched.commit, fetched.committed_at, later=fetched.later,
                          deadline=deadline if fetched.committed_at is not None else None)
        if fetched.problem:
            outcome.problem = fetched.problem
        elif (entry.student_id, fetched.commit or "") in graded:
            outcome.skipped = True
        else:
            course = Course(Path(options.course_root))
            results = grade(fetched.folder, list(options.exercises), backend=options.backend, course=course,
                            seed=options.seed, timeout=options.timeout, name=entry.student_id,
                            sandbox=options.sandbox_spec(),
                            submission_timeout=options.submission_timeout, simulator=options.simulator,
                            shared_reference=options.shared_reference or None)
            outcome.results = results.to_dict()  # a missing exercise file scores 0 there, with its reason
        outcome.seconds = time.monotonic() - started
        return outcome
    except Exception as exc:  # noqa: BLE001 - one submission's failure is its row's reason, never the batch's
        return Outcome(entry.student_id, problem=f"the grader failed on this submission: {exc!r}",
                       seconds=time.monotonic() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Summary:
    graded: int = 0
    skipped: int = 0
    failed: int = 0   # could not be graded (fetch problems, grader failures)
    kept: list[str] = field(default_factory=list)  # of those, whose stored grade stands (nothing was fetched)
    seconds: float = 0.0


def grader_error(results: Results) -> str:
    """A grade's grader errors, as a row's reason: the first one's first line."""
    return f"grader error (graded again on the next run): {first_line(results.errors[0]) or 'unknown'}"[:500]


class Batch:
    """One batch folder: its store, feedback pages and grades.csv, for one roster and assignment,
    graded on the folder's selection of exercises (grader.batch.selection; all until chosen)."""

    def __init__(self, out: Path, course: Course, assignment: str, legacy_default: str = ""):
        """`assignment`: its name in the store; none given, the only one the store holds, else the
        folder's name (`--out grades/hw3` is "hw3"), or for a folder holding several,
        `legacy_default` where it is one of them (batches before named it after the roster)."""
        from .selection import assignment_name
        from .store import ASSIGNMENT_LENGTH, Store, grader_version

        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_folder(self.out)
        try:
            (self.out / FEEDBACK).mkdir(exist_ok=True)
            self.store = Store(self.out / STORE_FILE)
        except BaseException:
            self._lock.close()
            raise
        self.course = course
        try:
            self.assignment = assignment or assignment_name(
                self.store, self.out.resolve().name[:ASSIGNMENT_LENGTH], legacy_default, self.out)
        except BaseException:
            self.close()
            raise
        self.grader_version = grader_version()
        self.exercises = course.exercises()
        self.course_version = ""  # of the exercises graded: select() settles both

    def select(self, named: list[str], on_notice: Callable[[str], None] | None = None) -> list[str]:
        """Grade on the folder's selection of exercises, recorded now by its first batch (`named`,
        none meaning all); naming others than it holds is a usage error, with nothing stored, once a
        grade is stored on them (grader.batch.selection)."""
        from .selection import for_batch
        from .store import course_version

        self.exercises = for_batch(self.store, self.assignment, named, self.course, self.out, on_notice)
        self.course_version = course_version(self.course.root, self.exercises)  # of these exercises only
        return self.exercises

    def close(self) -> None:
        self.store.close()
        self._lock.close()  # (closing the file releases its lock)

    def is_new(self) -> bool:
        """No batch graded this assignment in this folder yet."""
        return self.assignment not in self.store.assignments() and self.store.selection(self.assignment) is None

    def choose_deadline(self, given: datetime | None, new: bool,
                        on_notice: Callable[[str], None] | None = None) -> datetime | None:
        """The deadline commits are chosen by: the folder's, recorded by its first batch (`new`),
        which `given` must match once a grade is stored (grader.batch.selection)."""
        from .selection import deadline_for_batch

        return deadline_for_batch(self.store, self.assignment, given, self.out, new, on_notice)

    def own_deadlines(self, entries: list[Entry]) -> tuple[list[Entry], dict[str, datetime]]:
        """Record the extensions the roster gives (and takes back: `none`), for choosing commits and
        the exports' late penalty; an entry whose deadline cell is empty keeps the one recorded by an
        earlier roster. Returns the entries, each with its own deadline, and those kept (id -> it)."""
        self.store.record_extensions(self.assignment, {e.student_id: e.deadline for e in entries
                                                       if e.deadline is not None or e.no_extension})
        recorded = self.store.extensions(self.assignment)
        kept = {e.student_id: recorded[e.student_id] for e in entries
                if e.deadline is None and e.student_id in recorded}
        return [replace(e, deadline=kept.get(e.student_id, e.deadline)) for e in entries], kept

    def key(self, student_id: str, commit: str):
        from .store import Key

        return Key(student_id, self.assignment, commit or "", self.grader_version, self.course_version)

    def graded(self, entries: list[Entry], keep_other_grader: bool = False) -> frozenset[tuple[str, str]]:
        """(student, commit) of this assignment already in the store for this grader and course
        (`keep_other_grader`: for this course, whichever grader version made the grade)."""
        return frozenset((row.key.student_id, row.key.commit) for row in self.store.latest(self.assignment)
                         if (keep_other_grader or row.key.grader_version == self.grader_version)
                         and row.key.course_version == self.course_version and row.status == "graded")

    def changed_since_graded(self, entries: list[Entry], keep_other_grader: bool = False) -> int:
        """Students of `entries` whose stored grade another grader (unless `keep_other_grader`) or
        course version made: the batch grades them again (a new key), which a course edit should not
        do unannounced."""
        ids = {e.student_id for e in entries}
        return sum(1 for row in self.store.latest(self.assignment) if row.key.student_id in ids
                   and row.status == "graded" and (row.key.course_version != self.course_version
                                                   or not keep_other_grader
                                                   and row.key.grader_version != self.grader_version))

    def kept_of_other_grader(self, entries: list[Entry]) -> list[str]:
        """`student (grader version)` of each student of `entries` whose stored grade, of this course,
        another version of the grader made: what --keep-other-grader-grades keeps."""
        from .export import other_graders

        ids = {e.student_id for e in entries}
        return other_graders((row for row in self.store.latest(self.assignment)
                              if row.key.student_id in ids and row.key.course_version == self.course_version),
                             self.grader_version)

    def record(self, outcome: Outcome) -> None:
        """Store one job's outcome (one transaction), then its feedback pages."""
        if outcome.skipped:
            # fetched again, and the same commit: a fetch failure stored since is history now
            self.store.forget_fetch_failures(self.assignment, outcome.student_id)
            return
        key = self.key(outcome.student_id, outcome.commit or "")
        if outcome.results is None:
            self.store.put(key, None, status="error", reason=outcome.problem, committed_at=outcome.committed_at)
            [row] = self.store.latest(self.assignment, [outcome.student_id])
            if row.latest_failure:
                # nothing was fetched (a network hiccup, a moved repository): the stored row and its
                # feedback pages stand, the failure is recorded beside them and said loudly
                if row.status == "graded":
                    outcome.kept = (row.score, row.max_score, row.key.commit)
                return
            self._pages(outcome, None)
            return
        results = Results.from_dict(outcome.results)
        if results.errors:
            # the grader failed (its device process did not start, a grading test would not load):
            # no grade of the student's; kept as an error row, so the next run grades it again
            self.store.put(key, results, status="error", reason=grader_error(results),
                           committed_at=outcome.committed_at)
        else:
            self.store.put(key, results, status="graded", committed_at=outcome.committed_at)
        self._pages(outcome, results)

    def _pages(self, outcome: Outcome, results: Results | None) -> None:
        """The student's feedback pages; below their title, the commit graded (and the deadline that
        chose it), so a student can tell which push the grade is of."""
        from ..report import render

        student_id, folder = outcome.student_id, self.out / FEEDBACK
        graded = graded_commit(outcome, dated=True)
        line = f"Graded: {graded}." if graded else ""
        if results is None:
            _write(folder / f"{student_id}.md", f"# {student_id}\n\n" + (f"{line}\n\n" if line else "")
                   + f"Not graded: {outcome.problem}\n")
            _write(folder / f"{student_id}.html", f"<!doctype html><meta charset='utf-8'><title>{_esc(student_id)}"
                                                   f"</title><h1>{_esc(student_id)}</h1>"
                                                   + (f"<p>{_esc(line)}</p>" if line else "")
                                                   + f"<p>Not graded: {_esc(outcome.problem)}</p>\n")
            return
        markdown, page = render(results, "markdown"), render(results, "html")
        if line:
            title, rest = markdown.split("\n", 1)
            markdown = f"{title}\n\n{line}\n{rest}"
            page = page.replace("</h1>", f"</h1><p>{_esc(line)}</p>", 1)
        _write(folder / f"{student_id}.md", markdown)
        _write(folder / f"{student_id}.html", page)

    def write_grades(self) -> Path:
        """grades.csv from the store (atomically replaced: readers never see half a file)."""
        from .export import with_unreached, write_csv

        path = self.out / GRADES_CSV
        # a line per student of the roster: one the batch has not reached yet (or never, killed) too
        rows = with_unreached(self.store.on_roster(self.assignment)[0], self.store.roster(self.assignment),
                              self.assignment)[0]
        write_csv(rows, path, self.exercises)
        return path

    def write_summary(self) -> Path:
        """summary.html: the class's score distributions and most common failures."""
        from .summary import summary_page

        path = self.out / SUMMARY
        _write(path, summary_page(self.store.on_roster(self.assignment)[0], self.exercises,
                                  f"{self.assignment}: class summary"))
        return path


def run_batch(roster: Path, out: Path, course: Course, options: Options, *, assignment: str = "",
              jobs: int = 1, dask: str | None = None, force: bool = False, only: list[str] | None = None,
              keep_other_grader: bool = False,
              on_progress: Callable[[Outcome, int, int], None] | None = None,
              on_notice: Callable[[str], None] | None = None) -> Summary:
    """Grade every roster entry not yet graded on the folder's exercises (`options.exercises` where
    its first batch, else the recorded ones, which those named must be); the store, pages and
    grades.csv are in `out`. `force`: grade again what is stored (each row replaced once its regrade
    is recorded); `only`: just these students (`gpugrade regrade`); `keep_other_grader`: a stored grade of
    the same commit and course made by another version of the grader counts as graded (said)."""
    if keep_other_grader and (force or only):
        raise UsageError("--keep-other-grader-grades keeps stored grades: it goes with neither --force nor regrade")
    entries = read_roster(roster)
    everyone = [e.student_id for e in entries]  # (a regrade grades some of them)
    if only:
        only, named = regrade_names(only, entries, course)
        options = replace(options, exercises=(*options.exercises, *named))
        unknown = sorted(set(only) - {e.student_id for e in entries})
        if unknown:
            raise UsageError(f"not in the roster {roster} (nor exercises of the course: "
                             f"{', '.join(course.exercises())}): {', '.join(unknown)}")
        if not only:  # never the whole class by omission
            raise UsageError("name the students to regrade (student ids of the roster)")
        entries = [e for e in entries if e.student_id in set(only)]
    from .store import ASSIGNMENT_LENGTH

    if only and not (Path(out) / STORE_FILE).is_file():
        raise UsageError(f"{out} is not a batch folder (no {STORE_FILE}): regrade grades students of a folder a batch "
                         f"graded (gpugrade batch {roster} --out {out} first; is --out misspelt?)")
    if len(assignment) > ASSIGNMENT_LENGTH:  # refused now, not by a server database at the first row
        raise UsageError(f"the assignment name {assignment[:20]!r}... is {len(assignment)} characters long, at "
                         f"most {ASSIGNMENT_LENGTH}")
    batch = Batch(out, course, assignment, legacy_default=Path(roster).stem)
    try:
        new = batch.is_new()
        if only and new:
            raise UsageError(f"{out} holds no grades of assignment {batch.assignment!r} (it holds: "
                             f"{', '.join(batch.store.assignments()) or 'none'}): regrade grades students a batch "
                             f"graded; name the assignment with --assignment")
        options = replace(options, exercises=tuple(batch.select(list(options.exercises), on_notice)),
                          deadline=batch.choose_deadline(options.deadline, new, on_notice))
    except BaseException:
        batch.close()
        raise
    if not only:  # a batch's roster is the class (a regrade's may be a list of some students)
        batch.store.record_roster(batch.assignment, everyone)
        moved, back = set_aside_pages(batch.out / FEEDBACK, batch.out / OFF_ROSTER, everyone)
        if moved and on_notice is not None:
            on_notice(f"moved the feedback pages of {len(moved)} student(s) not on the roster {roster} from "
                      f"{batch.out / FEEDBACK} to {batch.out / OFF_ROSTER} (not to be handed out): {listed(moved)}")
        if back and on_notice is not None:
            on_notice(f"moved the feedback pages of {len(back)} student(s) on the roster again back into "
                      f"{batch.out / FEEDBACK}: {listed(back)}")
    entries, kept = batch.own_deadlines(entries)
    if kept and on_notice is not None:
        # an extension this roster does not show still chooses their commit: said, never a surprise
        on_notice(f"{len(kept)} student(s) keep their extension recorded by an earlier roster: "
                  f"{listed([f'{sid} ({when.isoformat()})' for sid, when in kept.items()])}; write "
                  f"`none` in the roster's deadline column to take one back")
    if on_notice is not None:
        gone = batch.store.on_roster(batch.assignment)[1]
        if gone:
            on_notice(f"{len(gone)} student(s) with stored grades are not on the roster {roster}, and are left out of "
                      f"grades.csv, the summary and exports (their rows stay in the store): "
                      f"{listed(gone)}")
    # `force`: nothing counts as graded; each stored row is replaced only when its regrade is
    # recorded (put updates in place), so a crash midway loses only the submissions in flight
    graded = frozenset() if force else batch.graded(entries, keep_other_grader)
    if not force and on_notice is not None:
        changed = batch.changed_since_graded(entries, keep_other_grader)
        if changed:
            on_notice(f"{changed} student(s)' stored grades were made by another version of the "
                      f"{'' if keep_other_grader else 'grader or of this '}folder's exercises (their tests, solutions "
                      f"or course.toml): graded again now")
        kept_other = batch.kept_of_other_grader(entries) if keep_other_grader else []
        if kept_other:
            on_notice(f"{len(kept_other)} student(s) keep grades made by another version of the grader than this one "
                      f"({batch.grader_version}), as --keep-other-grader-grades asks (grades.csv's grader_version "
                      f"column and every export say so): {listed(kept_other)}")
    summary = Summary()
    started = time.monotonic()
    done = 0

    def finished(outcome: Outcome) -> None:
        nonlocal done
        batch.record(outcome)
        done += 1
        if outcome.skipped:
            summary.skipped += 1
        elif outcome.results is None or outcome.results.get("errors"):
            summary.failed += 1
            if outcome.kept is not None:
                summary.kept.append(outcome.student_id)
        else:
            summary.graded += 1
        batch.write_grades()
        if on_progress is not None:
            on_progress(outcome, done, len(entries))

    # the reference solutions' counters, run once for the class rather than once per student (on
    # this machine: a scheduler elsewhere may place jobs on other hosts, which grade as before)
    shared = tempfile.TemporaryDirectory(prefix="gpugrade-batch-reference-") if not dask or _is_local(dask) else None
    if shared is not None:
        options = replace(options, shared_reference=shared.name)
    try:
        if dask:
            _on_dask(dask, entries, options, graded, finished, jobs)
        else:
            _on_pool(entries, options, graded, finished, 1 if options.backend == "gpu" else max(1, jobs))
        batch.write_grades()
        batch.write_summary()
        summary.seconds = time.monotonic() - started
    except KeyboardInterrupt:
        # Ctrl-C: nothing more is recorded (a grading cut short by it is no grade); grades.csv is
        # written again from the store, whatever moment the interrupt came at
        batch.write_grades()
        raise
    finally:
        batch.close()
        if shared is not None:
            shared.cleanup()
    return summary


PAGE_SUFFIXES = (".html", ".md")


def set_aside_pages(feedback: Path, aside: Path, roster: list[str]) -> tuple[list[str], list[str]]:
    """Move the feedback pages in `feedback` of students not on `roster` into `aside`, and those in
    `aside` of students on it again (whose stored row the batch skips: no page would be written)
    back where `feedback` has none. Returns the ids moved aside and those moved back."""
    on = set(roster)

    def pages(folder: Path) -> dict[str, list[Path]]:
        found: dict[str, list[Path]] = {}
        for path in sorted(folder.glob("*")) if folder.is_dir() else ():
            sid = next((path.name[:-len(s)] for s in PAGE_SUFFIXES if path.name.endswith(s)), "")
            if sid and path.is_file():
                found.setdefault(sid, []).append(path)
        return found

    moved = {sid: paths for sid, paths in pages(feedback).items() if sid not in on}
    back = {sid: paths for sid, paths in pages(aside).items()
            if sid in on and not any((feedback / p.name).exists() for p in paths)}
    for target, chosen in ((aside, moved), (feedback, back)):
        for path in (p for paths in chosen.values() for p in paths):
            target.mkdir(exist_ok=True)
            os.replace(path, target / path.name)  # a page set aside before is replaced by the newer
    return sorted(moved), sorted(back)


def regrade_names(names: list[str], entries: list[Entry], course: Course) -> tuple[list[str], list[str]]:
    """`gpugrade regrade`'s names as (students, exercises): a roster's student id is a student's,
    whatever it is called; another name that is an exercise of the course is an exercise."""
    ids = {e.student_id for e in entries}
    exercises = [n for n in names if n not in ids and n in course.exercises()]
    return [n for n in names if n not in exercises], exercises


def _on_pool(entries, options, graded, finished, jobs: int) -> None:
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="gpugrade-batch") as pool:
        try:
            pending: set[Future] = {pool.submit(grade_entry, e, options, graded) for e in entries}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    finished(future.result())
        except BaseException:
            # Ctrl-C: start no queued submission (leaving the pool would wait for all of them), and
            # stop those grading now (leaving the pool waits for them: each would run to its end)
            from ..grading import stop_judges

            pool.shutdown(wait=False, cancel_futures=True)
            stop_judges()
            raise


def _is_local(address: str) -> bool:
    """`--dask local[:N]`: a LocalCluster on this machine."""
    return address.startswith("local:") or address == "local"


def _on_dask(address: str, entries, options, graded, finished, jobs: int) -> None:
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if _is_local(address):
        workers = int(address.split(":", 1)[1]) if ":" in address else max(1, jobs)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               resources={"GPU": 1} if options.backend == "gpu" else None)
        client = Client(cluster)
    else:
        client = Client(address)
    try:
        resources = {"GPU": 1} if options.backend == "gpu" else None
        futures = [client.submit(grade_entry, e, options, graded, key=f"grade-{e.student_id}-{os.getpid()}",
                                 resources=resources, pure=False) for e in entries]
        for future in as_completed(futures):
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died: that submission's reason
                index = futures.index(future)
                outcome = Outcome(entries[index].student_id, problem=f"the Dask worker failed: {exc!r}")
            finished(outcome)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


LOCK_FILE = ".batch.lock"


def _lock_folder(out: Path):
    """An exclusive lock on the batch folder for this process's batch or regrade (released when the
    returned file closes, or the process ends, however): two at once would grade every submission
    twice and race on grades.csv. A usage error naming the holder where another has it."""
    import fcntl

    lock = open(out / LOCK_FILE, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise UsageError(f"another batch or regrade is grading into {out} ({holder}): wait for it to end, or stop "
                         f"it (what it recorded stays; the same command again goes on from there)") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}, since {datetime.now().astimezone().isoformat(timespec='seconds')}\n")
    lock.flush()
    return lock


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _esc(text: str) -> str:
    import html

    return html.escape(text)


__all__ = ["Batch", "Options", "Outcome", "Summary", "grade_entry", "graded_commit", "run_batch"]
