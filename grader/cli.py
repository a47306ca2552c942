"""The `gpugrade` command. Thin: parse, call the core, render, exit with the results' code."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from datetime import datetime
from pathlib import Path

from . import __version__
from .backends import BACKENDS, Kind, resolve
from .course import Course
from .errors import GpugradeError, UsageError
from .grading import DEFAULT_SUBMISSION_TIMEOUT_S, grade
from .judge.settings import JudgeSettings
from .report import FORMATS, render
from .report.results import ExitCode, Results
from .report.text import first_line, listed
from .sandbox import SANDBOXES, SandboxSpec


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpugrade", description="Grade numba-cuda exercises, with or without a GPU.")
    p.add_argument("--version", action="version", version=f"gpugrade {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--backend", choices=BACKENDS, default="auto",
                         help="gpu, sim (the CPU simulator) or auto (gpu when one is visible)")
        cmd.add_argument("--course", help="course folder (default: found from the current folder upwards)")
        for name in ("seed", "timeout"):
            JudgeSettings.add_cli_option(cmd, name)
        cmd.add_argument("--submission-timeout", type=float, default=DEFAULT_SUBMISSION_TIMEOUT_S,
                         help="seconds for a whole submission; tests finished by then keep their points")
        for name in ("sandbox", "docker_image", "gpus", "simulator"):
            JudgeSettings.add_cli_option(cmd, name)

    check = sub.add_parser("check", help="student self-check of your exercises/ folder")
    check.add_argument("exercise", nargs="?", help="one exercise (default: all)")
    check.add_argument("--stage", type=int, default=None, help="grade only this stage")
    check.add_argument("--hints", nargs="?", const="next", choices=["next", "all"], default=None,
                       help="show the next unseen hint of the first failing stage (or 'all' of its hints)")
    check.add_argument("-v", "--verbose", action="store_true", help="one row per test (default: one per stage)")
    check.add_argument("--watch", action="store_true",
                       help="grade again on every save of an exercise file, saying only what changed")
    common(check)

    g = sub.add_parser("grade", help="grade a submission folder")
    g.add_argument("submission", help="folder holding the exercise modules, directly or under exercises/")
    g.add_argument("exercises", nargs="*", help="restrict to these exercises")
    g.add_argument("--format", choices=FORMATS, default="table",
                   help="table (terminal), gradescope (results.json), prairielearn, junit, markdown, html, json")
    g.add_argument("--output", help="write the formatted results here instead of stdout")
    g.add_argument("-v", "--verbose", action="store_true", help="the table: one row per test (default: one per stage)")
    common(g)

    bench = sub.add_parser("bench", help="time the kernels of the performance tests (modelled on the simulator)")
    bench.add_argument("exercise", nargs="?", help="one exercise (default: all)")
    bench.add_argument("--stage", type=int, default=None, help="only this stage")
    bench.add_argument("--reference", action="store_true", help="time the reference solutions instead of exercises/")
    JudgeSettings.add_cli_option(bench, "model_gpu", "--gpu-model")
    bench.add_argument("--json", help="also write the rows as JSON to this file")
    common(bench)

    val = sub.add_parser("validate", help="references score full marks, stubs 0, known-wrong submissions what they should")
    val.add_argument("submissions", nargs="*", metavar="SUBMISSION",
                     help="only these known-wrong submissions (tests/submissions/<name>), in this order "
                          "(default: every one); the references and stubs are graded either way")
    val.add_argument("--jobs", type=int, default=None, help="submissions graded at once (default: up to 4)")
    common(val)

    rel = sub.add_parser("release", help="regenerate exercises/ (stubs) from solutions/")
    rel.add_argument("--course", help="course folder (default: found from the current folder upwards)")
    rel.add_argument("--no-counters", action="store_true",
                     help="do not re-record the reference solutions' simulator counters")
    rel.add_argument("--notebooks", action="store_true",
                     help="also write exercises/<exercise>.ipynb from each stub (jupytext, py:percent cells)")
    rel.add_argument("--force", action="store_true",
                     help="overwrite exercise files changed since they were released (a student's work)")
    rel.add_argument("--gradescope", metavar="ZIP",
                     help="also write Gradescope's autograder zip here (setup.sh, run_autograder, this grader, "
                          "the course without solutions/)")
    rel.add_argument("--gradescope-exercises", nargs="+", metavar="EXERCISE", default=None,
                     help="the zip grades only these exercises (a Gradescope assignment of one homework: its "
                          "maximum is theirs); default: all of the course's")

    def late_options(cmd: argparse.ArgumentParser, default: str = "") -> None:
        cmd.add_argument("--deadline", default=None,
                         help="late penalties from commit time (ISO 8601 with its time zone: 2026-12-01T23:59:00+01:00)"
                              + (f" {default}" if default else ""))
        cmd.add_argument("--late-per-day", type=float, default=0.0,
                         help="fraction of the score off per started day late (needs --deadline)")
        cmd.add_argument("--late-cap", type=float, default=1.0, help="at most this fraction off (needs --deadline)")

    def batch_options(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("roster", help="CSV with student_id, repo[, ref] (a folder, a git path or URL, repo@ref)")
        cmd.add_argument("--out", required=True, help="the batch folder: results store, feedback pages, grades.csv")
        cmd.add_argument("--assignment", default="",
                         help="the assignment's name in the store (default: the only one the folder holds; a new "
                              "folder's name: --out grades/hw3 is hw3)")
        cmd.add_argument("--jobs", type=int, default=2, help="submissions graded at once by the local pool")
        cmd.add_argument("--dask", default=None,
                         help="grade on Dask: local:N (a LocalCluster of N workers) or tcp://HOST:PORT (a scheduler)")
        cmd.add_argument("--deadline", default=None,
                         help="grade the last commit at or before this time (ISO 8601 with its time zone: "
                              "2026-12-01T23:59:00+01:00; committer dates: see docs/BATCH.md)")
        cmd.add_argument("--max-repo-mib", type=_positive, default=200.0, metavar="MIB",
                         help="a repository larger than this on disk is not graded (its row says so; default 200)")
        cmd.add_argument("--fetch-timeout", type=_positive, default=120.0, metavar="S",
                         help="seconds each repository's fetch may take (default 120)")
        common(cmd)

    batch_exit = ("exit status: 0 every submission graded, 1 some could not be graded (grades.csv says why), "
                  "2 usage error, 3 internal error, 130 interrupted")
    b = sub.add_parser("batch", help="grade a class from a roster: parallel, resumable, a store and grades.csv",
                       epilog=batch_exit)
    batch_options(b)
    b.add_argument("exercises", nargs="*", metavar="EXERCISE",
                   help="grade only these exercises (default: all); the batch folder keeps the selection of its "
                        "first batch, which a later batch names again or not at all")
    b.add_argument("--force", action="store_true",
                   help="grade again what the store already holds (each row replaced once its regrade is recorded)")
    b.add_argument("--keep-other-grader-grades", action="store_true",
                   help="keep a stored grade of the same commit and course made by another version of the grader "
                        "(any change under grader/ is one) rather than grade it again; said on the output, and "
                        "grades.csv's grader_version column and export say which grader made each grade")

    rg = sub.add_parser("regrade", help="grade some students of a batch again (even on a commit already graded)",
                        epilog=batch_exit)
    batch_options(rg)
    rg.add_argument("students", nargs="+", metavar="STUDENT",
                    help="student ids of the roster; an exercise's name (not a student's id) among them names the "
                         "folder's exercises, as batch does (default: the folder's)")

    ex = sub.add_parser("export", help="grades of a batch folder: CSV, Gradescope, nbgrader")
    ex.add_argument("folder", help="the batch's --out folder")
    ex.add_argument("--assignment", default="", help="the assignment (default: the only one in the store)")
    ex.add_argument("--csv", help="write one row per student here")
    ex.add_argument("--gradescope", help="write <student>/results.json under this folder")
    ex.add_argument("--nbgrader", help="an nbgrader gradebook database URL (sqlite:///gradebook.db)")
    ex.add_argument("--nbgrader-assignment", metavar="NAME",
                    help="the assignment's name in the nbgrader gradebook (default: its name in the store)")
    late_options(ex)
    ex.add_argument("--course", help="course folder (default: found from the current folder upwards)")

    fb = sub.add_parser("feedback", help="one student's latest graded result in a batch folder (answering their email)",
                        description="The student's stored grade, read from the batch folder's store (nothing is "
                                    "graded): the commit graded and when, the deadline that chose it, days late and "
                                    "the penalty an export with the same options charges, every test's score and "
                                    "message, and where their feedback page is.")
    fb.add_argument("folder", help="the batch's --out folder")
    fb.add_argument("student", help="the student's id in the roster")
    fb.add_argument("--assignment", default="", help="the assignment (default: the only one in the store)")
    fb.add_argument("--format", choices=("text", "json"), default="text")
    late_options(fb, "(default: the folder's deadline, no penalty)")

    sub.add_parser("doctor", help="what this machine offers: GPU, toolchain, docker")

    run = sub.add_parser("run", help="run a script of yours on the simulator: findings, and what each launch did",
                         description="Run SCRIPT as `python SCRIPT ARGS...` would, with its kernels on the "
                                     "simulator: a race, an out-of-bounds access or a barrier some threads miss "
                                     "stops it with the finding; then a table of its launches. Not grading.")
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    run.add_argument("--devices", type=int, default=1, help="simulated GPUs (default: 1)")
    run.add_argument("--seed", type=int, default=None,
                     help="shuffle the order threads run in with this seed (order-dependent bugs)")
    JudgeSettings.add_cli_option(run, "model_gpu", "--gpu-model")
    run.add_argument("--no-summary", action="store_true", help="no table of launches at the end")
    return p


def _positive(text: str) -> float:
    """A positive number of MiB or seconds (argparse's type: its error names the option)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _deadline(text: str | None):
    if not text:
        return None
    from .batch.roster import parse_deadline

    try:
        return parse_deadline(text)
    except ValueError as exc:
        raise UsageError(f"--deadline {exc}") from None


def _need_batch_extra() -> None:
    try:
        import distributed  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"batch grading needs the batch extra ({exc.name} is missing): "
                         f"pip install 'gpugrade[batch]'") from None


