"""The trusted side's handle on one student module: ask the runner to call a function, get the
outputs back. Tests use it through the `student` fixture; the score is decided here, never there."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import wire
from ..backends import Kind
from ..backends.ranks import MAX_RANKS
from ..errors import CallTimeout, GraderFault, ProtocolError, RunnerError, StudentCodeError, Unavailable
from ..wire import dtypes
from ..wire.digests import text_digest
from ..wire.messages import MAX_ANSWER_SHAPES, MAX_RANK_DEVICES
from . import gpu_lock, printed
from .grid import GridGrowth
from .policy import DEFAULT_ALLOWED_IMPORTS, check_file
from .signatures import declared_parameters
from .stuck import import_timeout_message, kernel_at, split_dump, timeout_message, watch_after
from ..sandbox import Runner, Sandbox

STARTUP_TIMEOUT_S = 120.0  # a runner's interpreter and imports, on a loaded machine
# What a call may send back beyond its own array arguments, unless the test says (`returns=`).
DEFAULT_RETURN_BYTES = 64 << 20
SMALL_REPLY = wire.Bounds(json_bytes=1 << 20, frame_bytes=0)  # import, configure, ping: no arrays
REPORT_BOUNDS = wire.Bounds(json_bytes=32 << 20, frame_bytes=16 << 20)  # a device report: records, heads
DEVICE_TIMEOUT_S = 60.0  # the device's own answers (its work was done within the runner's call)
PING_TIMEOUT_S = 10.0  # whether the device process still answers, when the runner saw it gone
REPLAY_BOUNDS = wire.Bounds(json_bytes=1 << 20, frame_bytes=1 << 30)  # a replay's downloads (the device is ours)


@dataclass
class CallResult:
    value: Any                       # what the student's function returned (device arrays copied back)
    args: list                       # the array arguments as they were after the call (None for scalars)
    launches: list[dict] = field(default_factory=list)  # one record per kernel launch (sim backend)
    # the device process's report (launches and copies seen by the simulated GPU), None without one
    device: wire.DeviceReport | None = None
    sent: list = field(default_factory=list)  # the arguments as the judge sent them
    # on a GPU machine: the same call on the simulator (its device report is the data-flow proof)
    proof: "CallResult | None" = None
    ranks: bool = False  # a call with one buffer per rank (`sent[r]` is rank r's)
    function: str = ""  # the function called
    # its parameters' names as the course declares them (grader.judge.signatures; () unknown)
    parameters: tuple[str, ...] = ()
    # the call's device work again with other data for some uploads (grader.device.replay), while
    # no other call has begun: `replay(substitutions, downloads, originals)` -> Replayed; None
    # without a device
    replay: "Callable[..., Replayed] | None" = None


@dataclass
class Replayed:
    """What a replay of a call's device work gave: the data of the downloads asked for, as the
    replay made them and as the call did (None where the device kept no copy), or why the replay
    went another way than the call (`diverged`)."""

    downloads: list[np.ndarray] = field(default_factory=list)
    originals: list[np.ndarray | None] = field(default_factory=list)
    diverged: str | None = None


@dataclass(frozen=True)
class Returns:
    """What a test expects a call to return: bounds the reply, and a value of another shape or
    dtype is a wrong answer. The bound leaves room for the mistakes students make (float64
    where float32 is expected, an output padded to whole tiles and never sliced), so that these
    are told as what they are, never as a broken protocol; a reply larger still is one."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def like(cls, array: np.ndarray) -> "Returns":
        return cls(tuple(array.shape), np.dtype(array.dtype))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def reply_bytes(self) -> int:
        """The most a reply's answer may take: 4 times the elements at 8 bytes each, or 1 MiB."""
        return max(4 * int(np.prod(self.shape, dtype=np.int64)) * max(self.dtype.itemsize, 8), 1 << 20)


class TimeBudget:
    """Seconds one exercise may spend in student code, over all its calls: a submission that
    sleeps just under every timeout spends its own exercise's budget, never another's."""

    def __init__(self, seconds: float, what: str):
        self.seconds = seconds
        self.what = what
        self.spent = 0.0

    @property
    def left(self) -> float:
        return self.seconds - self.spent

    def limit(self, timeout: float) -> float:
        """The timeout of the next call: never more than what is left."""
        if self.left <= 0:
            raise RunnerError(f"not run: {self.what}'s time budget of {self.seconds:g} s is spent")
        return min(timeout, self.left)

    def spend(self, seconds: float) -> None:
        self.spent += seconds


def _its(exc: Exception) -> str:
    """A failure of the device process, told of it: a runner's error says "the student's process"."""
    return str(exc).replace("the student's process", "it")


MAX_SOURCES = 64  # a workspace holds an exercise module or a few


def workspace_sources(workspace: str) -> dict[str, str]:
    """The digest of each Python file in `workspace`, by its name there, of its text as the runner
    reads it (tokenize.open: decoded, universal newlines, as linecache does): the only texts the
    device process builds kernels from (the runner's linecache is the student's to edit)."""
    root = Path(workspace)
    sources = {}
    for path in sorted(root.rglob("*.py"))[:MAX_SOURCES]:
        try:
            with tokenize.open(path) as file:
                sources[str(path.relative_to(root))] = text_digest(file.read())
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # not Python's source: no kernel of it imports
    return sources


