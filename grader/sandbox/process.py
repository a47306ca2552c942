"""`--sandbox process` (default) and `--sandbox none`: a runner as a child process of the judge.

`process`: the runner in a bubblewrap sandbox (grader.sandbox.bubblewrap: its own namespaces, a
read-only view of only what it needs, its own unprivileged uid, private /tmp and /dev/shm, an
allowlisted environment), with limits set from outside before it starts and not reachable from
inside: CPU time, file size and core rlimits, and as root a memory and a pids cgroup
(grader.sandbox.cgroups; the cgroup filesystem is not in its view). Every process of the runner
ends with it: it is pid 1's child in its own PID namespace, bubblewrap dies with the judge, and
the cgroup is emptied on close. Its output is drained through a pipe, only the tail kept.
`none`: a plain child process, no limits but the judge's call timeout, for debugging.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from typing import Any

from .. import wire
from ..backends import Kind
from ..errors import RunnerError
from . import bubblewrap, cgroups
from .base import Limits, death_reason, exchange_within, runner_uid


@functools.cache
def isolated_import_problem() -> str | None:
    """Why a runner started here (`python -I -m grader.runner`: -I ignores PYTHONPATH and the
    current folder) would not run this grader, or None. Without it every test fails with the
    runner's "No module named 'grader'", or runs another installed copy's code."""
    import grader

    mine = os.path.dirname(os.path.realpath(grader.__file__))
    try:
        done = subprocess.run([sys.executable, "-I", "-c", "import grader, os; print(os.path.realpath(grader.__file__))"],
                              capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{sys.executable} could not start: {exc}"
    theirs = os.path.dirname(done.stdout.strip()) if done.returncode == 0 else ""
    if theirs == mine:
        return None
    found = (f"imports another grader ({theirs}) than this one ({mine})" if theirs
             else f"cannot import grader (this one is at {mine})")
    return (f"runners start as `{sys.executable} -I -m grader.runner`, which ignores PYTHONPATH, and that "
            f"way this Python {found}: install this checkout into it (`pip install -e .`, or `make setup`)")


def _confine(limits: Limits, groups: cgroups.RunnerCgroups | None, backend: str, own_uid: bool) -> None:
    """Runs in the child between fork and exec (of bubblewrap, or setpriv): limits it cannot undo.
    `own_uid`: the runner runs as a uid of its own, which a per-uid limit binds alone."""
    os.setsid()
    if not limits.confine:
        return
    if groups is not None:
        groups.join()
    elif backend == Kind.SIM:  # no cgroups (not root): the heap limit. Never with CUDA (huge mappings)
        resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if own_uid:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


PIPE_BYTES = 1 << 20  # Linux's pipe-max-size for a user


def _widen(fd: int) -> None:
    """The pipe under `fd` holds PIPE_BYTES: through Linux's default 64 KiB, 64 MiB (a GPU timing's
    array of 2^24 floats) crossed in 105 ms here, through 1 MiB in 23 ms. Where the user's pipes
    already hold their share (pipe-user-pages-soft), it stays as it was."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass


class RunnerProcess:
    """One live runner: send a request, get the reply within a deadline, or a RunnerError."""

    def __init__(self, workspace: str | None, backend: str, limits: Limits, trusted: bool = False,
                 module: str = "grader.runner", args: tuple[str, ...] = (), fds: tuple[int, ...] = (),
                 scratch: tempfile.TemporaryDirectory | None = None):
        """`python -m module *args --in-fd --out-fd --workspace W` confined; `fds` are passed to it
        (and closed here); `workspace` None: an empty one (the device process); `scratch`: the
        folder of its own files, made beforehand (else here), removed with it."""
        self.limits = limits
        self.on_close: list = []  # what else goes with this process (a socket folder)
        self._scratch = scratch or tempfile.TemporaryDirectory(prefix="gpugrade-runner-")
        confined = limits.confine
        self.uid = runner_uid(trusted) if confined and bubblewrap.as_root() else None
        self._groups = (cgroups.RunnerCgroups(limits.memory_bytes, limits.processes)
                        if confined and cgroups.available() else None)
        if workspace is None:
            workspace = os.path.join(self._scratch.name, "empty")
            os.mkdir(workspace)
        req_r, self._req_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        _widen(self._req_w)
        _widen(self._resp_r)
        runner = ["-I", "-m", module, *args, "--in-fd", str(req_r), "--out-fd", str(resp_w)]
        passed = [req_r, resp_w, *fds]
        if confined:
            argv, env, cwd, more = self._confined([sys.executable, *runner], workspace, backend)
            passed += more
        else:
            argv = [sys.executable, *runner, "--workspace", workspace]
            env = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRADE_")}
            env.update(HOME=self._scratch.name, TMPDIR=self._scratch.name, NUMBA_CACHE_DIR=self._scratch.name,
                       GPUGRADE_CACHE_DIR=self._scratch.name, PYTHONDONTWRITEBYTECODE="1")
            cwd = workspace
        env.pop("NUMBA_ENABLE_CUDASIM", None)  # our simulator, never numba's (unless standing in for a GPU)
        if not confined:
            env.update(limits.runner_env(backend))
        groups, own_uid = self._groups, self.uid is not None
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, pass_fds=passed,
                                     preexec_fn=lambda: _confine(limits, groups, backend, own_uid))
        for fd in passed:
            os.close(fd)
        self._to = os.fdopen(self._req_w, "wb")
        self._from = os.fdopen(self._resp_r, "rb")
        # The student's output is drained as it comes and only its tail kept: a flood costs the
        # student time, never the judge's memory or disk.
        self._tail = bytearray()
        self._drain = threading.Thread(target=self._drain_output, daemon=True)
        self._drain.start()

    def _confined(self, command: list[str], workspace: str, backend: str
                  ) -> tuple[list[str], dict[str, str], str, list[int]]:
        """(argv, environment, cwd, fds to pass) that run `command --workspace ...` confined, over
        a copy of `workspace`: here in bubblewrap's view of the machine."""
        staged = bubblewrap.stage_workspace(workspace, self._scratch.name, self.uid)
        view = bubblewrap.View(staged, self.uid, self.limits.tmp_bytes, gpu=backend == Kind.GPU,
                               env=self.limits.runner_env(backend))
        argv, args_fd = view.command([*command, "--workspace", bubblewrap.WORKSPACE])
        return argv, {}, "/", [args_fd]

    def _drain_output(self) -> None:
        keep = self.limits.output_tail_bytes
        while chunk := self.proc.stdout.read1(1 << 16):
            self._tail += chunk
            if len(self._tail) > 2 * keep:
                del self._tail[:-keep]

    def output_tail(self) -> str:
        self._drain.join(0.2)  # what the runner wrote just before it answered or died
        return bytes(self._tail[-self.limits.output_tail_bytes:]).decode(errors="replace")

    def request(self, message: Any, timeout: float | None = None, bounds: wire.Bounds = wire.Bounds()) -> Any:
        timeout = self.limits.call_timeout_s if timeout is None else timeout
        result = exchange_within(lambda: wire.exchange(self._to, self._from, message, bounds), timeout, self)
        if isinstance(result, BaseException):
            if isinstance(result, wire.ProtocolError):  # alive and talking nonsense: say so, not "SIGKILL"
                self.kill()
                raise RunnerError(f"the runner broke the protocol: {result}", self.output_tail())
            reason = self._death_reason(result)  # it ended (or is ending) by itself: why
            self.kill()
            raise RunnerError(reason, self.output_tail())
        return result

    def _death_reason(self, exc: BaseException) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"the runner broke the protocol: {exc}"
        if self._groups is not None and self._groups.oom_killed():
            return f"killed: out of memory (limit {self.limits.memory_bytes >> 20} MiB)"
        return death_reason(code, self.limits, signalled_as_128_plus=self.limits.confine)  # bubblewrap's pid 1

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
        for undo in self.on_close:
            undo()


