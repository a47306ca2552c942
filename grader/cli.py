"""The `gpugrade` command. Thin: parse, call the core, render, exit with the results' code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .backends import BACKENDS, Kind, resolve
from .course import Course
from .errors import GpugradeError, UsageError
from .grading import DEFAULT_SUBMISSION_TIMEOUT_S, grade
from .judge.settings import JudgeSettings
from .report import FORMATS, render
from .report.results import ExitCode, Results
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
    common(check)

    g = sub.add_parser("grade", help="grade a submission folder")
    g.add_argument("submission", help="folder holding the exercise modules, directly or under exercises/")
    g.add_argument("exercises", nargs="*", help="restrict to these exercises")
    g.add_argument("--format", choices=FORMATS, default="table",
                   help="table (terminal), gradescope (results.json), prairielearn, junit, markdown, html, json")
    g.add_argument("--output", help="write the formatted results here instead of stdout")
    common(g)

    bench = sub.add_parser("bench", help="time the kernels of the performance tests (modelled on the simulator)")
    bench.add_argument("exercise", nargs="?", help="one exercise (default: all)")
    bench.add_argument("--stage", type=int, default=None, help="only this stage")
    bench.add_argument("--reference", action="store_true", help="time the reference solutions instead of exercises/")
    JudgeSettings.add_cli_option(bench, "model_gpu")
    bench.add_argument("--json", help="also write the rows as JSON to this file")
    common(bench)

    val = sub.add_parser("validate", help="references score full marks, stubs 0, known-wrong submissions what they should")
    val.add_argument("--jobs", type=int, default=None, help="submissions graded at once (default: up to 4)")
    common(val)

    rel = sub.add_parser("release", help="regenerate exercises/ (stubs) from solutions/")
    rel.add_argument("--course", help="course folder (default: found from the current folder upwards)")
    rel.add_argument("--no-counters", action="store_true",
                     help="do not re-record the reference solutions' simulator counters")

    sub.add_parser("doctor", help="what this machine offers: GPU, toolchain, docker")
    return p


def _course(args) -> Course:
    return Course(Path(args.course).resolve()) if args.course else Course.find()


def _hints(course: Course, results, everything: bool) -> str:
    from .course import hints
    from .course.manifest import find

    stage = hints.first_failing_stage(results, find(course.root))
    if stage is None:
        return "No failing stage: no hint needed."
    state = hints.HintState.load(course.root)
    shown = hints.reveal(stage, state, everything)
    state.save()
    return hints.render(stage, shown)


def _emit(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text + ("" if text.endswith("\n") else "\n"))
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from .doctor import facts

        for fact in facts():
            print(f"{'ok ' if fact.ok else '-- '} {fact.name:<22} {fact.value}")
        return 0
    course = _course(args)
    if args.command == "release":
        from .course.release import release

        for path in release(course.root / "solutions", course.root / "exercises"):
            print(f"wrote {path.relative_to(course.root)}")
        if args.no_counters:
            return 0
        from .judge.recorded_reference import RECORD

        # students' copies have no solutions/: their performance tests compare with these counters
        results = grade(course.root / "solutions", backend=Kind.SIM, course=course, name="reference solutions",
                        record_reference=course.root / RECORD)
        print(f"wrote {RECORD} (reference solutions: {results.score:g}/{results.max_score:g} on the simulator)")
        return 0 if results.exit_code == 0 else results.exit_code
    backend = resolve(args.backend)
    sandbox = SandboxSpec(args.sandbox, args.docker_image, args.gpus)
    if args.command == "validate":
        from .course import validate

        validation = validate.validate(course, backend=backend, seed=args.seed, jobs=args.jobs, timeout=args.timeout,
                                       sandbox=sandbox)
        _emit(validate.render(validation), None)
        return validation.exit_code
    if args.command == "check":
        exercises = [args.exercise] if args.exercise else None
        results = grade(course.root / "exercises", exercises, backend=backend, course=course, seed=args.seed,
                        timeout=args.timeout, submission_timeout=args.submission_timeout, name="your exercises/",
                        stages=[args.stage] if args.stage else None, sandbox=sandbox, simulator=args.simulator)
        _emit(render(results, "table"), None)
        from .report import first_failure

        if first_failure(results):
            _emit(first_failure(results), None)
        if args.hints:
            _emit(_hints(course, results, everything=args.hints == "all"), None)
        return results.exit_code
    if args.command == "bench":
        from .report import bench as bench_report

        folder = course.root / ("solutions" if args.reference else "exercises")
        results = grade(folder, [args.exercise] if args.exercise else None, backend=backend, course=course,
                        seed=args.seed, timeout=args.timeout, submission_timeout=args.submission_timeout,
                        name="reference solutions" if args.reference else "your exercises/",
                        stages=[args.stage] if args.stage else None, sandbox=sandbox, simulator=args.simulator,
                        only="perf", model_gpu=args.model_gpu)
        _emit(bench_report.table(results), None)
        if args.json:
            import json

            Path(args.json).write_text(json.dumps(bench_report.rows(results), indent=1) + "\n")
        return 0 if not results.errors else results.exit_code
    try:
        results = grade(args.submission, args.exercises, backend=backend, course=course, seed=args.seed,
                        timeout=args.timeout, submission_timeout=args.submission_timeout, sandbox=sandbox,
                        simulator=args.simulator)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - a results file is always written (Gradescope: "autograder failed")
        results = Results(submission=args.submission, backend=backend, errors=[f"internal error: {exc!r}"])
    _emit(render(results, args.format), args.output)
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