class RunnerConnection:
    """One runner for one workspace, shared by the `Student`s of all its modules.

    Started on demand (or early, with `start()`, so the interpreter's imports overlap other
    work), and started afresh after a crash or a timeout: one bad call costs only that call.
    """

    def __init__(self, workspace: str, backend: str, sandbox: Sandbox, devices: int = MAX_RANKS,
                 compile_check: bool = True, trusted: bool = False, device_process: bool = True,
                 gpu_device: bool = False):
        self.workspace = workspace
        self.backend = backend
        self.sandbox = sandbox
        self.devices = devices
        self.compile_check = compile_check  # (registers for the model; refusals as a GPU would)
        self.trusted = trusted  # the reference runner: a uid and a view of its own, never a student's
        self.device_process = device_process  # False: the simulator inside the runner (debugging, measuring)
        # the device process on the machine's GPU (grader.device.gpu_server), the runner a client of
        # it as of the simulator's (backend "sim"): calls on a GPU, kernels launched and timed there
        self.gpu_device = gpu_device
        self._runner: Runner | None = None
        self._device: Runner | None = None
        self._ready = False
        self.start_seconds = 0.0  # spent starting runners (and device processes): the host's time
        self._calls = itertools.count(1)
        self.last_call: int | None = None  # the last call the device reported (the one a replay may run again)

    @property
    def remote_device(self) -> bool:
        """Whether the simulated GPU runs as a device process of its own beside the runner (it
        reports launches, findings and copies to this side directly)."""
        return self.backend == Kind.SIM and (self.device_process or self.gpu_device) and \
            bool(getattr(self.sandbox, "hosts_device", False))

    def start(self) -> Runner:
        """Start the runner (and its device process); returns at once, their imports go on in
        the background."""
        if self._runner is None:
            if self.remote_device:
                try:
                    self._device, link = self.sandbox.start_device(self.devices, self.workspace, trusted=self.trusted,
                                                                   gpu=self.gpu_device,
                                                                   sources=workspace_sources(self.workspace))
                    self._runner = self.sandbox.start(self.workspace, self.backend, self.devices,
                                                      trusted=self.trusted, device=link)
                except BaseException:
                    self.close()
                    raise
            else:
                self._runner = self.sandbox.start(self.workspace, self.backend, self.devices, trusted=self.trusted)
            self._ready = False
        return self._runner

    def _make_ready(self, runner: Runner) -> None:
        if self._ready:
            return
        # The interpreters' start and numba's imports are not the student's time: the call's
        # limit starts once both answer.
        configure = {"op": "configure", "compile_check": self.compile_check}
        told = dict(configure)
        if self._device is not None:
            try:
                doc = self._device.request(configure, timeout=STARTUP_TIMEOUT_S, bounds=SMALL_REPLY)
                wire.Reply.parse(doc)
            except RunnerError as exc:  # the grader's own process: say so, not "the student's process"
                reason = _its(exc)
                raise GraderFault(f"the simulated GPU (device process) did not start: {reason} (a fault of the "
                                  f"grader's, not of the submission)", self._device.output_tail()) from None
            if isinstance(doc.get("attributes"), dict):  # the GPU's own, for the runner's get_current_device()
                told["device"] = doc["attributes"]
        wire.Reply.parse(runner.request(told, timeout=STARTUP_TIMEOUT_S, bounds=SMALL_REPLY))
        self._ready = True

    def request(self, message: dict, timeout: float | None = None, bounds: wire.Bounds = SMALL_REPLY,
                parse=wire.Reply.parse):
        """Send `message`; the reply as `parse` makes it (checked: a malformed reply is the runner
        breaking the protocol, and costs it its process)."""
        reply, _ = self.call(message, timeout, bounds, parse, report=False)
        return reply

    def alone(self):
        """On a GPU: the machine's GPUs to this block alone (a timing: grader.judge.gpu_lock)."""
        return gpu_lock.holding(alone=True) if self.on_gpu else contextlib.nullcontext(0.0)

    def device_name(self) -> str:
        """The GPU's name, as the GPU's device process says it (this connection's, started if need be)."""
        return str(self._device_info().get("device", "unknown GPU"))[:200]

    def device_gpus(self) -> int:
        """How many GPUs the GPU's device process sees."""
        gpus = self._device_info().get("gpus", 1)
        return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and 0 < gpus <= 1024 else 1

    def _device_info(self) -> dict:
        self.start()
        if not self._ready:
            self._make_ready(self._runner)
        if self._device is None:
            return {}
        doc = self._device.request({"op": "ping"}, timeout=DEVICE_TIMEOUT_S, bounds=SMALL_REPLY)
        return doc if isinstance(doc, dict) else {}

    @property
    def on_gpu(self) -> bool:
        """Whether this connection's kernels run on the machine's GPU (its runner's or its device's)."""
        return self.backend == Kind.GPU or self.gpu_device

    def call(self, message: dict, timeout: float | None, bounds: wire.Bounds, parse, report: bool = True,
             flush: bool = False):
        """(the runner's reply, the device process's report of the call or None). The device
        is told where the call begins and ends, and reports what its kernels did in between.
        On a GPU the call holds the machine's GPU lock shared with other grades' calls (a timing
        in `alone()` has it to itself)."""
        if not self.on_gpu:
            return self._call(message, timeout, bounds, parse, report, flush)
        with gpu_lock.holding():
            return self._call(message, timeout, bounds, parse, report, flush)

    def _call(self, message: dict, timeout: float | None, bounds: wire.Bounds, parse, report: bool, flush: bool):
        begun = time.monotonic()
        runner = self.start()
        # the GPU's device process serves the runner only within a call (gpu_server.serving_runner):
        # every request of its runner is one, its report kept where asked for
        device = self._device if report or self.gpu_device else None
        try:
            if not self._ready:
                self._make_ready(runner)
                self.start_seconds += time.monotonic() - begun
            if device is not None:
                number = self.last_call = next(self._calls)
                # (`flush`: the GPU's device process empties the L2 cache first: a timed call)
                # (`watch_s`: shortly before the limit the device says where its kernel is, for a timeout's message)
                self._tell_device(device, {"op": "begin", "call": number, **({"flush": True} if flush else {}),
                                           **({"watch_s": watch_after(timeout)} if timeout else {})},
                                  SMALL_REPLY, wire.Reply.parse)
            try:
                reply = parse(runner.request(message, timeout=timeout, bounds=bounds))
            except CallTimeout as exc:
                if device is not None:
                    exc.kernel_at = kernel_at(device.output_tail(), number)
                raise
            if device is None:
                return reply, None
            found = self._tell_device(device, {"op": "end", "call": number, "answers": _answer_shapes(reply)},
                                      REPORT_BOUNDS, wire.DeviceReport.parse)
            if not self.trusted:  # the student's prints, for the test's feedback (never the grade's)
                printed.heard(found)
            return reply, found if report else None
        except ProtocolError as exc:
            output = runner.output_tail()
            self.close()
            raise RunnerError(f"the runner broke the protocol: {exc}", output) from None
        except RunnerError:
            self.close()
            raise

    def device_end_reason(self) -> str:
        """Why the device process ended ("killed: out of memory (limit 4096 MiB)"); "" while it
        answers, or without one."""
        if self._device is None:
            return ""
        try:
            self._device.request({"op": "ping"}, timeout=PING_TIMEOUT_S, bounds=SMALL_REPLY)
            return ""
        except (ProtocolError, RunnerError) as exc:
            self.close()
            return _its(exc).splitlines()[0]

    def _tell_device(self, device: Runner, message: dict, bounds: wire.Bounds, parse):
        """The device's reply to the judge's `message`; a failure of the device itself is no doing of
        the student's, and is told of the device."""
        try:
            return parse(device.request(message, timeout=DEVICE_TIMEOUT_S, bounds=bounds))
        except (ProtocolError, RunnerError) as exc:
            self.close()
            what = "the GPU's device process" if self.gpu_device else "the simulated GPU (device process)"
            raise RunnerError(f"{what} failed: {_its(exc)}") from None

    def replay(self, call: int, substitutions: dict[int, np.ndarray], downloads: list[int],
               originals: list[int] = (), timeout: float = 2 * DEVICE_TIMEOUT_S) -> Replayed:
        """Call number `call`'s device work again (grader.device.replay): `substitutions`, by
        upload number, in place of what the call uploaded; the data of `downloads` (indexes in
        its report), and of those in `originals` as the call made them. RunnerError where the
        device cannot (another call began since, a replay that does not finish within
        `timeout`: the device is restarted)."""
        if self._device is None or call != self.last_call:
            raise RunnerError("the call can no longer be replayed: another call began since")
        message = {"op": "replay", "call": call, "downloads": [int(i) for i in downloads],
                   "originals": [int(i) for i in originals],
                   "substitutions": [{"upload": int(u), "data": np.ascontiguousarray(d)}
                                     for u, d in substitutions.items()]}
        try:
            doc = self._device.request(message, timeout=timeout, bounds=REPLAY_BOUNDS)
            base = wire.Reply.parse(doc)
        except (ProtocolError, RunnerError) as exc:
            self.close()
            raise RunnerError(f"the replay of the call's GPU work did not finish: {exc}") from None
        if not base.ok:
            raise RunnerError(f"the device refused the replay: {base.error.message}")
        if doc.get("diverged") is not None:
            return Replayed(diverged=str(doc["diverged"]))
        found, kept = doc.get("downloads"), doc.get("originals")
        if not (isinstance(found, list) and isinstance(kept, list) and len(found) == len(kept) == len(downloads)
                and all(isinstance(a, np.ndarray) for a in found)
                and all(a is None or isinstance(a, np.ndarray) for a in kept)):
            raise RunnerError("the device's replay reply is malformed")
        return Replayed(found, kept)

    def close(self) -> None:
        for process in (self._runner, self._device):
            if process is not None:
                process.close()
        self._runner = self._device = None


