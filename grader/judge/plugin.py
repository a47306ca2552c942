"""The judge: a pytest plugin that turns grading tests into a grade.

Grading tests (tests/exercises/test_<exercise>.py) declare `@pytest.mark.points(n)` and
`@pytest.mark.stage(k)`, and use the fixtures `student` (calls into the student's module through
a sandboxed runner), `rng` (inputs from a secret per-run seed) and `backend`. The plugin's
`GradingSession` is registered only when a workspace is given; it records every outcome with its
points and writes the results JSON that `grader.grading` reads.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ..backends import Kind
from ..errors import GraderFault, RunnerError, StudentCodeError
from ..report.results import CONSEQUENCE, NOT_RUN, Results, Status, TestResult
from ..sandbox import Limits, SandboxSpec, make_sandbox
from . import recorded_reference
from .correctness import WrongAnswer
from .collective import take_traffic
from .hotspots import take_request
from .perf import PartialCredit, take_timing
from .printed import take_printed
from .policy import DEFAULT_ALLOWED_IMPORTS
from .recorded_reference import RecordedReference, RecordingReference, SharedReference
from .settings import JudgeSettings
from .student import BesideTheSimulator, RunnerConnection, Student, TimeBudget

TEST_PREFIX = "test_"
STOCK_SIMULATOR_NOTE = ("numba's stock simulator stood in for the GPU: the gpu backend's code path at smaller "
                        "sizes, no real timing, launch records from the runner itself")


def pytest_addoption(parser: pytest.Parser) -> None:
    JudgeSettings.add_options(parser.getgroup("gpugrade", "grading with gpugrade"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): points this grading test is worth (each parametrized case)")
    config.addinivalue_line("markers", "stage(k): the exercise stage this test grades")
    config.addinivalue_line("markers", "visibility(v): Gradescope visibility (visible, hidden, after_due_date, ...)")
    config.addinivalue_line("markers", "perf: a performance test; fails unless the stage's other tests passed")
    if config.getoption("gpugrade_workspace"):
        config.pluginmanager.register(GradingSession(config), "gpugrade-session")


ORPHAN_POLL_S = 2.0
ORPHAN_GRACE_S = 30.0


def _stop_when_told_or_orphaned() -> None:
    """This process is the judge gpugrade started (grader.grading): Ctrl-C stops it, and so does
    the end of what started it (a batch killed with SIGKILL: the runners closed, what was graded
    written; an exit if that takes longer than ORPHAN_GRACE_S). A judge left running went on
    grading for nobody, with its runners and their memory."""
    import signal
    import threading

    # Ctrl-C is how gpugrade stops its judge (a submission's time limit, a stopped batch): a batch
    # started in the background by a script (`gpugrade batch ... &`) runs with SIGINT ignored,
    # which its judges inherited, and each then ran on to its end
    signal.signal(signal.SIGINT, signal.default_int_handler)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(ORPHAN_GRACE_S)
        os._exit(3)

    threading.Thread(target=watch, name="gpugrade-orphan-watch", daemon=True).start()


def exercise_of(item: pytest.Item) -> str:
    module = getattr(item, "module", None)
    name = getattr(module, "EXERCISE", None)
    if name:
        return str(name)
    stem = os.path.splitext(os.path.basename(str(item.path)))[0]
    return stem[len(TEST_PREFIX):] if stem.startswith(TEST_PREFIX) else stem


def _marker_arg(item: pytest.Item, name: str, default=None):
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker and marker.args else default


def failure_message(exc: BaseException | None) -> str:
    """The one line a student reads first, then any detail worth having."""
    if isinstance(exc, StudentCodeError):
        detail, summary = exc.traceback.strip(), exc.summary()
        # (policy violations' detail is their own lines again: said once)
        repeated = all(line.strip() in summary for line in detail.splitlines())
        return summary + (f"\n\n{detail}" if detail and exc.kind != "not_implemented" and not repeated else "")
    if isinstance(exc, WrongAnswer):
        return str(exc)
    if isinstance(exc, RunnerError):
        tail = exc.output.strip()
        return exc.reason + (f"\n\nlast output:\n{tail}" if tail else "")
    if exc is None:
        return ""
    return f"{type(exc).__name__}: {exc}"


# A test's message in the results file: whatever the student's code makes the messages say, a
# results file stays small (a few hundred tests of this at most).
MAX_OUTPUT = 16_000


def _capped(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    return text[:MAX_OUTPUT] + f"\n... [{len(text) - MAX_OUTPUT} characters cut]"


# The student's source shown around a finding's line: lines each side, the longest line kept, the
# most of a file read (a submission's exercise is a few hundred lines; anything bigger is not read whole).
SOURCE_CONTEXT = 3
MAX_SOURCE_LINE = 160
MAX_SOURCE_BYTES = 1 << 20


def source_around(workspace: str, file: str | None, line: int | None) -> list | None:
    """[first line number, [text, ...]]: the lines of `<workspace>/<file>` around `line`, or None
    without a file and line, or where the path leaves the workspace (a link or `..` included: the
    finding's file comes from the runner, which runs the student's code), or cannot be read."""
    if not file or not line or line < 1:
        return None
    root = os.path.realpath(workspace)
    path = os.path.realpath(os.path.join(root, file))
    if os.path.commonpath([root, path]) != root or path == root or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    if line > len(lines):
        return None
    first = max(1, line - SOURCE_CONTEXT)
    chosen = lines[first - 1:line + SOURCE_CONTEXT]
    return [first, [t if len(t) <= MAX_SOURCE_LINE else t[:MAX_SOURCE_LINE] + " ..." for t in chosen]]


class GradingSession:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.settings = settings = JudgeSettings.from_config(config)
        self.workspace = os.path.abspath(settings.workspace)
        self.backend_name = settings.backend
        self.seed = settings.seed or secrets.token_hex(8)
        spec = SandboxSpec(settings.sandbox, settings.docker_image, settings.gpus)
        # Runners see a copy of their workspace and nothing else of this machine (the course tree,
        # the results file, other runners): grader.sandbox.
        limits = Limits.on_stock_simulator(call_timeout_s=settings.timeout) if settings.stock_simulator \
            else Limits(call_timeout_s=settings.timeout)
        self.sandbox = make_sandbox(spec, limits)
        self.results = Results(submission=settings.submission or self.workspace,
                               backend=self.backend_name, seed=self.seed, sandbox=spec.name,
                               backend_note=STOCK_SIMULATOR_NOTE if settings.stock_simulator else "")
        self.students: dict[str, Student] = {}
        self.references: dict[str, Student] = {}
        _stop_when_told_or_orphaned()
        # One runner for the submission and one for the reference solutions, whatever the number
        # of exercises: each runner start costs an interpreter and numba's imports.
        self.device_process = settings.simulator == "device"
        self.connection = RunnerConnection(self.workspace, self.backend_name, self.sandbox,
                                           device_process=self.device_process)
        self.reference_connection: RunnerConnection | None = None
        # on a GPU machine, the simulator beside the GPU: the proof of every call (BesideTheSimulator)
        self.sim_connections: dict[str, RunnerConnection] = {}
        self.record_path = settings.record_reference
        self.recorded_path = config.rootpath / recorded_reference.RECORD
        self.recorded = {} if self.record_path else recorded_reference.load(self.recorded_path)
        self.reference_dir = settings.reference or os.path.join(str(config.rootpath), "solutions")
        self.failed_stages: dict[tuple[str, int], list[str]] = {}  # (exercise, stage): its failed tests' names
        self.pending: dict[str, TestResult] = {}  # collected, not yet run
        self._manifest = None
        self._tmp = None
        self.started = time.monotonic()

    # -- fixtures -----------------------------------------------------------------------------
    @pytest.fixture
    def student(self, request: pytest.FixtureRequest) -> Student:
        exercise = exercise_of(request.node)
        if exercise not in self.students:
            seconds = self.settings.exercise_budget
            budget = TimeBudget(seconds, exercise) if seconds > 0 else None
            declared_in = self._declaring(exercise)
            student = Student(exercise, self.workspace, self.backend_name, self.sandbox, connection=self.connection,
                              allowed_imports=self._allowed_imports(), budget=budget, declared_in=declared_in)
            if self.backend_name == Kind.GPU:
                student = BesideTheSimulator(student, Student(
                    exercise, self.workspace, Kind.SIM, self.sandbox, connection=self._beside("student"),
                    allowed_imports=self._allowed_imports(), budget=budget, declared_in=declared_in), Student(
                    exercise, self.workspace, Kind.SIM, self.sandbox, connection=self._beside("student", gpu=True),
                    allowed_imports=self._allowed_imports(), budget=budget, declared_in=declared_in))
            self.students[exercise] = student
        return self.students[exercise]

    def _declaring(self, exercise: str) -> Path | None:
        """The trusted file whose signatures name a call's arguments in messages: the reference
        solution, or where the course has none (a student's copy), its released stub."""
        for path in (Path(self.reference_dir) / f"{exercise}.py", self.config.rootpath / "exercises" / f"{exercise}.py"):
            if path.is_file():
                return path
        return None

    def _beside(self, whose: str, workspace: str | None = None, trusted: bool = False, gpu: bool = False
                ) -> RunnerConnection:
        """A runner beside the GPU runner of the student or the reference: the simulator's (and its
        device process), the proof of every call; or (`gpu`) one whose device is the GPU's device
        process (grader.device.gpu_server), where the calls on the GPU and their timings run, the
        kernels launched and timed by a process the runner cannot touch."""
        key = f"{whose} {'gpu device' if gpu else 'simulator'}"
        if key not in self.sim_connections:
            self.sim_connections[key] = RunnerConnection(workspace or self.workspace, Kind.SIM, self.sandbox,
                                                         trusted=trusted,
                                                         device_process=self.device_process, gpu_device=gpu)
        return self.sim_connections[key]

    def _course_manifest(self):
        """course.toml, read once per session (a CourseError if the course has none)."""
        from ..course.manifest import find

        if self._manifest is None:
            self._manifest = find(self.config.rootpath)
        return self._manifest

    def _allowed_imports(self) -> frozenset[str]:
        """The static policy's import allowlist, widened by the course's `[course] allow_imports`."""
        from ..course.manifest import MANIFEST

        if (self.config.rootpath / MANIFEST).is_file():
            return self._course_manifest().imports_allowed()
        return DEFAULT_ALLOWED_IMPORTS

    @pytest.fixture
    def rng(self, request: pytest.FixtureRequest) -> np.random.Generator:
        return np.random.default_rng([int(self.seed, 16), zlib.crc32(request.node.nodeid.encode())])

    @pytest.fixture
    def backend(self) -> str:
        return self.backend_name

    @pytest.fixture
    def stage_spec(self, request: pytest.FixtureRequest):
        """The test's stage from the course manifest (course.toml): function, criteria, thresholds
        (the performance model's GPU as `--gpugrade-model-gpu` says, if it does)."""
        stage = self._course_manifest().stage(exercise_of(request.node), int(_marker_arg(request.node, "stage", 1)))
        if self.settings.model_gpu:
            stage = replace(stage, gpu=replace(stage.gpu, model_gpu=self.settings.model_gpu))
        return stage

    @pytest.fixture
    def reference(self, request: pytest.FixtureRequest):
        """The reference solution (trusted course code) in its own runner, for performance tests;
        where the course has no solutions/ (a student's copy), the counters `gpugrade release`
        recorded from it."""
        exercise = exercise_of(request.node)
        source = os.path.join(self.reference_dir, f"{exercise}.py")
        if exercise not in self.references:
            if os.path.isfile(source) and self._shares_reference():
                self.references[exercise] = SharedReference(Path(self.settings.shared_reference),
                                                            lambda: self._live_reference(exercise))
            elif os.path.isfile(source):
                connection = self._reference_connection()
                live = self._live_reference(exercise)
                if self.backend_name == Kind.GPU:
                    live = BesideTheSimulator(live, Student(
                        exercise, connection.workspace, Kind.SIM, self.sandbox,
                        connection=self._beside("reference", connection.workspace, trusted=True)), Student(
                        exercise, connection.workspace, Kind.SIM, self.sandbox,
                        connection=self._beside("reference", connection.workspace, trusted=True, gpu=True)))
                self.references[exercise] = RecordingReference(live, self.recorded) if self.record_path else live
            elif self.recorded_path.is_file():
                self.references[exercise] = RecordedReference(self.recorded, self.recorded_path)
            else:
                pytest.skip(f"no reference solution {source} and no {self.recorded_path}")
        return self.references[exercise]

    def _live_reference(self, exercise: str) -> Student:
        """The reference solution of `exercise` in the reference solutions' runner."""
        connection = self._reference_connection()
        return Student(exercise, connection.workspace, self.backend_name, self.sandbox, connection=connection)

    def _shares_reference(self) -> bool:
        """The reference's counters come from the run's shared folder (SharedReference): on the
        simulator, unless this judge records them for `gpugrade release`."""
        return bool(self.settings.shared_reference) and self.backend_name == Kind.SIM and not self.record_path

    def _reference_connection(self) -> RunnerConnection:
        """The reference solutions' runner: trusted course code, compile-checked all the same for
        the registers its kernels use (the performance model's occupancy, like the student's)."""
        if self.reference_connection is None:
            from ..course import make_workspace

            self._tmp = tempfile.TemporaryDirectory(prefix="gpugrade-reference-")
            workspace = os.path.join(self._tmp.name, "reference")
            modules = {p.stem: p for p in Path(self.reference_dir).glob("*.py")}
            make_workspace(modules, Path(workspace))
            self.reference_connection = RunnerConnection(workspace, self.backend_name, self.sandbox, trusted=True,
                                                         device_process=self.device_process)
        return self.reference_connection

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Start the runners now: their imports overlap the first tests instead of delaying them."""
        if not session.items:
            return
        # (on a GPU the submission's calls go to a runner on the GPU's device process: BesideTheSimulator)
        (self._beside("student", gpu=True) if self.backend_name == Kind.GPU else self.connection).start()
        perf = {exercise_of(i) for i in session.items if i.get_closest_marker("perf") is not None}
        # (a shared reference starts its runner on its first call no other judge of the run made)
        if not self._shares_reference() and any(
                os.path.isfile(os.path.join(self.reference_dir, f"{e}.py")) for e in perf):
            self._reference_connection().start()

    # -- recording ----------------------------------------------------------------------------
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        stages = {int(s) for s in self.settings.stages.split(",") if s.strip()}
        only = self.settings.only
        if stages or only:
            chosen = [i for i in items if (not stages or int(_marker_arg(i, "stage", 1)) in stages)
                      and (not only or i.get_closest_marker(only) is not None)]
            config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
            items[:] = chosen
        for item in items:
            if _marker_arg(item, "points") is None:
                self.results.errors.append(f"{item.nodeid}: grading test without @pytest.mark.points")
        # Every test is in the results file from the start, as "not run", and the file is rewritten
        # after each test: a judge stopped at the submission's time limit still leaves partial credit.
        self.pending = {item.nodeid: self._result(item, False, NOT_RUN) for item in items}
        self._write_results()

    def _result(self, item: pytest.Item, passed: bool, output: str) -> TestResult:
        exercise = exercise_of(item)
        points = float(_marker_arg(item, "points", 0))
        return TestResult(
            name=f"{exercise}::{item.name[len(TEST_PREFIX):] if item.name.startswith(TEST_PREFIX) else item.name}",
            exercise=exercise,
            stage=int(_marker_arg(item, "stage", 1)),
            max_score=points,
            score=points if passed else 0.0,
            status=Status.PASSED if passed else Status.FAILED,
            output=_capped(output),
            nodeid=item.nodeid,
            visibility=str(_marker_arg(item, "visibility", "visible")),
        )

    def _write_results(self) -> None:
        path = self.settings.results
        if path:
            self.results.execution_time = round(time.monotonic() - self.started, 3)
            # (what a notebook's top-level code raised as it was imported: each exercise's, once)
            heard = [n for student in self.students.values() for n in student.import_notes]
            notes = list(dict.fromkeys([*self.results.notes, *heard]))
            replace(self.results, tests=[*self.results.tests, *self.pending.values()], notes=notes).dump(path)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A skipped test cannot run on this machine: it stays in the results with its points, as
        not gradable here, so the maximum score is the same on every backend."""
        if report.skipped and report.nodeid in self.pending:
            item = self.pending.pop(report.nodeid)
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            self.results.tests.append(replace(item, status=Status.NOT_GRADABLE,
                                              output=_capped(f"not gradable on this machine: {reason}")))
            self._write_results()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Correctness gates performance: a perf test of a stage with a failed test fails at once."""
        take_timing()  # nothing of an earlier test
        take_request()
        take_traffic()
        take_printed()
        key = (exercise_of(item), int(_marker_arg(item, "stage", 1)))
        if item.get_closest_marker("perf") is not None and key in self.failed_stages:
            from .perf import NeedsCorrectness

            failed = self.failed_stages[key]
            named = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
            raise NeedsCorrectness(f"{CONSEQUENCE}: {key[0]} stage {key[1]} has failing tests ({named})")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.results.errors.append(f"could not collect {report.nodeid}: {report.longreprtext[-2000:]}")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        if report.skipped or report.when == "teardown" or (report.when == "setup" and report.passed):
            return
        if report.when != "call" and call.excinfo is not None and not isinstance(
                call.excinfo.value, (StudentCodeError, RunnerError, WrongAnswer)):
            self.results.errors.append(f"{item.nodeid}: error in {report.when}: {report.longreprtext[-2000:]}")
        passed = report.passed
        if not passed and call.excinfo is not None and isinstance(call.excinfo.value, GraderFault):
            fault = call.excinfo.value.reason  # said once for the grade, however many tests it failed
            if fault not in self.results.errors:
                self.results.errors.append(fault)
        if not passed and item.get_closest_marker("perf") is None:
            failed = self.failed_stages.setdefault((exercise_of(item), int(_marker_arg(item, "stage", 1))), [])
            name = getattr(item, "originalname", item.name).removeprefix("test_")
            if name not in failed:  # (a parametrized test once)
                failed.append(name)
        self.pending.pop(item.nodeid, None)
        exc = call.excinfo.value if call.excinfo else None
        message = "" if passed else failure_message(exc)
        kernels_printed = take_printed()  # the student's text: after the grader's words, each line marked
        result = self._result(item, passed, f"{message}\n\n{kernels_printed}".strip("\n"))
        if not passed and isinstance(exc, StudentCodeError) and exc.finding is not None:
            result.finding = exc.finding
            result.source = source_around(self.workspace, exc.finding.file, exc.finding.line)
        if isinstance(exc, WrongAnswer):
            result.wrong = exc.wrong
        if isinstance(exc, PartialCredit):  # right, but slower than full credit allows
            result.score = round(result.max_score * exc.credit, 3)
        timing = take_timing()
        request = take_request()
        if item.get_closest_marker("perf") is not None:
            result.timing = timing
            result.request = request
        result.traffic = take_traffic()
        self.results.tests.append(result)
        self._write_results()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for connection in (self.connection, self.reference_connection, *self.sim_connections.values()):
            if connection is not None:
                connection.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        self._write_results()
        if self.record_path:
            recorded_reference.dump(self.recorded, Path(self.record_path))
