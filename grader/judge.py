"""The trusted side's handle on one student module: ask the runner to call a function, get the
outputs back. Tests use it through the `student` fixture; the score is decided here, never there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ProtocolError, RunnerError, StudentCodeError
from .policy import DEFAULT_ALLOWED_IMPORTS, check_file
from .sandbox import Runner, Sandbox


@dataclass
class CallResult:
    value: Any                       # what the student's function returned (device arrays copied back)
    args: list                       # the array arguments as they were after the call (None for scalars)
    launches: list[dict] = field(default_factory=list)  # one record per kernel launch (sim backend)


class Student:
    """Calls into one exercise module of a submission, through a runner in a sandbox.

    A crashed or timed-out runner is restarted for the next call, so one bad test costs only
    that test's points.
    """

    def __init__(self, module: str, workspace: str, backend: str, sandbox: Sandbox, devices: int = 1,
                 allowed_imports: frozenset[str] = DEFAULT_ALLOWED_IMPORTS):
        self.module = module
        self.allowed_imports = allowed_imports
        self._violations: list | None = None
        self.workspace = workspace
        self.backend = backend
        self.sandbox = sandbox
        self.devices = devices
        self._runner: Runner | None = None

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

    def call(self, function: str, *args: Any, timeout: float | None = None) -> CallResult:
        self._check_policy()
        if self._runner is None:
            self._runner = self.sandbox.start(self.workspace, self.backend, self.devices)
        try:
            reply = self._runner.request({"op": "call", "module": self.module, "function": function,
                                          "args": list(args)}, timeout=timeout)
        except RunnerError:
            self.close()
            raise
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self.close()
            raise RunnerError("the runner sent a malformed reply")
        if not reply["ok"]:
            error = reply.get("error") or {}
            if not isinstance(error, dict):
                raise ProtocolError("malformed error reply")
            raise StudentCodeError(str(error.get("kind", "exception")), str(error.get("type", "Error")),
                                   str(error.get("message", "")), str(error.get("where", "")),
                                   str(error.get("traceback", "")))
        launches = reply.get("launches") or []
        returned_args = reply.get("args") or []
        if not isinstance(launches, list) or not isinstance(returned_args, list):
            raise ProtocolError("malformed call reply")
        return CallResult(reply.get("returned"), returned_args, launches)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


def require_kernel_launch(result: CallResult, backend: str) -> None:
    """On the simulator the runner reports launches: an answer computed without any kernel fails."""
    if backend == "sim" and not result.launches:
        from .correctness import WrongAnswer

        raise WrongAnswer("no kernel was launched: the result must be computed on the GPU")