def _answer_shapes(reply) -> list[dict]:
    """The shapes and dtypes of the arrays a call's reply holds (what it returned, its array
    arguments after the call): the device looks for them as leading blocks of its downloads."""
    found: list[dict] = []

    def walk(value):
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, np.ndarray) and value.ndim and len(found) < MAX_ANSWER_SHAPES:
            entry = {"shape": list(value.shape), "dtype": dtypes.describe(value.dtype)}
            if entry not in found:
                found.append(entry)

    walk([getattr(reply, "returned", None), getattr(reply, "args", None)])
    return found


# after a process killed for its memory: what a student should look for
_OUT_OF_MEMORY = " (a kernel whose loop never ends fills the memory as it runs, as does a huge allocation)"


class Student:
    """Calls into one exercise module of a submission, through a runner in a sandbox."""

    def __init__(self, module: str, workspace: str, backend: str, sandbox: Sandbox, devices: int = MAX_RANKS,
                 allowed_imports: frozenset[str] | None = DEFAULT_ALLOWED_IMPORTS,
                 connection: RunnerConnection | None = None, budget: TimeBudget | None = None,
                 call_timeout: float | None = None, declared_in: Path | None = None):
        self.module = module
        self.declared_in = declared_in  # the trusted file declaring the module's functions (messages only)
        self.budget = budget  # shared by the exercise's calls (None: only each call's timeout)
        self.call_timeout = call_timeout  # None: the sandbox's own
        self.workspace = workspace
        self.allowed_imports = allowed_imports
        self._violations: list | None = None
        self._imported = False
        self._import_failure: Exception | None = None
        self.import_notes: list[str] = []  # what a notebook's guarded top-level code raised (feedback)
        # function -> (input bytes of the smallest call of it that timed out, that timeout's message)
        self._timed_out: dict[str, tuple[int, str]] = {}
        self.grids = GridGrowth()  # whether each kernel's grid grows with the input, from the calls seen
        self.connection = connection or RunnerConnection(workspace, backend, sandbox, devices)

    def _check_policy(self) -> None:
        """Before any student code runs: the static policy check, once per module."""
        path = Path(self.workspace) / f"{self.module}.py"
        if not path.is_file():
            raise StudentCodeError("missing", "FileNotFoundError", f"{self.module}.py is not in the submission")
        if self.allowed_imports is None:  # no static check: the sandbox's own tests (it is no defence)
            return
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
                reply = self._timed(lambda t: self.connection.request(
                    {"op": "import", "module": self.module, "watch_s": watch_after(t)}, timeout=t), timeout)
                self._raise_for(reply)
                self._imported = True
                self.import_notes = list(reply.notes) if self._guards_scratch() else []
            except CallTimeout as exc:  # where its top level was stuck (a loop left in a notebook's cell)
                printed, dump = split_dump(exc.output)
                files = {name for name in os.listdir(self.workspace) if name.endswith(".py")}
                self._import_failure = CallTimeout(import_timeout_message(self.module, exc.reason, dump, files),
                                                   printed)
            except (StudentCodeError, RunnerError) as exc:
                self._import_failure = exc
        if self._import_failure is not None:
            raise self._import_failure

    def _guards_scratch(self) -> bool:
        """Whether the module is a notebook's whose top-level scratch runs guarded (grader.course.
        scratch: its prologue line at the top): only then may its import say what that scratch
        raised (a `.py` defining the list itself would put its own words among the results' notes)."""
        from ..course.scratch import PROLOGUE

        try:
            with open(Path(self.workspace) / f"{self.module}.py", encoding="utf-8", errors="replace") as module:
                head = [module.readline().rstrip("\n") for _ in range(12)]  # (after `from __future__` imports)
        except OSError:
            return False
        return PROLOGUE in head

    def _call_limit(self, timeout: float | None) -> float:
        """A call's own timeout (the exercise's budget may cut it shorter)."""
        limit = timeout if timeout is not None else self.call_timeout
        return self.connection.sandbox.limits.call_timeout_s if limit is None else limit

    def _timed(self, request, timeout: float | None):
        """`request(timeout)` within the call's timeout and what is left of the exercise's budget."""
        limit = self._call_limit(timeout)
        if self.budget is None:
            return request(limit)
        started, starting = time.monotonic(), self.connection.start_seconds
        try:
            return request(self.budget.limit(limit))
        finally:  # a runner (re)started meanwhile: its start is the host's time, not the student's
            self.budget.spend(time.monotonic() - started - (self.connection.start_seconds - starting))

    def _timed_call(self, function: str, size: int, request, timeout: float | None):
        """A call of `function` on `size` bytes of input (`request(limit)`, as `_timed`). After a
        call of it timed out, or was killed for its memory, a call on inputs at least as large
        fails at once with that call's reason: an endless loop costs its function one timeout, not
        one per test, and leaves the exercise's budget to its other functions. A timeout says where
        the call was."""
        found = self._timed_out.get(function)
        if found is not None and size >= found[0]:
            again = "fill the memory" if found[1].endswith(_OUT_OF_MEMORY) else "wait as long"
            raise RunnerError(f"not run: {found[1]}; a call on inputs as large would {again} again")
        whole = self.budget is None or self.budget.left >= self._call_limit(timeout)
        try:
            return self._timed(request, timeout)
        except CallTimeout as exc:
            printed, dump = split_dump(exc.output)
            files = {name for name in os.listdir(self.workspace) if name.endswith(".py")}
            message = timeout_message(function, exc.reason, dump, files, exc.kernel_at)
            # (a call the budget's remainder cut short says nothing of the next one)
            if whole and (found is None or size < found[0]):
                self._timed_out[function] = (size, message)
            raise CallTimeout(message, printed) from None
        except RunnerError as exc:
            # a process killed for its memory (a kernel that never ends fills the simulator's as it
            # loops) would be killed again on larger inputs, each after as long: said once, as a timeout
            if "killed: out of memory" not in str(exc):
                raise
            message = f"{function}() was stopped: {str(exc).splitlines()[0]}{_OUT_OF_MEMORY}"
            if found is None or size < found[0]:
                self._timed_out[function] = (size, message)
            raise RunnerError(message, getattr(exc, "output", "")) from None

    def _raise_for_findings(self, device: "wire.DeviceReport | None") -> None:
        """The device's first finding fails the call, whatever the runner says. A lost CUDA
        context (the GPU's device process) also closes the connection: that process is of no
        use any more, the next call starts fresh ones."""
        if device is None or not device.findings:
            return
        finding = device.findings[0]
        if finding.kind == "context_lost":
            self.connection.close()
            raise StudentCodeError("context_lost", finding.type, finding.message)
        raise StudentCodeError("simulator", finding.type, finding.message, finding=finding.finding)

    def _raise_for(self, reply) -> None:
        if not reply.ok:
            error = reply.error
            if error.kind == "context_lost":  # every later CUDA call of that process would fail too
                self.connection.close()       # the next call starts a fresh runner
            message = error.message
            if error.type == "DeviceError" and message.startswith(wire.DEVICE_STOPPED):
                # the runner saw only a closed channel; why the device process ended is the judge's to say
                # (a call's end asks the device and says it; an import's does not)
                reason = self.connection.device_end_reason()
                if reason:
                    message = f"{wire.DEVICE_STOPPED}: {reason}" + (
                        _OUT_OF_MEMORY if "killed: out of memory" in reason else "")
            raise StudentCodeError(error.kind, error.type, message, error.where, error.traceback, error.finding)

    def call(self, function: str, *args: Any, timeout: float | None = None, returns: Returns | None = None,
             flush: bool = False) -> CallResult:
        """`function(*args)` in the runner. `returns`: the shape and dtype the test expects back;
        `flush`: the L2 cache emptied first (a timed call on the GPU's device process)."""
        self._check_policy()
        self._import(timeout)
        sent = [a for a in args]
        arg_bytes = sum(a.nbytes for a in sent if isinstance(a, np.ndarray))
        answer_bytes = returns.reply_bytes if returns is not None else DEFAULT_RETURN_BYTES
        bounds = wire.Bounds(json_bytes=16 << 20, frame_bytes=arg_bytes + answer_bytes)
        started = time.monotonic()
        reply, device = self._timed_call(function, arg_bytes, lambda t: self.connection.call(
            {"op": "call", "module": self.module, "function": function, "args": sent, "watch_s": watch_after(t)},
            t, bounds, lambda doc: wire.CallReply.parse(doc, sent), flush=flush), timeout)
        replay = self._replayer(device, time.monotonic() - started)
        self._raise_for_findings(device)
        self._raise_for(reply)
        launches = [launch.as_dict() for launch in (device.launches if device is not None else reply.launches)]
        self.grids.saw(launches, arg_bytes)
        launches = self.grids.marked(launches)
        if returns is not None:
            _check_returned(function, reply.returned, returns)
        return CallResult(reply.returned, reply.args, launches, device, sent, replay=replay, function=function,
                          parameters=declared_parameters(self.declared_in, function))

    def _replayer(self, device: "wire.DeviceReport | None", seconds: float):
        """`CallResult.replay` for the call just made (`seconds` long, the runner's start aside):
        a replay runs its device work again, so it may take as long (on a busy machine, longer)."""
        if device is None or self.connection.gpu_device:  # (the GPU's device times calls, never replays them)
            return None
        call, connection = self.connection.last_call, self.connection
        limit = max(2 * DEVICE_TIMEOUT_S, 4 * seconds)
        return lambda substitutions, downloads, originals=(): connection.replay(call, substitutions, downloads,
                                                                                originals, limit)

    def call_ranks(self, function: str, buffers: list[np.ndarray], timeout: float | None = None) -> CallResult:
        """`function(ranks, bufs)` in the runner, with one buffer per rank (rank r's copy of
        `buffers[r]` on its device) and rank helpers (grader/backends/ranks.py): the value is every
        rank's buffer after the call, in rank order."""
        self._check_policy()
        self._import(timeout)
        sent = [np.ascontiguousarray(b) for b in buffers]
        total = sum(b.nbytes for b in sent)
        bounds = wire.Bounds(json_bytes=16 << 20, frame_bytes=2 * total + (1 << 20))
        started = time.monotonic()
        reply, device = self._timed_call(function, total, lambda t: self.connection.call(
            {"op": "call", "module": self.module, "function": function, "args": [], "ranks": sent,
             "watch_s": watch_after(t)}, t, bounds, lambda doc: wire.CallReply.parse(doc, [])), timeout)
        replay = self._replayer(device, time.monotonic() - started)
        self._raise_for_findings(device)
        self._raise_for(reply)
        back = reply.returned
        if not (isinstance(back, list) and len(back) == len(sent) and all(
                isinstance(v, np.ndarray) and v.shape == b.shape and v.dtype == b.dtype for v, b in zip(back, sent))):
            self.connection.close()  # the runner's own code sends the buffers back: this is no answer of the student's
            raise RunnerError("the runner broke the protocol: a call with ranks must return one buffer per rank")
        launches = [launch.as_dict() for launch in (device.launches if device is not None else reply.launches)]
        return CallResult(reply.returned, [], launches, device, sent, ranks=True, replay=replay)

    def time(self, function: str, input_sets: list, *, timeout: float | None = None,
             returns: "Returns | None" = None, check=None, **options: Any) -> "TimedResult":
        """Time `function` on each input set in turn with the backend's harness in the runner (gpu:
        CUDA events per kernel, warm-up, L2 flush, adaptive repeats; `options` tune it), bounded
        by this side's clock: kernel times adding up to more than the wall time the judge saw
        are a forgery. The last output of each set comes back, re-checked with `check(inputs,
        output)` where given."""
        self._check_policy()
        self._import(timeout)
        sets = [list(inputs) for inputs in input_sets]
        arg_bytes = sum(a.nbytes for inputs in sets for a in inputs if isinstance(a, np.ndarray))
        bounds = wire.Bounds(json_bytes=16 << 20, frame_bytes=arg_bytes + len(sets) * (
            returns.reply_bytes if returns is not None else DEFAULT_RETURN_BYTES))
        with self.connection.alone():  # no other grade's kernels on the GPU meanwhile
            started = time.monotonic()
            reply, _ = self._timed(lambda t: self.connection.call(
                {"op": "time", "module": self.module, "function": function, "input_sets": sets, "options": options},
                t, bounds, lambda doc: wire.TimingReply.parse(doc, len(sets)), report=False), timeout)
            wall = time.monotonic() - started
        self._raise_for(reply)
        if sum(reply.times_ms) / 1e3 > wall:
            self.connection.close()
            raise RunnerError(f"the runner's kernel times add up to {sum(reply.times_ms) / 1e3:.3f} s, more than "
                              f"the {wall:.3f} s the judge waited: a forged timing")
        if returns is not None:
            for out in reply.outputs:
                _check_returned(function, out, returns)
        for inputs, output in zip(sets, reply.outputs):
            if check is not None:
                check(inputs, output)
        return TimedResult(reply.times_ms, reply.launches_per_call, reply.stopped, reply.device, reply.outputs, wall)

    def gpu_count(self) -> int:
        """The GPUs the runner's backend can spread an all-reduce's ranks over (its
        `rank_devices()`: the machine's GPUs; 8 virtual devices on the simulator)."""
        base, doc = self.connection.request({"op": "rank_devices"}, parse=lambda doc: (wire.Reply.parse(doc), doc))
        if not base.ok:
            raise RunnerError(f"the runner could not count its GPUs: {base.error.message}")
        devices = doc.get("devices")
        if isinstance(devices, bool) or not isinstance(devices, int) or not 1 <= devices <= MAX_RANK_DEVICES:
            self.connection.close()
            raise RunnerError(f"the runner broke the protocol: it counts {str(devices)[:40]!r} GPUs")
        return devices

    def time_ranks(self, function: str, ranks: int, count: int, *, warmup: int = 5, timed: int = 20,
                   timeout: float | None = None) -> "RanksTiming":
        """Time the student's all-reduce `function(ranks, bufs)` in the runner, the nccl-tests way
        (grader/backends/collective_timing.py): `ranks` ranks as a call with ranks has them (rank r
        on GPU r where the machine has enough, else all on GPU 0), float32 zero buffers of `count`
        elements each, `warmup` calls untimed, then `timed` calls each timed on the host until
        every rank is synchronised. The buffers must still be zeros afterwards (StudentCodeError
        if not). The times are the student's process's: their sum is bounded by this side's clock
        (RunnerError: a forged timing). `Unavailable` on a backend that times nothing."""
        _check_collective(ranks, count, warmup, timed)
        self._check_policy()
        self._import(timeout)
        message = {"op": "time_ranks", "module": self.module, "function": function, "ranks": ranks,
                   "count": count, "warmup": warmup, "timed": timed}
        with self.connection.alone():
            started = time.monotonic()
            reply, _ = self._timed(lambda t: self.connection.call(
                message, t, SMALL_REPLY, lambda doc: wire.RanksTimingReply.parse(doc, timed, ranks), report=False),
                timeout)
            wall = time.monotonic() - started
        if not reply.ok and reply.error.kind == "unavailable":
            raise Unavailable(f"the student's all-reduce cannot be timed here: {reply.error.message}")
        self._raise_for(reply)
        self._check_clock(reply.seconds, wall)
        return RanksTiming(list(reply.seconds), ranks, 4 * count, reply.devices, wall, reply.device)

    def nccl_allreduce(self, ranks: int, count: int, *, warmup: int = 5, timed: int = 20,
                       timeout: float | None = None) -> "RanksTiming":
        """NCCL's in-place float32 all-reduce (CuPy's `cupy.cuda.nccl`), rank r on GPU r, timed in
        this runner exactly as `time_ranks` times a student's: only in the trusted reference
        runner (a student's process never reports the baseline it is graded against).
        `Unavailable` (with the reason) where CuPy, NCCL or `ranks` GPUs are missing, or on the
        simulator; RunnerError if NCCL itself fails."""
        _check_collective(ranks, count, warmup, timed)
        if not self.connection.trusted:
            raise ValueError("NCCL is timed only in the trusted reference runner (the `reference` fixture), "
                             "never in the student's")
        message = {"op": "nccl_allreduce", "ranks": ranks, "count": count, "warmup": warmup, "timed": timed}
        with self.connection.alone():
            started = time.monotonic()
            reply = self._timed(lambda t: self.connection.request(
                message, timeout=t, parse=lambda doc: wire.RanksTimingReply.parse(doc, timed, ranks)), timeout)
            wall = time.monotonic() - started
        if not reply.ok:
            if reply.error.kind == "unavailable":
                raise Unavailable(f"NCCL's all-reduce cannot be timed here: {reply.error.message}")
            self.connection.close()  # whatever NCCL left behind, the next request gets a fresh runner
            raise RunnerError(f"NCCL's all-reduce failed in the reference runner: {reply.error.type}: "
                              f"{reply.error.message}")
        self._check_clock(reply.seconds, wall)
        return RanksTiming(list(reply.seconds), ranks, 4 * count, reply.devices, wall, reply.device)

    def _check_clock(self, seconds: list[float], wall: float) -> None:
        """Timed calls adding up to more than the wall time the judge waited cannot be true."""
        if sum(seconds) > wall:
            self.connection.close()
            raise RunnerError(f"the runner's timed calls add up to {sum(seconds):.3f} s, more than the "
                              f"{wall:.3f} s the judge waited: a forged timing")

    def library_seconds(self, what: str, shape) -> float:
        """A library's median seconds on the same problem on this GPU (`what`: "matmul", shape
        (M, K, N): cuBLAS SGEMM; "sum", shape (n,): CuPy's reduction), timed in the trusted
        reference runner only. `Unavailable` (with the reason) without CuPy or a GPU, or on the
        simulator; RunnerError if the library itself fails."""
        if not self.connection.trusted:
            raise ValueError("library baselines are timed only in the trusted reference runner")
        with self.connection.alone():
            base, doc = self.connection.request({"op": "library_time", "what": what,
                                                 "shape": [int(d) for d in shape]},
                                                parse=lambda doc: (wire.Reply.parse(doc), doc))
        if not base.ok:
            if base.error.kind == "unavailable":
                raise Unavailable(f"the {what} library baseline cannot be timed here: {base.error.message}")
            raise RunnerError(f"the {what} library baseline failed: {base.error.type}: {base.error.message}")
        ms = doc.get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms > 0:
            raise RunnerError(f"the {what} library baseline answered {ms!r}")
        return ms / 1e3

    def copy_bandwidth(self, nbytes: int) -> float:
        """Bytes per second of a device-to-device copy of `nbytes` on this runner's GPU (read + write)."""
        with self.connection.alone():
            base, doc = self.connection.request({"op": "copy_bandwidth", "nbytes": int(nbytes)},
                                                parse=lambda doc: (wire.Reply.parse(doc), doc))
        if not base.ok:
            raise RunnerError(f"the copy-bandwidth baseline failed: {base.error.message}")
        ms = doc.get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms > 0:
            raise RunnerError(f"the copy-bandwidth baseline answered {ms!r}")
        return 2 * nbytes / (ms / 1e3)

    @property
    def stock_simulator(self) -> bool:
        """numba's stock simulator stands in for the GPU here: timings prove nothing."""
        return bool(getattr(self.connection.sandbox.limits, "stock_simulator", False))

    def close(self) -> None:
        self.connection.close()