@contextlib.contextmanager
def _progress(what: str):
    """A progress bar on the terminal (stderr, gone when done) while the judge runs: yields the
    `on_test` callback of grade(), or None where stderr is not a terminal (logs, CI, pipes)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(what, total=None, last="")
        yield lambda done, total, name: progress.update(task, completed=done, total=total, last=name)


# `gpugrade batch` / `regrade` exit codes (docs/BATCH.md): 0 every submission graded (or already
# graded), 1 some could not be graded (their rows in grades.csv say why), 2 usage error, 3 internal
# error, 130 interrupted (Ctrl-C)
BATCH_NOT_GRADED = 1
BATCH_INTERRUPTED = 130


def _outcome_line(outcome) -> str:
    """One line per finished submission: id, score/max or why not, seconds."""
    sid, took = outcome.student_id, f"({outcome.seconds:.1f} s)"
    if outcome.skipped:
        return f"{sid}: already graded (commit {(outcome.commit or '')[:12]}) {took}"
    if outcome.results is not None:
        results = Results.from_dict(outcome.results)
        if results.errors:
            from .batch.run import grader_error

            return f"{sid}: not graded: {grader_error(results)} {took}"
        from .batch.run import graded_commit

        graded = graded_commit(outcome)  # (a folder's: none)
        return f"{sid}: {results.score:g}/{results.max_score:g}{', ' + graded if graded else ''} {took}"
    if outcome.kept is not None:
        score, top, commit = outcome.kept
        return (f"{sid}: FETCH FAILED, the stored grade {score:g}/{top:g} of commit {commit[:12]} stands: "
                f"{outcome.problem} {took}")
    return f"{sid}: not graded: {outcome.problem} {took}"


@contextlib.contextmanager
def _batch_progress():
    """Yields on_progress(outcome, done, total): a line per finished submission, flushed at once (a
    log file shows the batch as it goes), and on a terminal a progress bar below the lines."""
    if not sys.stdout.isatty():
        yield lambda outcome, done, total: print(f"[{done}/{total}] {_outcome_line(outcome)}", flush=True)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    failures = 0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[failed]} not graded"), TimeElapsedColumn(), TextColumn("ETA"),
               TimeRemainingColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("grading", total=None, failed=0)

        def on_progress(outcome, done: int, total: int) -> None:
            nonlocal failures
            failures += outcome.results is None and not outcome.skipped
            progress.console.print(f"[{done}/{total}] {_outcome_line(outcome)}", markup=False, highlight=False)
            progress.update(task, completed=done, total=total, failed=failures)

        yield on_progress


def _batch_options(args, course: Course, backend: Kind):
    from .batch.run import Options

    return Options(str(course.root), tuple(getattr(args, "exercises", ())), backend=str(backend), sandbox=args.sandbox,
                   docker_image=args.docker_image or "", gpus=args.gpus or "", simulator=args.simulator,
                   timeout=args.timeout, submission_timeout=args.submission_timeout,
                   deadline=_deadline(args.deadline), seed=args.seed, fetch_timeout_s=args.fetch_timeout,
                   max_repo_mib=args.max_repo_mib)


def _warn_without_compile_check() -> None:
    """A class's grades stored without the compile check lack what it finds: said before they are made."""
    from .sim.compile_check import toolchain_status

    status = toolchain_status()
    if not status.available:
        print(f"gpugrade: warning: the compile check is unavailable on this machine ({status.reason[:300]}): the "
              f"grades made here leave out what it finds (kernels numba cannot compile for a GPU, registers and "
              f"occupancy, the instructions of a kernel's loops) and may differ from a machine with it; `gpugrade "
              f"doctor` says more", file=sys.stderr)