class ProcessSandbox:
    name = "process"

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits

    hosts_device = True  # can confine a device process beside each runner (start_device)
    runner_type = RunnerProcess  # how each runner is confined: here bubblewrap's view

    def _check(self) -> None:
        if self.limits.confine:
            reason = self.unavailable()
            if reason is not None:
                raise RunnerError(reason)

    @staticmethod
    def unavailable() -> str | None:
        """Why this sandbox cannot confine a runner here, or None."""
        return bubblewrap.unavailable()

    def start(self, workspace: str, backend: str, devices: int = 1, trusted: bool = False,
              device: int | None = None) -> RunnerProcess:
        """`device`: the link `start_device` gave (the runner's end of its socket)."""
        self._check()
        args = ("--backend", backend, "--devices", str(devices))
        fds: tuple[int, ...] = ()
        if device is not None:
            args += ("--device-fd", str(device))
            fds = (device,)
        return self.runner_type(workspace, backend, self.limits, trusted, args=args, fds=fds,
                                scratch=self._scratch_for(device))

    def _scratch_for(self, device: int | None) -> tempfile.TemporaryDirectory | None:
        """The runner's scratch folder, where one was made for it with its device process."""
        return None

    def start_device(self, devices: int, runner_workspace: str, trusted: bool = False, gpu: bool = False,
                     sources: dict[str, str] | None = None) -> tuple[RunnerProcess, int]:
        """The device process (grader.device) for one runner, in a sandbox of its own (another
        uid, view and namespaces than the runner's; `gpu`: the machine's GPU in its view, and
        device memory and launches there); returns it and the link to give `start` (the
        runner's end of a socket pair); `sources`: the judge's digests of the workspace's files, the
        only texts the device builds kernels from."""
        self._check()
        runner_end, device_end = socket.socketpair()
        try:
            return self.device_process(devices, runner_workspace, trusted, "--runner-fd", device_end.detach(), gpu,
                                       sources), \
                runner_end.detach()
        except BaseException:
            runner_end.close()
            raise

    def _seen_as(self, runner_workspace: str) -> str:
        """The runner's workspace as the runner sees it (the device's messages name files from there)."""
        return bubblewrap.WORKSPACE if self.limits.confine else runner_workspace

    def device_process(self, devices: int, runner_workspace: str, trusted: bool, flag: str, fd: int,
                       gpu: bool = False, sources: dict[str, str] | None = None) -> RunnerProcess:
        """`python -m grader.device` confined, its runner socket `fd` (connected, or listening)."""
        self._check()
        return self.runner_type(None, Kind.GPU if gpu else Kind.SIM, self.limits, trusted, module="grader.device",
                                args=("--devices", str(devices), flag, str(fd), "--runner-workspace",
                                      self._seen_as(runner_workspace)) + (("--gpu",) if gpu else ())
                                + (("--sources", json.dumps(sources)) if sources is not None else ()), fds=(fd,))


class NoSandbox(ProcessSandbox):
    """`none`: a plain child process, for debugging; only the judge's call timeout still applies."""

    name = "none"

    def __init__(self, limits: Limits = Limits()):
        super().__init__(replace(limits, confine=False))