@dataclass
class TimedResult:
    """Timed calls of one function: kernel ms per call (CUDA events), median and spread."""

    times_ms: list[float]
    launches_per_call: int
    stopped: str
    device: str
    outputs: list
    judge_wall_s: float

    @property
    def median_ms(self) -> float:
        import statistics

        return statistics.median(self.times_ms)

    @property
    def spread(self) -> float:
        """Interquartile range over the median (0 for a single call)."""
        import statistics

        if len(self.times_ms) < 4 or self.median_ms <= 0:
            return 0.0
        q = statistics.quantiles(self.times_ms, n=4)
        return (q[2] - q[0]) / self.median_ms


@dataclass
class RanksTiming:
    """An all-reduce timed the nccl-tests way (`Student.time_ranks`, `Student.nccl_allreduce`):
    the host seconds of each timed call (the call and every rank synchronised), on `ranks` rank
    buffers of `nbytes` each spread over `devices` GPUs (1: the ranks emulated on one GPU), the
    wall time the judge waited for all of it, and the GPU's name as the runner gave it."""

    seconds: list[float]
    ranks: int
    nbytes: int
    devices: int
    judge_wall_s: float
    device: str = ""

    @property
    def median_s(self) -> float:
        import statistics

        return statistics.median(self.seconds)

    def algbw_gbs(self) -> float:
        """nccl-tests' algorithm bandwidth, GB/s (10^9 bytes): a rank buffer's bytes over the median."""
        from ..backends.collective_timing import algbw_gbs

        return algbw_gbs(self.nbytes, self.median_s)

    def busbw_gbs(self) -> float:
        """nccl-tests' bus bandwidth, GB/s: algbw * 2 (N - 1) / N (what each rank's links carry)."""
        from ..backends.collective_timing import busbw_gbs

        return busbw_gbs(self.nbytes, self.median_s, self.ranks)