def _batch(args, course: Course, backend: Kind) -> int:
    _need_batch_extra()
    from .batch.run import run_batch

    options = _batch_options(args, course, backend)
    # what every submission's grade() would refuse (--gpus without docker, ...), refused once, up front
    options.sandbox_spec().check(options.backend, options.simulator)
    _warn_without_compile_check()
    regrading = args.command == "regrade" or args.force
    recorded = 0  # submissions this run stored (graded or not): what an interrupt keeps
    try:
        with _batch_progress() as show, _terminate_as_interrupt():
            def on_progress(outcome, done: int, total: int) -> None:
                nonlocal recorded
                recorded += not outcome.skipped
                show(outcome, done, total)

            summary = run_batch(Path(args.roster), Path(args.out), course, options, assignment=args.assignment,
                                # regrade: the named students again, even where their commit is stored
                                jobs=args.jobs, dask=args.dask, force=regrading,
                                only=getattr(args, "students", None), on_progress=on_progress,
                                keep_other_grader=getattr(args, "keep_other_grader_grades", False),
                                on_notice=lambda text: print(f"gpugrade: {text}", file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        # the store and grades.csv hold every submission recorded before the interrupt; the ones
        # in flight were dropped (their grading was cut short: no grade)
        rest = ("the others keep the grade they had; the same command again regrades them all" if regrading
                else "the same command again skips what is stored and grades the rest")
        print(f"gpugrade: interrupted: {recorded} submission(s) of this run are recorded in "
              f"{Path(args.out) / 'store.sqlite'} and grades.csv, those being graded were dropped; {rest}",
              file=sys.stderr)
        return BATCH_INTERRUPTED
    print(f"{summary.graded} graded, {summary.skipped} already graded, {summary.failed} not graded "
          f"in {summary.seconds:.1f} s -> {Path(args.out) / 'grades.csv'}")
    if summary.kept:
        print(f"WARNING: the latest fetch failed for {len(summary.kept)} student(s) with a stored grade, which "
              f"stands (grades.csv's reason says why): {', '.join(summary.kept)}")
    return BATCH_NOT_GRADED if summary.failed else 0


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM (`kill`, a Slurm job at its walltime, a CI runner's cancel) stops the batch as Ctrl-C
    does: what was recorded stays, the temporary folders go, one line says how to go on; without
    it the process died at once with nothing said. (This process is gpugrade's own command line.)"""
    import signal

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _open_store(folder: Path):
    """The store of a batch folder (the batch extra needed): a usage error where no batch made one."""
    _need_batch_extra()
    from .batch.store import Store

    if not (folder / "store.sqlite").is_file():
        raise UsageError(f"{folder} is not a batch folder (no store.sqlite): run gpugrade batch ... --out {folder}")
    return Store(folder / "store.sqlite")


def _graded_assignment(store, folder: Path, named: str, then: str = "export") -> str:
    """The assignment of the folder an export or a lookup reads: `named`, or the only one; a usage
    error where it is not there, or where its batch graded nobody yet (`then`: what to run after)."""
    # a batch killed before its first grade has recorded its roster: its assignment is there
    held = sorted({*store.assignments(), *store.rostered()})
    assignment = named or _only_assignment(held, folder)
    if assignment not in held:  # an export of nothing would look like one of a class
        raise UsageError(f"{folder} holds no assignment {assignment!r} (it holds: "
                         f"{', '.join(held) or 'none'}); --assignment names the store's assignment"
                         + (", --nbgrader-assignment the gradebook's" if then == "export" else ""))
    if assignment not in store.assignments():
        raise UsageError(f"the batch of {folder} has graded nobody of assignment {assignment!r} yet (its roster "
                         f"has {len(store.roster(assignment) or [])} students): run gpugrade batch again with "
                         f"the same --out to grade them, then {then}")
    return assignment


def _late_policy(args, folder: Path, recorded, extensions, default=None):
    """The late policy of --deadline, --late-per-day and --late-cap (`default` the deadline where
    none is given), as every export applies it."""
    from .batch import export

    deadline = _deadline(args.deadline)
    if deadline is None and (args.late_per_day or args.late_cap != 1.0):
        # without a deadline nobody is late: the penalty would silently be nothing
        raise UsageError("--late-per-day and --late-cap need --deadline (the time from which a day late counts)")
    if deadline is not None and isinstance(recorded, datetime) and recorded != deadline:
        print(f"gpugrade: --deadline {deadline.isoformat()} is not the deadline {folder} chose commits by "
              f"({recorded.isoformat()}): days late count from --deadline", file=sys.stderr)
    try:
        return export.LatePolicy(deadline or default, args.late_per_day, args.late_cap, extensions)
    except ValueError as exc:
        raise UsageError(f"late penalty: {exc}") from None


def _feedback(args) -> int:
    from .batch.student import as_dict, as_text, folder_deadline, look_up

    folder = Path(args.folder)
    with _open_store(folder) as store:
        assignment = _graded_assignment(store, folder, args.assignment, then="gpugrade feedback again")
        recorded = folder_deadline(store, assignment)
        policy = _late_policy(args, folder, recorded, store.extensions(assignment), default=recorded)
        found = look_up(store, folder, assignment, args.student, policy, folder / "feedback")
    if args.format == "json":
        import json

        _emit(json.dumps(as_dict(found), indent=1), None)
    else:
        _emit(as_text(found), None)
    return 0


def _export(args) -> int:
    from .batch import export
    from .batch.selection import graded_on

    folder = Path(args.folder)
    with _open_store(folder) as store:
        assignment = _graded_assignment(store, folder, args.assignment)
        rows, gone = store.on_roster(assignment)
        if gone:
            print(f"gpugrade: {len(gone)} student(s) with stored grades are not on the latest batch's roster, and "
                  f"are left out: {listed(gone)}", file=sys.stderr)
        rows, unreached = export.with_unreached(rows, store.roster(assignment), assignment)
        if unreached:
            print(f"gpugrade: WARNING: {len(unreached)} student(s) of the roster have no grade yet (the batch did not "
                  f"reach them) and are exported as 0: {listed(unreached, 5)}; run gpugrade batch again with the "
                  f"same --out to finish", file=sys.stderr)
        # the exercises the folder grades (a folder stored before selections were: the course's, all)
        exercises = graded_on(store, assignment, lambda: _course(args).exercises()) or []
        recorded, extensions = store.deadline(assignment), store.extensions(assignment)
    from .batch.store import grader_version

    other = export.other_graders(rows, grader_version())
    if other:  # kept by batch --keep-other-grader-grades, or stored before this grader was installed
        print(f"gpugrade: {len(other)} student(s)' grades were made by another version of the grader than this one "
              f"({grader_version()}); the CSV's grader_version column says each: {listed(other, 10)}", file=sys.stderr)
    policy = _late_policy(args, folder, recorded, extensions)
    extended = sorted(set(extensions) & {r.key.student_id for r in rows})
    if policy.deadline is not None and extended:
        print(f"gpugrade: {len(extended)} student(s) have their own deadline in the roster, days late count from "
              f"it: {listed(extended)}", file=sys.stderr)
    if not (args.csv or args.gradescope or args.nbgrader):
        raise UsageError("say what to export: --csv FILE, --gradescope DIR or --nbgrader DB_URL")
    if args.nbgrader_assignment and not args.nbgrader:
        raise UsageError("--nbgrader-assignment names the assignment in an nbgrader gradebook: give --nbgrader DB_URL")
    if args.csv:
        export.write_csv(rows, Path(args.csv), exercises, policy)
        print(f"wrote {args.csv} ({len(rows)} students)")
    if args.gradescope:
        _, removed = export.write_gradescope(rows, Path(args.gradescope), policy)
        print(f"wrote {args.gradescope}/<student>/results.json ({len(rows)} students)"
              + (f"; removed the results of an earlier export for {len(removed)} student(s) no longer in it: "
                 f"{listed(removed, 10)}" if removed else ""))
    if args.nbgrader:
        name = args.nbgrader_assignment or assignment
        export.write_nbgrader(rows, args.nbgrader, name, policy)
        print(f"wrote {len(rows)} students' grades of {name} to {args.nbgrader}")
    return 0


def _only_assignment(names: list[str], folder: Path) -> str:
    if len(names) != 1:
        raise UsageError(f"{folder} holds {len(names)} assignments ({', '.join(names) or 'none'}): pick one "
                         f"with --assignment")
    return names[0]


def _course(args) -> Course:
    return Course(Path(args.course).resolve()) if args.course else Course.find()


def _hints(course: Course, results, everything: bool) -> str:
    from .course import hints
    from .course.manifest import find

    stage = hints.first_failing_stage(results, find(course.root))
    if stage is None:
        return "No failing stage: no hint needed."
    state = hints.HintState.load(course.root)
    kind = hints.failure_kind(results, stage)  # the hint that answers the current failure first
    shown = hints.reveal(stage, state, everything, kind)
    state.save()
    return hints.render(stage, shown, state, kind)


def _emit(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text + ("" if text.endswith("\n") else "\n"))
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line. Python before 3.12.7 leaves a `nargs="*"` positional empty once an option
    stands between it and the positional before it (`batch ROSTER --out DIR matmul`, bpo-15112):
    the names left after batch's or regrade's options are its names too, as those before them are."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    names = {"batch": "exercises", "regrade": "students"}.get(args.command)
    if extra and names and not any(e.startswith("-") for e in extra):
        setattr(args, names, [*getattr(args, names), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _gradescope_zip(course: Course, target: str | None, exercises: list[str] | None = None) -> int:
    """`release --gradescope ZIP`: once the stubs and counters are written."""
    if target:
        from .course.gradescope import write_zip

        names = write_zip(course, Path(target), exercises)
        which = f", grading {', '.join(exercises)} only" if exercises else ""
        print(f"wrote {target} ({len(names)} files{which}: upload it as the assignment's autograder; README: "
              f"Gradescope)")
    return 0


def run(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.command == "doctor":
        from .doctor import facts

        for fact in facts():
            print(f"{'ok ' if fact.ok else '-- '} {fact.name:<22} {fact.value}")
        return 0
    if args.command == "export":
        return _export(args)
    if args.command == "feedback":
        return _feedback(args)
    if args.command == "run":
        from .run_script import run as run_script

        return run_script(args.script, args.args, devices=args.devices, seed=args.seed, gpu_key=args.model_gpu,
                          summary=not args.no_summary)
    course = _course(args)
    if args.command == "release":
        from .course.choice import write_record

        if args.gradescope_exercises:  # refused before anything is written
            if not args.gradescope:
                raise UsageError("--gradescope-exercises chooses what the Gradescope zip grades: give --gradescope ZIP")
            unknown = sorted(set(args.gradescope_exercises) - set(course.exercises()))
            if unknown:
                raise UsageError(f"--gradescope-exercises: no exercise {', '.join(unknown)} in the course (it has: "
                                 f"{', '.join(course.exercises())})")
        from .course.release import refuse_to_overwrite_work, release, released_notebooks

        if not args.force:
            refuse_to_overwrite_work(course.root, args.notebooks)
        kept_in_step = released_notebooks(course.root, sorted((course.root / "exercises").glob("*.py")))
        stubs = release(course.root / "solutions", course.root / "exercises")
        paired = [s for s in stubs if args.notebooks or s in kept_in_step]
        notebooks = []
        if paired:
            from .course.notebooks import write_notebooks

            notebooks = write_notebooks(course.root / "exercises", paired, asked=args.notebooks)
        # what was released, so that grading tells an untouched stub or notebook from the student's work
        record = write_record(course.root, stubs, notebooks)
        for path in [*stubs, *notebooks, record]:
            print(f"wrote {path.relative_to(course.root)}")
        if args.no_counters:
            return _gradescope_zip(course, args.gradescope, args.gradescope_exercises)
        from .judge.recorded_reference import RECORD

        # students' copies have no solutions/: their performance tests compare with these counters,
        # so they are replaced only by those of references that earn every point
        target = course.root / RECORD
        fresh = target.with_name(target.name + ".new")
        try:
            results = grade(course.root / "solutions", backend=Kind.SIM, course=course, name="reference solutions",
                            record_reference=fresh)
            if not results.errors and results.score >= results.max_score and fresh.is_file():
                os.replace(fresh, target)
                print(f"wrote {RECORD} (reference solutions: {results.score:g}/{results.max_score:g} on the simulator)")
                return _gradescope_zip(course, args.gradescope, args.gradescope_exercises)
        finally:
            fresh.unlink(missing_ok=True)
        lost = next((t for t in results.tests if t.score < t.max_score), None)
        why = (f"; first: {lost.name}: {first_line(lost.output) or lost.status}" if lost
               else "".join(f"; {first_line(e)}" for e in results.errors[:1]))
        print(f"gpugrade release: {RECORD} left as it was: the reference solutions scored "
              f"{results.score:g}/{results.max_score:g} on the simulator{why}", file=sys.stderr)
        return results.exit_code or 1
    backend = resolve(args.backend)
    sandbox = SandboxSpec(args.sandbox, args.docker_image, args.gpus)
    if args.command in ("batch", "regrade"):
        return _batch(args, course, backend)
    if args.command == "validate":
        from .course import validate

        validation = validate.validate(course, backend=backend, seed=args.seed, jobs=args.jobs, timeout=args.timeout,
                                       sandbox=sandbox, progress=lambda line: print(line, file=sys.stderr, flush=True),
                                       only=args.submissions or None)
        _emit(validate.render(validation), None)
        return validation.exit_code
    if args.command == "check":
        exercises = [args.exercise] if args.exercise else None

        def check_now():
            with _progress("checking") as on_test:
                return grade(course.root / "exercises", exercises, backend=backend, course=course, seed=args.seed,
                             timeout=args.timeout, submission_timeout=args.submission_timeout,
                             name="your exercises/", stages=[args.stage] if args.stage else None, sandbox=sandbox,
                             simulator=args.simulator, on_test=on_test)

        if args.watch:
            from .course.watch import watch

            print("watching exercises/ (Ctrl-C to stop): grading on every save", flush=True)
            try:
                watch(course.root / "exercises", exercises or course.exercises(), check_now,
                      lambda lines: print("\n".join(lines), flush=True))
            except KeyboardInterrupt:
                return 0
            return 0
        results = check_now()
        _emit(render(results, "table", verbose=args.verbose), None)
        from .report import first_failure

        if first_failure(results):
            _emit(first_failure(results), None)
        if args.hints:
            _emit(_hints(course, results, everything=args.hints == "all"), None)
        return results.exit_code
    if args.command == "bench":
        from .report import bench as bench_report

        folder = course.root / ("solutions" if args.reference else "exercises")
        with _progress("timing") as on_test:
            results = grade(folder, [args.exercise] if args.exercise else None, backend=backend, course=course,
                            seed=args.seed, timeout=args.timeout, submission_timeout=args.submission_timeout,
                            name="reference solutions" if args.reference else "your exercises/",
                            stages=[args.stage] if args.stage else None, sandbox=sandbox, simulator=args.simulator,
                            only="perf", model_gpu=args.model_gpu, on_test=on_test)
        _emit(bench_report.table(results), None)
        if args.json:
            import json

            Path(args.json).write_text(json.dumps(bench_report.rows(results), indent=1) + "\n")
        return 0 if not results.errors else results.exit_code
    try:
        with _progress("grading") as on_test:
            results = grade(args.submission, args.exercises, backend=backend, course=course, seed=args.seed,
                            timeout=args.timeout, submission_timeout=args.submission_timeout, sandbox=sandbox,
                            simulator=args.simulator, on_test=on_test)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - a results file is always written (Gradescope: "autograder failed")
        results = Results(submission=args.submission, backend=backend, errors=[f"internal error: {exc!r}"])
    _emit(render(results, args.format, verbose=args.verbose), args.output)
    if args.output and args.format != "table":
        print(f"{args.submission}: {results.score:g}/{results.max_score:g} -> {args.output}", file=sys.stderr)
    return results.exit_code


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(argv)
    except UsageError as exc:
        print(f"gpugrade: {exc}", file=sys.stderr)
        code = ExitCode.USAGE
    except GpugradeError as exc:
        print(f"gpugrade: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = ExitCode.INTERNAL
    sys.exit(code)
