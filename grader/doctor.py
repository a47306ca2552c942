"""`gpugrade doctor`: what this machine offers for grading, as plain facts."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from importlib import metadata


@dataclass
class Fact:
    name: str
    value: str
    ok: bool = True


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _docker() -> Fact:
    try:
        import docker

        from .sandbox import SandboxSpec

        client = docker.from_env(timeout=3)
        version = client.version().get("Version", "?")
        image = SandboxSpec.docker_image
        try:
            client.images.get(image)
            runner = f"runner image {image} present"
        except docker.errors.ImageNotFound:
            return Fact("docker engine", f"reachable (version {version}); runner image {image} missing: "
                                         f"docker/build-images.sh builds it", ok=False)
        return Fact("docker engine", f"reachable (version {version}); {runner}: --sandbox docker works")
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return Fact("docker engine", f"not reachable ({type(exc).__name__}); --sandbox docker unavailable", ok=False)


def _bubblewrap() -> Fact:
    from .sandbox.bubblewrap import as_root, unavailable

    reason = unavailable()
    if reason is not None:
        return Fact("process sandbox", reason, ok=False)
    how = "runners get a uid of their own" if as_root() else "an unprivileged user namespace"
    return Fact("process sandbox", f"bubblewrap works ({how}): --sandbox process works")


def _uid_sandbox() -> Fact:
    from .sandbox.uid import unavailable

    reason = unavailable()
    return Fact("uid sandbox", reason or "runners as uids of their own without namespaces: --sandbox uid works",
                ok=reason is None)


def _runners() -> Fact:
    from .sandbox.process import isolated_import_problem

    problem = isolated_import_problem()
    return Fact("runners", problem or "start with this grader (python -I imports it)", ok=problem is None)


def _toolchain() -> list[Fact]:
    try:
        from .sim.compile_check import toolchain_status
    except ImportError as exc:
        return [Fact("compile check", f"unavailable ({exc})", ok=False)]
    status = toolchain_status()
    names = ("versions", "compile to PTX", "ptxas")
    return [Fact(name, line, ok=status.available or name == "versions") for name, line in zip(names, status.lines())]


def facts() -> list[Fact]:
    from .backends import gpu_available, resolve

    gpu = gpu_available()
    numba_cuda = _version("numba-cuda")
    found = [
        Fact("python", f"{platform.python_version()} on {platform.system()} {platform.machine()}"),
        Fact("numba", _version("numba") or "not installed", ok=_version("numba") is not None),
        Fact("numba-cuda", numba_cuda or "not installed: numba's own numba.cuda is used (simulator only)",
             ok=numba_cuda is not None),
        Fact("GPU", "available" if gpu else "none visible to numba-cuda", ok=gpu),
        Fact("backend auto picks", resolve("auto")),
    ]
    return found + _toolchain() + [_runners(), _bubblewrap(), _uid_sandbox(), _docker()]
