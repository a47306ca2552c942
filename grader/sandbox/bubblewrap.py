"""The process sandbox's view of the machine, built by bubblewrap (`bwrap`, Debian's `bubblewrap`).

What a runner sees: a fresh root holding only /usr (and the merged-/usr links), the few /etc files
the dynamic loader reads, the interpreter's prefix and site-packages, the grader package, and its
own copy of the student's files at /workspace, all read-only; a private /tmp and /dev/shm (sized
tmpfs), a fresh /proc of its own PID namespace, a minimal /dev. Nothing else of the host exists
there: not the course tree (solutions/, tests/, .git), not the judge's files, not other runners'.
It has its own PID, mount, network (no interface), IPC, UTS and cgroup namespaces, an environment
built from an allowlist, and it dies with its parent.

The uid: run as root, bubblewrap sets up the mounts (it can reach an interpreter under /root),
then `setpriv` switches to the runner's own unprivileged uid with no capabilities, an empty
bounding set and no-new-privs before the interpreter starts; the files it may read are made
readable by that uid only. Run as another user, bubblewrap needs unprivileged user namespaces
and the runner keeps that user's uid (never 0).

Hand-written here: only the list of paths to show and the argv. Namespaces, mounts and the
pid-1 reaper are bubblewrap's.
"""

from __future__ import annotations

import functools
import os
import site
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from .base import drop_to

WORKSPACE = "/workspace"
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
# Variables of the judge's environment a runner may keep: machine quirks numpy needs to compute
# correctly (see the env notes on OpenBLAS) and the GPUs it may use. Everything else is dropped.
ENV_PASSED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CUDA_VISIBLE_DEVICES", "GPUGRADE_PTXAS")


def bwrap() -> str | None:
    return shutil.which("bwrap")


def as_root() -> bool:
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why the process sandbox cannot run here, or None when it can (probed once)."""
    if sys.platform != "linux":
        return f"the process sandbox needs Linux (this is {sys.platform}); use --sandbox docker or none"
    exe = bwrap()
    if exe is None:
        return ("the process sandbox needs bubblewrap: install it (Debian/Ubuntu: apt-get install "
                "bubblewrap), or self-check with --sandbox none")
    # the system folders the runners see, not the whole root: a recursive bind of / remounts every
    # mount below it, and one a container is making or removing then fails it (EINVAL on a docker
    # overlay's merged folder), which made the sandbox look unavailable while docker was busy
    probe = [exe, *_system_folders(), "--unshare-pid", "--unshare-net", "--die-with-parent"]
    if not as_root():
        probe.insert(1, "--unshare-user")
    try:
        done = subprocess.run(probe + ["true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        hint = "" if as_root() else " (it needs unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1)"
        return f"bubblewrap cannot create the sandbox here{hint}: {done.stderr.strip()[-300:]}"
    return None


def runtime_paths() -> list[str]:
    """What the runner's interpreter needs: its prefixes, site-packages and the grader package,
    and site directories a .pth file added (a venv over another's packages, as the device check
    makes one); never other folders on sys.path (the current folder may be the course's)."""
    import grader

    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(grader.__file__))}
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None  # -I leaves it out anyway
    paths.update(p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")
                 and p != user_site)
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(sysconfig.get_paths()[key])
    real = {os.path.realpath(p) for p in paths if os.path.exists(p)}
    # the outermost of nested paths is enough; /usr is shown whole anyway
    kept = sorted(p for p in real if not p.startswith("/usr/") and p != "/usr")
    return [p for p in kept if not any(p != q and p.startswith(q + os.sep) for q in kept)]


