"""Per-runner memory and process limits with cgroup v1, where the judge is root and the memory
and pids controllers are mounted (this kind of machine; cgroup v2 here has no controllers).

Unlike rlimits these bind root too, count every process and thread of the runner, and tell an
out-of-memory kill apart from a crash (`memory.oom_control` counts the kills).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "gpugrade"


def available() -> bool:
    """Root, and both controllers mounted writable (a container's /sys/fs/cgroup is read-only)."""
    return os.name == "posix" and os.geteuid() == 0 and all(
        (CGROUP_ROOT / controller / "cgroup.procs").is_file() and os.access(CGROUP_ROOT / controller, os.W_OK)
        for controller in ("memory", "pids"))


class RunnerCgroups:
    """A memory cgroup (no swap beyond the limit) and a pids cgroup for one runner process."""

    def __init__(self, memory_bytes: int, processes: int):
        name = uuid.uuid4().hex[:12]
        self.memory = CGROUP_ROOT / "memory" / PARENT / name
        self.pids = CGROUP_ROOT / "pids" / PARENT / name
        self.memory_bytes = memory_bytes
        self.memory.mkdir(parents=True)
        self.pids.mkdir(parents=True)
        (self.memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
        swap = self.memory / "memory.memsw.limit_in_bytes"
        if swap.is_file():
            swap.write_text(str(memory_bytes))
        (self.pids / "pids.max").write_text(str(processes))

    def join(self) -> None:
        """In the child, before exec and before it drops its privileges."""
        pid = str(os.getpid())
        for group in (self.memory, self.pids):
            with open(group / "cgroup.procs", "w") as f:
                f.write(pid)

    def oom_killed(self) -> bool:
        for line in (self.memory / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) > 0
        return False

    def kill_all(self) -> None:
        for pid in (self.pids / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        """After the runner is dead (a cgroup with processes in it cannot be removed)."""
        for group in (self.memory, self.pids):
            try:
                group.rmdir()
            except OSError:
                pass