def _check_collective(ranks: int, count: int, warmup: int, timed: int) -> None:
    """The judge's own request, checked before it is sent (the runner checks it again)."""
    from ..backends.collective_timing import MAX_COUNT, MAX_TIMED, MAX_WARMUP

    for name, value, low, high in (("ranks", ranks, 1, MAX_RANKS * 16), ("count", count, 1, MAX_COUNT),
                                   ("warmup", warmup, 0, MAX_WARMUP), ("timed", timed, 1, MAX_TIMED)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name}: {value!r} is not an integer from {low} to {high}")


_STOCK_SIMULATOR_LACKS = re.compile(r"'FakeCUDAModule' object has no attribute '(\w+)'")


class BesideTheSimulator:
    """A submission on a GPU machine: every call runs on the GPU and, with the same inputs, on the
    simulator's device process. The answer the tests check is the GPU's; the simulator's call is
    the proof (its findings fail the call, its device report is the data flow, its counters the
    performance criteria): records kept in the student's own process on the GPU are feedback only.
    Timing is the GPU's device process's.

    `timer`: the module in a runner whose device is the GPU's device process (grader.device.
    gpu_server); the calls on the GPU and the timings go there, so the student's host code never
    holds the GPU itself. `gpu`: a runner on the GPU itself, for what the device process does not
    serve: an all-reduce's multi-GPU timing (closed after it, so that nothing of the student's
    runs on the GPU outside the judge's calls), and, for the trusted reference, the copy bandwidth,
    library and NCCL baselines."""

    def __init__(self, gpu: "Student", sim: "Student", timer: "Student | None" = None):
        self.gpu, self.sim = gpu, sim
        self.timer = timer
        self.notes: list[str] = []  # what the stock simulator could not run, said once in the results

    @property
    def _on(self) -> "Student":
        return self.timer if self.timer is not None else self.gpu

    @property
    def import_notes(self) -> list[str]:
        heard = (n for s in (self.gpu, self.sim, self.timer) if s is not None for n in s.import_notes)
        return list(dict.fromkeys([*heard, *self.notes]))

    def call(self, function: str, *args: Any, timeout: float | None = None, returns: "Returns | None" = None
             ) -> CallResult:
        on_gpu = self._on_gpu(lambda: self._on.call(function, *args, timeout=timeout, returns=returns))
        on_sim = self.sim.call(function, *args, timeout=timeout, returns=returns)
        answered = on_gpu or on_sim
        return CallResult(answered.value, answered.args, on_sim.launches, on_sim.device, answered.sent, proof=on_sim)

    def call_ranks(self, function: str, buffers: list[np.ndarray], timeout: float | None = None) -> CallResult:
        on_gpu = self._on_gpu(lambda: self._on.call_ranks(function, buffers, timeout=timeout))
        on_sim = self.sim.call_ranks(function, buffers, timeout=timeout)
        answered = on_gpu or on_sim
        return CallResult(answered.value, [], on_sim.launches, on_sim.device, answered.sent, proof=on_sim, ranks=True)

    def _on_gpu(self, call) -> "CallResult | None":
        """`call()` on the GPU; None where numba's stock simulator stands in for the GPU and lacks
        what the student's code uses (it has no warp shuffles). The answer checked is then the
        simulator's, from the same call beside it (which also raises what it finds): on the stock
        simulator this path proves plumbing, not the GPU's answer, and the results say so."""
        try:
            return call()
        except StudentCodeError as exc:
            missing = self._stock_simulator_lacks(exc)
            if missing is None:
                raise
            note = (f"numba's stock simulator has no cuda.{missing}: calls that use it were answered by gpugrade's "
                    f"simulator beside it (the same inputs; their answers checked), and their GPU timing is not "
                    f"graded here")
            if note not in self.notes:
                self.notes.append(note)
            return None

    def _stock_simulator_lacks(self, exc: StudentCodeError) -> str | None:
        missing = _STOCK_SIMULATOR_LACKS.search(exc.message) if self.gpu.stock_simulator else None
        return missing[1] if missing is not None and exc.exc_type == "AttributeError" else None

    def time(self, function: str, input_sets: list, check=None, returns: "Returns | None" = None,
             **options: Any) -> "TimedResult":
        """`function` timed on the GPU by the GPU's device process, the judge calling it with
        fresh inputs and checking every answer (grader.judge.gpu_timing); never by the harness
        in the student's own runner (`Student.time`: its word, bounded by the judge's clock)."""
        if self.timer is None:
            raise RuntimeError("no timer: a submission on a GPU is timed by a GPU device process (plugin)")
        from .gpu_timing import time_calls

        try:
            return time_calls(self.timer, function, input_sets, check, returns, **options)
        except StudentCodeError as exc:
            missing = self._stock_simulator_lacks(exc)
            if missing is None:
                raise
            import pytest

            pytest.skip(f"numba's stock simulator, standing in for the GPU here, has no cuda.{missing}: the gpu "
                        f"backend's timing cannot run this call on it, so its speed is not graded here (its counters "
                        f"were, on gpugrade's simulator)")

    def copy_bandwidth(self, nbytes: int) -> float:
        return self.gpu.copy_bandwidth(nbytes)

    def library_seconds(self, what: str, shape) -> float:
        return self.gpu.library_seconds(what, shape)

    def gpu_count(self) -> int:
        return self.timer.connection.device_gpus() if self.timer is not None else self.gpu.gpu_count()

    def time_ranks(self, *args: Any, **kwargs: Any) -> "RanksTiming":
        try:
            return self.gpu.time_ranks(*args, **kwargs)
        finally:  # its runner holds the GPU: not a moment longer than this timing
            self.gpu.connection.close()

    def nccl_allreduce(self, *args: Any, **kwargs: Any) -> "RanksTiming":
        return self.gpu.nccl_allreduce(*args, **kwargs)

    @property
    def stock_simulator(self) -> bool:
        return self.gpu.stock_simulator

    def close(self) -> None:
        self.gpu.close()
        self.sim.close()
        if self.timer is not None:
            self.timer.close()


