"""How a runner is confined: one `Sandbox` protocol (grader.sandbox.base), three kinds.

`process` (default, grader.sandbox.process): a bubblewrap sandbox per runner.
`docker` (grader.sandbox.container): a container per runner; the production choice for batches.
`uid` (grader.sandbox.uid): a fresh unprivileged uid per runner, where no namespace can be made
(Gradescope's containers).
`none`: a plain child process without limits, for debugging.
docs/SANDBOXES.md says when to use which and what each guarantees.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backends import Kind
from ..errors import UsageError
from .base import Limits, Runner, Sandbox, exchange_within
from .process import NoSandbox, ProcessSandbox

__all__ = ["SANDBOXES", "Limits", "Runner", "Sandbox", "SandboxSpec", "make_sandbox", "exchange_within",
           "ProcessSandbox", "NoSandbox"]

SANDBOXES = ("process", "docker", "uid", "none")


@dataclass(frozen=True)
class SandboxSpec:
    """The sandbox chosen on the command line: `--sandbox`, `--docker-image`, `--gpus`."""

    name: str = "process"
    docker_image: str = "gpugrade-runner:latest"
    gpus: str = ""  # docker only: "" = no GPU device request, "all" or device ids "0,1"

    def check(self, backend: str, simulator: str = "device") -> None:
        """UsageError where this sandbox cannot grade here (docker: no engine or no runner image).
        `simulator`: "device" (the default)
        runs the simulated GPU as a process of its own, on this host in bubblewrap whatever the
        sandbox (docker's runners reach it through a socket)."""
        if self.name not in SANDBOXES:
            raise UsageError(f"unknown sandbox {self.name!r}; choose one of {', '.join(SANDBOXES)}")
        if self.gpus and self.name != "docker":
            raise UsageError("--gpus applies to --sandbox docker only (other sandboxes see the machine's GPUs)")
        if self.name == "docker" and backend == Kind.GPU and not self.gpus:
            raise UsageError("--backend gpu in the docker sandbox needs --gpus (e.g. --gpus all)")
        if self.name in ("process", "none"):  # docker: the image's own Python and grader
            from .process import isolated_import_problem

            problem = isolated_import_problem()
            if problem is not None:
                raise UsageError(problem)
        if self.name == "process":
            from .bubblewrap import unavailable

            reason = unavailable()
            if reason is not None:
                raise UsageError(reason)
        if self.name == "uid":
            from .uid import unavailable as uid_unavailable

            reason = uid_unavailable()
            if reason is not None:
                raise UsageError(reason)
        if self.name == "docker" and simulator == "device":
            from .bubblewrap import unavailable

            reason = unavailable()
            if reason is not None:  # else the simulator would run in the student's container, unsaid
                raise UsageError(f"--sandbox docker confines the simulated GPU's device process on this host "
                                 f"with bubblewrap, and here {reason}. To grade without it: --simulator inline "
                                 f"(debugging only: launch records and counters then come from the student's "
                                 f"own process)")
        if self.name == "docker":  # the engine and the runner image
            from .container import check_available

            check_available(self.docker_image)


def make_sandbox(spec: SandboxSpec, limits: Limits) -> Sandbox:
    if spec.name == "docker":
        from .container import DockerSandbox, DockerSettings

        return DockerSandbox(limits, DockerSettings(image=spec.docker_image, gpus=spec.gpus))
    if spec.name == "none":
        return NoSandbox(limits)
    if spec.name == "uid":
        from .uid import UidSandbox

        return UidSandbox(limits)
    if spec.name == "process":
        return ProcessSandbox(limits)
    raise UsageError(f"unknown sandbox {spec.name!r}; choose one of {', '.join(SANDBOXES)}")
