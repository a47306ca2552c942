"""How a runner process is confined.

`process` (default): a child process in its own session (the whole group is killed on timeout),
its working directory a fresh workspace holding only the student's files, CPU-time and file-size
limits, output captured to a capped file; as root also namespaces and uid nobody (grader.isolation).
`none`: the same child process without any limit but the call timeout, for debugging.
`docker` (grader.docker_sandbox): one container per runner, same `start() -> runner` interface.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

from . import cgroups, isolation, protocol
from .errors import RunnerError, UsageError

SANDBOXES = ("process", "docker", "none")


@dataclass(frozen=True)
class Limits:
    call_timeout_s: float = 120.0   # wall time of one call, judged from the judge's side
    cpu_time_s: int = 900           # CPU seconds for the whole runner process
    file_size_bytes: int = 64 << 20  # any file the student writes (output goes to a drained pipe)
    output_tail_bytes: int = 4096   # how much of the student's output is kept for messages
    processes: int = 256            # threads + processes of the runner's uid (a fork bomb stops here)
    isolate: bool = True            # as root: own mount + network namespaces, uid nobody
    hidden_paths: tuple[str, ...] = ()  # folders the student must not read (solutions/, tests/)
    confine: bool = True            # False (`--sandbox none`): no rlimits, no namespaces
    memory_bytes: int = 4 << 30     # the runner's memory, as root (cgroup v1); else RLIMIT_DATA on the sim


def _confine(limits: Limits, groups: cgroups.RunnerCgroups | None, backend: str) -> None:
    """Runs in the child between fork and exec."""
    os.setsid()
    if not limits.confine:
        return
    if groups is not None:
        groups.join()
    elif backend == "sim":  # no cgroups (not root): the heap limit. Never with CUDA (huge mappings)
        resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.isolate and isolation.can_isolate():
        as_nobody = _nobody_can_run()
        isolation.isolate(limits.hidden_paths, as_nobody)
        if as_nobody:  # a per-uid limit: meaningless for root
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


def _nobody_can_run() -> bool:
    """`nobody` must be able to start this interpreter and import the grader and its dependencies."""
    import numpy

    return all(isolation.reachable_by_others(p) for p in (sys.executable, __file__, numpy.__file__))


def exchange_within(exchange: Callable[[], Any], timeout: float, runner: "Runner") -> Any:
    """Run `exchange()` (send a request, read its reply) with a deadline judged from this side.

    Past the deadline the runner is killed (which ends the blocked read) and RunnerError raised.
    Returns the reply, or the exception the exchange ended with, for the caller to explain.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(exchange())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        runner.kill()
        worker.join(5)
        raise RunnerError(f"timed out after {timeout:g} s", runner.output_tail())
    return outcome[0]


