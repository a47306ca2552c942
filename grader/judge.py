"""The trusted side's handle on one student module: ask the runner to call a function, get the
outputs back. Tests use it through the `student` fixture; the score is decided here, never there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ProtocolError, RunnerError, StudentCodeError
from .policy import DEFAULT_ALLOWED_IMPORTS, check_file
from .sandbox import Runner, Sandbox

STARTUP_TIMEOUT_S = 120.0  # a runner's interpreter and imports, on a loaded machine


@dataclass
class CallResult:
    value: Any                       # what the student's function returned (device arrays copied back)
    args: list                       # the array arguments as they were after the call (None for scalars)
    launches: list[dict] = field(default_factory=list)  # one record per kernel launch (sim backend)


class RunnerConnection:
    """One runner for one workspace, shared by the `Student`s of all its modules.

    Started on demand (or early, with `start()`, so the interpreter's imports overlap other
    work), and started afresh after a crash or a timeout: one bad call costs only that call.
    """

    def __init__(self, workspace: str, backend: str, sandbox: Sandbox, devices: int = 1,
                 compile_check: bool = True):
        self.workspace = workspace
        self.backend = backend
        self.sandbox = sandbox
        self.devices = devices
        self.compile_check = compile_check  # off only for trusted course code (reference solutions)
        self._runner: Runner | None = None
        self._ready = False

    def start(self) -> Runner:
        """Start the runner process; returns at once, its imports go on in the background."""
        if self._runner is None:
            self._runner = self.sandbox.start(self.workspace, self.backend, self.devices)
            self._ready = False
        return self._runner

    def request(self, message: dict, timeout: float | None = None) -> dict:
        runner = self.start()
        try:
            if not self._ready:
                # The interpreter's start and numba's imports are not the student's time: the
                # call's limit starts once the runner answers.
                runner.request({"op": "configure", "compile_check": self.compile_check}, timeout=STARTUP_TIMEOUT_S)
                self._ready = True
            reply = runner.request(message, timeout=timeout)
        except RunnerError:
            self.close()
            raise
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self.close()
            raise RunnerError("the runner sent a malformed reply")
        return reply

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


class Student:
    """Calls into one exercise module of a submission, through a runner in a sandbox."""

    def __init__(self, module: str, workspace: str, backend: str, sandbox: Sandbox, devices: int = 1,
                 allowed_imports: frozenset[str] = DEFAULT_ALLOWED_IMPORTS,
                 connection: RunnerConnection | None = None):
        self.module = module
        self.workspace = workspace
        self.allowed_imports = allowed_imports
        self._violations: list | None = None
        self._imported = False
        self._import_failure: Exception | None = None
        self.connection = connection or RunnerConnection(workspace, backend, sandbox, devices)

    def _check_policy(self) -> None:
        """Before any student code runs: the static policy check, once per module."""
        path = Path(self.workspace) / f"{self.module}.py"
        if not path.is_file():
            raise StudentCodeError("missing", "FileNotFoundError", f"{self.module}.py is not in the submission")
        if self._violations is None:
            self._violations = check_file(path, self.allowed_imports)
        if self._violations:
            message = "; ".join(str(v) for v in self._violations)
            raise StudentCodeError("policy", "PolicyViolation", message, traceback="\n".join(map(str, self._violations)))

    def _import(self, timeout: float | None) -> None:
        """Import the module once; a module that cannot be imported (syntax error, a hang or a
        crash at import) fails every later call at once, with the same reason."""
        if self._import_failure is None and not self._imported:
            try:
                self._raise_for(self.connection.request({"op": "import", "module": self.module}, timeout=timeout))
                self._imported = True
            except (StudentCodeError, RunnerError) as exc:
                self._import_failure = exc
        if self._import_failure is not None:
            raise self._import_failure

    @staticmethod
    def _raise_for(reply: dict) -> None:
        if not reply["ok"]:
            error = reply.get("error") or {}
            if not isinstance(error, dict):
                raise ProtocolError("malformed error reply")
            raise StudentCodeError(str(error.get("kind", "exception")), str(error.get("type", "Error")),
                                   str(error.get("message", "")), str(error.get("where", "")),
                                   str(error.get("traceback", "")))

    def call(self, function: str, *args: Any, timeout: float | None = None) -> CallResult:
        self._check_policy()
        self._import(timeout)
        reply = self.connection.request({"op": "call", "module": self.module, "function": function,
                                         "args": list(args)}, timeout=timeout)
        self._raise_for(reply)
        launches = reply.get("launches") or []
        returned_args = reply.get("args") or []
        if not isinstance(launches, list) or not isinstance(returned_args, list):
            raise ProtocolError("malformed call reply")
        return CallResult(reply.get("returned"), returned_args, launches)

    def close(self) -> None:
        self.connection.close()


def require_kernel_launch(result: CallResult, backend: str) -> None:
    """On the simulator the runner reports launches: an answer computed without any kernel fails."""
    if backend == "sim" and not result.launches:
        from .correctness import WrongAnswer

        raise WrongAnswer("no kernel was launched: the result must be computed on the GPU")
