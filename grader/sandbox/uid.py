"""`--sandbox uid`: each runner (and each device process) as a fresh unprivileged uid, for where
no namespace can be made: a container under docker's default seccomp profile (Gradescope's),
where bubblewrap cannot start.

As root the judge starts the runner through `setpriv` (base.drop_to: its own uid, no capabilities,
no-new-privs) with the rlimits and cgroups the process sandbox sets (process._confine), over a copy
of its workspace owned by that uid, inside a folder (0711) of the judge's that it may pass but not
list, with a home of its own beside it. The judge's files stay the judge's: root's folders and
files not writable by others are out of its reach, and results, course and submission folders
are the judge's to keep unreadable (0700). When the runner ends, every process of its uid ends
(`kill(-1)` sent as that uid: a daemon it forked, setsid or not, cannot outlive the grade and
rewrite anything later) and the files it left in the machine's shared temporary folders go.

What it does not confine (docs/SANDBOXES.md): the network, the view of other processes (their
command lines), and the filesystem's world-readable files; it needs root.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile

from . import bubblewrap
from .base import REFERENCE_UIDS, STUDENT_UIDS, Limits, drop_to, runner_uid
from .process import ProcessSandbox, RunnerProcess, isolated_import_problem

# World-writable folders where a runner's uid may leave files; what it left there goes with it.
SHARED_TEMPORARY = ("/tmp", "/var/tmp", "/dev/shm")


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why the uid sandbox cannot run here, or None (probed once: the interpreter as a stranger)."""
    if sys.platform != "linux":
        return f"the uid sandbox needs Linux (this is {sys.platform})"
    if not bubblewrap.as_root():
        return "the uid sandbox gives each runner a uid of its own, which needs the judge to run as root"
    if not os.access(drop_to(0)[0], os.X_OK):
        return "the uid sandbox needs setpriv (util-linux)"
    problem = isolated_import_problem()
    if problem is not None:
        return problem
    stranger = runner_uid()
    try:
        done = subprocess.run([*drop_to(stranger), sys.executable, "-I", "-c", "import grader"], cwd="/",
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"setpriv could not start: {exc}"
    finally:
        kill_every_process_of(stranger)
    if done.returncode != 0:
        return (f"a runner's uid cannot run this grader ({sys.executable}): install it where every user "
                f"may read it (a venv under /opt, not /root): {done.stderr.strip()[-300:]}")
    return None


def kill_every_process_of(uid: int) -> None:
    """SIGKILL to every process of `uid`. Sent as `uid` itself, kill(-1) reaches exactly those
    (an unprivileged sender may signal only its own uid's processes, and never itself) in one pass
    that a fork cannot slip past (the kernel refuses a fork with a kill pending). The shell's kill:
    /bin/sh runs as any uid, where this interpreter may not (a venv under /root)."""
    subprocess.run(["/bin/sh", "-c", "kill -KILL -1"], user=uid, group=uid, extra_groups=[], cwd="/", env={},
                   stdin=subprocess.DEVNULL, capture_output=True, check=False)


def kill_runner_uids() -> None:
    """Every process of any runner's uid (base.STUDENT_UIDS, REFERENCE_UIDS) killed: after a judge
    stopped before it could close its runners. Only where this machine grades one submission at a
    time (Gradescope's container): elsewhere it would end other judges' runners too."""
    uids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if uid in STUDENT_UIDS or uid in REFERENCE_UIDS:
                uids.add(uid)
    for uid in uids:
        kill_every_process_of(uid)


def remove_files_of(uid: int, folders: tuple[str, ...] = SHARED_TEMPORARY) -> None:
    """What `uid` left directly in `folders` (files, links, whole folders), removed."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


class UidRunnerProcess(RunnerProcess):
    """A runner as a uid of its own: setpriv, no namespaces."""

    def _confined(self, command: list[str], workspace: str, backend: str
                  ) -> tuple[list[str], dict[str, str], str, list[int]]:
        scratch = self._scratch.name
        staged = bubblewrap.stage_workspace(workspace, scratch, self.uid)
        home = os.path.join(scratch, "home")
        os.mkdir(home, 0o700)
        os.chown(home, self.uid, self.uid)
        os.chmod(scratch, 0o711)  # the runner may pass to its workspace and home, not list the folder
        env = bubblewrap.runner_environment(home, self.limits.runner_env(backend))
        return [*drop_to(self.uid), *command, "--workspace", staged], env, staged, []

    def kill(self) -> None:
        super().kill()
        if self.uid is not None:  # what left the process group and the runner's tree: all its uid's
            kill_every_process_of(self.uid)

    def close(self) -> None:
        super().close()
        if self.uid is not None:
            remove_files_of(self.uid)


class UidSandbox(ProcessSandbox):
    name = "uid"
    runner_type = UidRunnerProcess

    def __init__(self, limits: Limits = Limits()):
        super().__init__(limits)
        # scratch folders made with a device process, for the runner `start` gives its link to
        self._prepared: dict[int, tempfile.TemporaryDirectory] = {}

    @staticmethod
    def unavailable() -> str | None:
        return unavailable()

    def start_device(self, devices: int, runner_workspace: str, trusted: bool = False, gpu: bool = False,
                     sources: dict[str, str] | None = None) -> tuple[RunnerProcess, int]:
        """As the process sandbox's; the runner's scratch folder is made first, so that the device
        knows where the runner's workspace is (its messages name files relative to it)."""
        scratch = tempfile.TemporaryDirectory(prefix="gpugrade-runner-")
        try:
            device, link = super().start_device(devices, os.path.join(scratch.name, "workspace"), trusted, gpu,
                                                sources)
        except BaseException:
            scratch.cleanup()
            raise
        self._prepared[link] = scratch
        return device, link

    def _scratch_for(self, device: int | None) -> tempfile.TemporaryDirectory | None:
        return self._prepared.pop(device, None) if device is not None else None

    def _seen_as(self, runner_workspace: str) -> str:
        return runner_workspace