class RunnerProcess:
    """One live runner: send a request, get the reply within a deadline, or a RunnerError."""

    def __init__(self, workspace: str, backend: str, devices: int, limits: Limits):
        self.limits = limits
        req_r, self._req_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        self._groups = (cgroups.RunnerCgroups(limits.memory_bytes, limits.processes)
                        if limits.confine and cgroups.available() else None)
        self._scratch = tempfile.TemporaryDirectory(prefix="gpugrade-runner-")
        if limits.isolate and isolation.can_isolate() and _nobody_can_run():
            os.chown(self._scratch.name, isolation.NOBODY, isolation.NOBODY)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRADE_")}
        # The runner's only writable place: home, temp files and caches.
        env.update(HOME=self._scratch.name, TMPDIR=self._scratch.name, NUMBA_CACHE_DIR=self._scratch.name,
                   GPUGRADE_CACHE_DIR=self._scratch.name, PYTHONDONTWRITEBYTECODE="1")
        env.pop("NUMBA_ENABLE_CUDASIM", None)  # our simulator, never numba's
        argv = [sys.executable, "-I", "-m", "grader.runner", "--workspace", workspace, "--backend", backend,
                "--devices", str(devices), "--in-fd", str(req_r), "--out-fd", str(resp_w)]
        groups = self._groups
        self.proc = subprocess.Popen(argv, cwd=workspace, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, pass_fds=(req_r, resp_w),
                                     preexec_fn=lambda: _confine(limits, groups, backend))
        os.close(req_r)
        os.close(resp_w)
        self._to = os.fdopen(self._req_w, "wb")
        self._from = os.fdopen(self._resp_r, "rb")
        # The student's output is drained as it comes and only its tail kept: a flood costs the
        # student time, never the judge's memory or disk.
        self._tail = bytearray()
        self._drain = threading.Thread(target=self._drain_output, daemon=True)
        self._drain.start()

    def _drain_output(self) -> None:
        keep = self.limits.output_tail_bytes
        while chunk := self.proc.stdout.read1(1 << 16):
            self._tail += chunk
            if len(self._tail) > 2 * keep:
                del self._tail[:-keep]

    def output_tail(self) -> str:
        self._drain.join(0.2)  # what the runner wrote just before it answered or died
        return bytes(self._tail[-self.limits.output_tail_bytes:]).decode(errors="replace")

    def request(self, message: Any, timeout: float | None = None) -> Any:
        timeout = self.limits.call_timeout_s if timeout is None else timeout
        result = exchange_within(lambda: protocol.exchange(self._to, self._from, message), timeout, self)
        if isinstance(result, BaseException):
            self.kill()
            raise RunnerError(self._death_reason(result), self.output_tail())
        return result

    def _death_reason(self, exc: BaseException) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"the runner broke the protocol: {exc}"
        if self._groups is not None and self._groups.oom_killed():
            return f"killed: out of memory (limit {self.limits.memory_bytes >> 20} MiB)"
        if code < 0:
            name = signal.Signals(-code).name
            if -code == signal.SIGXCPU:
                return f"killed: CPU time limit of {self.limits.cpu_time_s} s exceeded"
            return f"crashed: killed by {name}"
        return f"the student's process exited with code {code} before answering"

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._groups is not None:  # also whatever left the process group (setsid, double fork)
            self._groups.kill_all()
        self.proc.wait()

    def close(self) -> None:
        # Kill first: a thread may still be blocked reading the reply, holding the stream's lock
        # until the runner's end of the pipe closes. Nothing of the runner's needs an orderly exit.
        self.kill()
        for stream in (self._to, self._from):
            try:
                stream.close()
            except OSError:
                pass
        self._drain.join(1)
        self.proc.stdout.close()
        if self._groups is not None:
            self._groups.remove()
        self._scratch.cleanup()


class ProcessSandbox:
    name = "process"

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits

    def start(self, workspace: str, backend: str, devices: int = 1) -> RunnerProcess:
        return RunnerProcess(workspace, backend, devices, self.limits)


class NoSandbox(ProcessSandbox):
    """`none`: a plain child process, for debugging; only the judge's call timeout still applies."""

    name = "none"

    def __init__(self, limits: Limits = Limits()):
        super().__init__(replace(limits, confine=False, isolate=False))


class Runner(Protocol):
    """What the judge needs from a live runner, whatever confines it."""

    def request(self, message: Any, timeout: float | None = None) -> Any: ...
    def output_tail(self) -> str: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class Sandbox(Protocol):
    name: str

    def start(self, workspace: str, backend: str, devices: int = 1) -> Runner: ...


@dataclass(frozen=True)
class SandboxSpec:
    """The sandbox chosen on the command line: `--sandbox`, `--docker-image`, `--gpus`."""

    name: str = "process"
    docker_image: str = "gpugrade-runner:latest"
    gpus: str = ""  # docker only: "" = no GPU device request, "all" or device ids "0,1"

    def check(self, backend: str) -> None:
        if self.name not in SANDBOXES:
            raise UsageError(f"unknown sandbox {self.name!r}; choose one of {', '.join(SANDBOXES)}")
        if self.gpus and self.name != "docker":
            raise UsageError("--gpus applies to --sandbox docker only (other sandboxes see the machine's GPUs)")
        if self.name == "docker" and backend == "gpu" and not self.gpus:
            raise UsageError("--backend gpu in the docker sandbox needs --gpus (e.g. --gpus all)")


def make_sandbox(spec: SandboxSpec, limits: Limits) -> Sandbox:
    if spec.name == "docker":
        from .docker_sandbox import DockerSandbox, DockerSettings

        return DockerSandbox(limits, DockerSettings(image=spec.docker_image, gpus=spec.gpus))
    if spec.name == "none":
        return NoSandbox(limits)
    if spec.name == "process":
        return ProcessSandbox(limits)
    raise UsageError(f"unknown sandbox {spec.name!r}; choose one of {', '.join(SANDBOXES)}")
