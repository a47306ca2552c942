"""grade(): one submission, graded by the pytest judge in a child process. Pure core: no printing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from .backends import Kind
from .course import Course, graded_files, make_workspace
from .course.cell_lines import CellLines, retell
from .judge.settings import JudgeSettings
from .report.results import NOT_RUN, Results
from .sandbox import SandboxSpec

# Wall-clock limit of a whole submission: the tests done by then keep their points.
DEFAULT_SUBMISSION_TIMEOUT_S = 1800.0
# the judges grading now, in this process's threads (a batch's pool): `stop_judges` stops them
_judges: set[subprocess.Popen] = set()
_judges_lock = threading.Lock()


def stop_judges() -> None:
    """Ctrl-C for every judge grading now: each stops, closes its runners and writes what it has,
    and its grade() returns at once. A batch told to stop (Ctrl-C, SIGTERM at a Slurm job's
    walltime) waited out each in-flight submission's grading first, then dropped it."""
    with _judges_lock:
        running = list(_judges)
    for judge in running:
        try:
            judge.send_signal(signal.SIGINT)
        except (ProcessLookupError, OSError):
            pass


def grade(submission: str | os.PathLike, exercises: list[str] | None = None, *, backend: str = "sim",
          course: Course | None = None, seed: str = "", timeout: float | None = None,
          name: str | None = None, stages: list[int] | None = None, sandbox: SandboxSpec = SandboxSpec(),
          record_reference: str | os.PathLike | None = None, shared_reference: str | os.PathLike | None = None,
          submission_timeout: float = DEFAULT_SUBMISSION_TIMEOUT_S, simulator: str = "device",
          only: str = "", model_gpu: str = "", on_test: Callable[[int, int, str], None] | None = None) -> Results:
    """Grade the exercise modules found in `submission` against the course's grading tests.
    `on_test(done, total, name)`: called (from another thread) as tests finish, for a progress bar.
    `shared_reference`: a folder the gradings of one run share the reference solutions' counters
    in (judge.recorded_reference.SharedReference: the reference runs once per call, not per grade)."""
    course = course or Course.find()
    sandbox.check(backend, simulator)
    chosen = course.select(exercises)
    test_files = [str(course.test_file(e)) for e in chosen]
    if stages:  # a stage no chosen exercise has selects no test: say so, not "the judge exited with code 5"
        from .course.manifest import find

        manifest = find(course.root)
        for number in stages:
            if not any(1 <= number <= len(manifest.exercise(e).stages) for e in chosen):
                manifest.exercise(chosen[0]).stage(number)  # CourseError: "has stages 1..N, not K"
    # one rule for which of an exercise's .py and .ipynb is graded (grader.course.choice)
    files = graded_files(submission, chosen, course.root)
    modules = {name: choice.path for name, choice in files.items()}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpugrade-") as tmp:
        workspace = Path(tmp) / "workspace"
        left_out = make_workspace(modules, workspace, course.allowed_imports())
        private = Path(tmp) / "judge"  # the results file: never readable by the runner
        private.mkdir(mode=0o700)
        results_path = private / "results.json"
        settings = JudgeSettings(
            workspace=str(workspace), backend=backend, results=str(results_path), submission=name or str(submission),
            seed=seed, stages=",".join(str(s) for s in stages or ()), simulator=simulator, only=only,
            model_gpu=model_gpu,
            # `NUMBA_ENABLE_CUDASIM=1 gpugrade ... --backend gpu`: numba's stock simulator stands in for
            # the GPU in the runners (the judge itself never runs numba's simulator)
            stock_simulator=backend == Kind.GPU and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
            # each exercise gets its share of the submission's time: one cannot starve the others
            exercise_budget=submission_timeout / max(1, len(chosen)),
            record_reference=str(record_reference or ""), shared_reference=str(shared_reference or ""), sandbox=sandbox.name, docker_image=sandbox.docker_image,
            gpus=sandbox.gpus, **({"timeout": float(timeout)} if timeout else {}))
        # -I as the runners start: the judge imports the grader they import, never a copy of it in
        # the course's folder (its cwd), which would start runners of another grader
        argv = [sys.executable, "-I", "-m", "pytest", *test_files, "-p", "grader.judge.plugin", "-p", "no:cacheprovider",
                "-q", "--no-header", "-o", "addopts=", "--rootdir", str(course.root), *settings.argv()]
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        judge = subprocess.Popen(argv, cwd=course.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        with _judges_lock:
            _judges.add(judge)
        timed_out = False
        watch = _watch_progress(results_path, judge, on_test) if on_test else None
        try:
            output, _ = judge.communicate(timeout=submission_timeout)
        except subprocess.TimeoutExpired:
            # Ctrl-C for pytest: it stops, closes the runners and writes what it has; then force.
            timed_out = True
            judge.send_signal(signal.SIGINT)
            try:
                output, _ = judge.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                judge.kill()
                output, _ = judge.communicate()
        finally:
            with _judges_lock:
                _judges.discard(judge)
            if watch is not None:
                watch.join()
        if results_path.is_file():
            results = Results.load(str(results_path))
        else:
            results = Results(submission=name or str(submission), backend=backend)
            results.errors.append(f"the judge wrote no results (pytest exit {judge.returncode}):\n{output[-4000:]}")
        # a notebook's messages in its cells' lines, not the module's the student never sees
        retell(results, {name: CellLines.of(f"{name}.py", choice.path.name, (workspace / f"{name}.py").read_text())
                         for name, choice in files.items() if choice.path.suffix == ".ipynb"})
        if timed_out:
            for test in results.tests:
                if test.output == NOT_RUN:
                    test.output = f"not run: the submission's time limit of {submission_timeout:g} s was reached"
        elif judge.returncode not in (0, 1) and not results.errors:
            results.errors.append(f"the judge exited with code {judge.returncode}:\n{output[-4000:]}")
    results.execution_time = round(time.monotonic() - started, 3)
    # (the judge's own notes last: what a notebook's top-level code raised as it was imported)
    results.notes = [choice.note for choice in files.values() if choice.note] + left_out + results.notes
    return results


def _watch_progress(results_path: Path, judge: subprocess.Popen, on_test: Callable[[int, int, str], None],
                    every_s: float = 0.25) -> threading.Thread:
    """Follow the results file the judge rewrites after every test (whole each time: Results.dump)
    and report each change, until the judge ends."""
    def follow() -> None:
        seen = -1
        while True:
            ended = judge.poll() is not None
            try:
                tests = json.loads(results_path.read_text()).get("tests", [])
            except (OSError, ValueError, AttributeError):
                tests = None
            if isinstance(tests, list):
                done = [t for t in tests if isinstance(t, dict) and t.get("output") != NOT_RUN]
                if len(done) != seen:
                    seen = len(done)
                    on_test(seen, len(tests), str(done[-1].get("name", "")) if done else "")
            if ended:
                return
            time.sleep(every_s)

    thread = threading.Thread(target=follow, name="gpugrade-progress", daemon=True)
    thread.start()
    return thread