def _check_returned(function: str, value: Any, returns: Returns) -> None:
    from .correctness import WrongAnswer

    if not isinstance(value, np.ndarray) or value.shape != returns.shape or value.dtype != returns.dtype:
        got = f"{value.dtype}{list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
        # the first line says what is wrong and how to mend it, alike for every size (one failure
        # in the report for every test it fails); the second the sizes of this call
        raise WrongAnswer(f"{_what_is_wrong(function, value, returns)}\n"
                          f"returned {got}; expected {returns.dtype}{list(returns.shape)}")


def _a(word: Any) -> str:
    """`word` with its article: "an int32", "a float32"."""
    return f"{'an' if str(word)[:1] in 'aeiou' else 'a'} {word}"


def _what_is_wrong(function: str, value: Any, returns: Returns) -> str:
    if value is None:
        return f"{function}() returned None; expected {_a(returns.dtype)} array (a missing `return`?)"
    if not isinstance(value, np.ndarray):
        return f"{function}() returned {_a(type(value).__name__)}; expected {_a(returns.dtype)} array"
    if value.shape == returns.shape:
        return (f"{function}() returned {_a(value.dtype)} array; expected {returns.dtype} (allocate the output as "
                f"{returns.dtype}, e.g. cuda.device_array(shape, np.{returns.dtype}), or convert the result with "
                f".astype(np.{returns.dtype}))")
    if value.ndim == len(returns.shape) and all(d >= e for d, e in zip(value.shape, returns.shape)):
        block = {1: "out[:n]", 2: "out[:M, :N]"}.get(len(returns.shape), "out[:d0, :d1, ...]")
        return (f"{function}() returned an array larger than the answer (a padded output? return its leading "
                f"block, {block})")
    if value.size == int(np.prod(returns.shape, dtype=np.int64)):
        return f"{function}() returned an array of the answer's size in another shape (reshape it)"
    return f"{function}() returned an array of the wrong shape"