def _system_folders() -> list[str]:
    """bubblewrap's arguments that show /usr read-only, and /bin, /lib ... as this system has them
    (links into /usr where /usr is merged)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _MERGED_USR:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


@dataclass
class View:
    workspace: str                  # host folder shown read-only at /workspace
    uid: int | None                 # switch to this uid (as root), None: keep the caller's
    tmp_bytes: int
    gpu: bool = False               # show the NVIDIA device nodes and /sys (read-only)
    env: dict[str, str] = field(default_factory=dict)

    def command(self, command: list[str]) -> tuple[list[str], int]:
        """(argv, fd): bubblewrap reads its arguments from the pipe `fd` (to pass to the child and
        close after), so the sandbox's pid 1 shows the runner no host path in its command line."""
        args = self.argv(command)
        split = args.index("--")  # the options travel by pipe; the command follows on the command line
        read, write = os.pipe()
        with os.fdopen(write, "wb") as pipe:  # a few KiB: within a pipe's buffer
            pipe.write(b"".join(os.fsencode(a) + b"\0" for a in args[:split]))
        return [bwrap() or "bwrap", "--args", str(read), *args[split:]], read

    def argv(self, command: list[str]) -> list[str]:
        """bubblewrap's arguments (without the program name) that run `command` in this view."""
        args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "gpugrade-runner"]
        if not as_root():
            args += ["--unshare-user", "--disable-userns"]
        # the private folders first: a runtime path under /tmp (a venv there) is then shown inside them
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(self.tmp_bytes), "--tmpfs", "/tmp",
                 "--perms", "1777", "--size", str(self.tmp_bytes), "--tmpfs", "/dev/shm"]
        args += _system_folders()
        made: set[str] = set()
        for path in _LOADER_FILES:  # (an /etc bubblewrap made for them was 0700: the loader could not read its cache)
            if os.path.exists(path):
                args += _parents(path, made) + ["--ro-bind", path, path]
        for path in runtime_paths():
            args += _parents(path, made) + ["--ro-bind", path, path]
        args += ["--ro-bind", self.workspace, WORKSPACE]
        if self.gpu:
            for node in sorted(Path("/dev").glob("nvidia*")):
                args += ["--dev-bind", str(node), str(node)]
            args += ["--ro-bind", "/sys", "/sys"]
        # the root (folders bubblewrap made for the mounts) read-only too: unprivileged, the
        # runner would own them in its user namespace
        args += ["--remount-ro", "/", "--chdir", WORKSPACE, "--clearenv"]
        for key, value in self.environment().items():
            args += ["--setenv", key, value]
        if self.uid is not None:
            return args + ["--", *drop_to(self.uid), *command]
        return args + ["--", *command]

    def environment(self) -> dict[str, str]:
        return runner_environment("/tmp", self.env)


def runner_environment(home: str, extra: dict[str, str]) -> dict[str, str]:
    """A runner's whole environment: the allowlisted variables of the judge's, its own home and
    temporary folder `home`, and `extra`."""
    env = {k: os.environ[k] for k in ENV_PASSED if k in os.environ}
    env.update(PATH="/usr/bin:/bin", HOME=home, TMPDIR=home, LANG="C.UTF-8", PYTHONDONTWRITEBYTECODE="1",
               NUMBA_CACHE_DIR=f"{home}/numba", GPUGRADE_CACHE_DIR=f"{home}/gpugrade")
    env.update(extra)
    return env


def _parents(path: str, made: set[str]) -> list[str]:
    """Traversable (0755) folders down to `path`: bubblewrap would copy the host's modes (a 0700
    /root would hide an interpreter installed under it from the runner's uid)."""
    out = []
    parts = Path(path).parts[1:-1]
    current = ""
    for part in parts:
        current += "/" + part
        if current not in made:
            made.add(current)
            out += ["--perms", "0755", "--dir", current]
    return out


def stage_workspace(source: str, into: str, uid: int | None) -> str:
    """Copy the student's files into a folder only the runner's uid can read; returns it.

    The runner sees this copy, never the judge's folder; as root it is owned by the runner's
    uid, inside a folder (`into`, mode 0700) no other user can enter.
    """
    target = os.path.join(into, "workspace")
    shutil.copytree(source, target, symlinks=False)
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            _own(os.path.join(root, name), uid)
    _own(target, uid)
    return target


def _own(path: str, uid: int | None) -> None:
    if uid is None:
        os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    else:
        os.chown(path, uid, uid)
        os.chmod(path, 0o500 if os.path.isdir(path) else 0o400)
