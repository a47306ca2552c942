"""What every sandbox shares: the limits, the `Runner` and `Sandbox` protocols, the deadline-bound
exchange, and the uids runners run as.

Uids: every runner gets a uid of its own, never 0 and never one a user of the machine has, drawn
from a range for student runners and another for the trusted reference runner. Two runners of one
grade, of two students graded at once, or a student's and the reference's, so never share a uid:
none can signal, trace or read another's processes or files even where a namespace would not
already hide them.
"""

from __future__ import annotations

import secrets
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..backends import Kind
from ..errors import CallTimeout
from ..wire import Bounds

# Far above any uid a distribution hands out (Debian: < 60000; systemd's dynamic users:
# 61184-65519; container user namespaces commonly start at 100000 with 65536 each).
STUDENT_UIDS = range(0x3000_0000, 0x3800_0000)
REFERENCE_UIDS = range(0x3800_0000, 0x3900_0000)


def runner_uid(trusted: bool = False) -> int:
    """A fresh uid for one runner: random in its range, so concurrent judges do not collide."""
    uids = REFERENCE_UIDS if trusted else STUDENT_UIDS
    return uids.start + secrets.randbelow(len(uids))


def drop_to(uid: int) -> list[str]:
    """`setpriv` (util-linux) to run the rest of a command line as `uid`, group `uid`, with no
    supplementary groups, no capabilities (an empty bounding set: none regained by exec) and
    no-new-privs (no setuid binary lifts it); from root."""
    return ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--"]


@dataclass(frozen=True)
class Limits:
    call_timeout_s: float = 120.0   # wall time of one call, judged from the judge's side
    cpu_time_s: int = 900           # CPU seconds for the whole runner process
    file_size_bytes: int = 64 << 20  # any file the student writes (output goes to a drained pipe)
    output_tail_bytes: int = 4096   # how much of the student's output is kept for messages
    processes: int = 256            # threads + processes of the runner (a fork bomb stops here)
    confine: bool = True            # False (`--sandbox none`): no limits, no namespaces
    memory_bytes: int = 4 << 30     # the runner's memory (cgroup, as root; else RLIMIT_DATA on the sim)
    tmp_bytes: int = 256 << 20      # the runner's private /tmp and /dev/shm, each (memory-backed)
    # the gpu backend's runners on numba's stock simulator (NUMBA_ENABLE_CUDASIM=1): its code path
    # without a GPU, for plumbing tests; no real timing
    stock_simulator: bool = False

    @classmethod
    def on_stock_simulator(cls, **limits) -> "Limits":
        """Limits for runners on numba's stock simulator, which runs a thread per CUDA thread of a
        block (up to 1024, beside the interpreter's own): a block of 256 threads with a barrier
        stopped at 256 threads in all ("can't start new thread": every reduction test failed)."""
        return cls(stock_simulator=True, processes=1024 + 64, **limits)

    def runner_env(self, backend: str) -> dict[str, str]:
        """What the runner's environment says about the simulator (never numba's for `sim`)."""
        return {"NUMBA_ENABLE_CUDASIM": "1"} if self.stock_simulator and backend == Kind.GPU else {}


def death_reason(code: int, limits: Limits, signalled_as_128_plus: bool) -> str:
    """Why a runner ended with exit status `code` (negative: killed by that signal), in the
    student's terms. `signalled_as_128_plus`: a pid-1 in front of the runner (bubblewrap's,
    docker-init) passes a signal death on as 128 + n."""
    signum = -code if code < 0 else code - 128 if signalled_as_128_plus and code > 128 else 0
    if signum == signal.SIGXCPU:
        return f"killed: CPU time limit of {limits.cpu_time_s} s exceeded"
    try:
        if signum:
            return f"crashed: killed by {signal.Signals(signum).name}"
    except ValueError:  # not a signal: an exit status above 128 of its own
        pass
    return f"the student's process exited with code {code} before answering"


def exchange_within(exchange: Callable[[], Any], timeout: float, runner: "Runner") -> Any:
    """Run `exchange()` (send a request, read its reply) with a deadline judged from this side.

    Past the deadline the runner is killed (which ends the blocked read) and CallTimeout raised.
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
        raise CallTimeout(f"timed out after {timeout:g} s", runner.output_tail())
    return outcome[0]


class Runner(Protocol):
    """What the judge needs from a live runner, whatever confines it."""

    def request(self, message: Any, timeout: float | None = None, bounds: Bounds = Bounds()) -> Any:
        """The reply to `message` within `timeout`; `bounds`: the most the reply may hold."""
    def output_tail(self) -> str: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class Sandbox(Protocol):
    name: str

    def start(self, workspace: str, backend: str, devices: int = 1, trusted: bool = False) -> Runner:
        """A runner over a copy of `workspace`; `trusted` for the course's reference runner.
        A sandbox with `hosts_device = True` also has `start_device(devices, runner_workspace,
        trusted) -> (device process, link)` and takes `device=link` here: the runner's way to
        its device process (the simulated GPU, grader.device)."""
