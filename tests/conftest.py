"""Fixtures shared by the sandbox suites: the docker engine and the runner image."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_support import unavailable, untag_old_sources

ROOT = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("GPUGRADE_RUNNER_IMAGE")  # unset: this checkout's own tag (runner_image)
REPOSITORY = "gpugrade-runner"


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        unavailable(f"no docker engine reachable ({type(exc).__name__}); start dockerd to run these")
    yield client
    client.close()


@pytest.fixture(scope="session")
def runner_image(docker_client):
    """The runner image of this checkout's grader sources, `gpugrade-runner:src-<digest>`: checkouts
    of other sources on one machine (a developer's tests beside a CI run) each have their own and
    never rebuild the other's. Tagged from `gpugrade-runner:latest` when that was built from these
    sources (CI builds it first), else built by docker/build-images.sh. GPUGRADE_RUNNER_IMAGE
    names an image instead (rebuilt when made from other sources)."""
    source = subprocess.run([sys.executable, str(ROOT / "docker" / "source_digest.py")], capture_output=True,
                            text=True, check=True).stdout.strip()
    image = IMAGE or f"{REPOSITORY}:src-{source}"
    built_from = _source_of(docker_client, image)
    if built_from != source and IMAGE is None and _source_of(docker_client, f"{REPOSITORY}:latest") == source:
        docker_client.images.get(f"{REPOSITORY}:latest").tag(REPOSITORY, f"src-{source}")
        built_from = source
    if built_from != source:  # missing, or made from other grader sources: (re)build, warm in seconds
        done = subprocess.run([str(ROOT / "docker" / "build-images.sh"), "runner"], cwd=ROOT,
                              env=os.environ | {"GPUGRADE_RUNNER_IMAGE": image}, capture_output=True, text=True)
        if done.returncode != 0:
            unavailable(f"the runner image {image} is {'stale' if built_from else 'missing'} and "
                         f"docker/build-images.sh failed:\n{done.stderr[-2000:]}")
    if IMAGE is None:
        untag_old_sources(docker_client, image, REPOSITORY)
    return image


def _source_of(client, image: str) -> str | None:
    """The grader source digest `image` was built from (its gpugrade.source label), or None."""
    import docker.errors

    try:
        return client.images.get(image).labels.get("gpugrade.source")
    except docker.errors.ImageNotFound:
        return None


# The modules whose tests keep to one pytest-xdist worker under `make test` (--dist loadgroup), by
# group: every module that makes containers or the runner image shares "docker" (the image is built
# or tagged on one worker, never on two at once); a module with costly module fixtures is a group of
# its own, so that they are made once. Every other test goes to whichever worker is free.
WORKER_GROUPS = {
    "tests/test_docker_sandbox.py": "docker",
    "tests/test_gradescope.py": "docker",
    "tests/test_device_process.py": "docker",
    "tests/test_sandbox_attacks.py": "docker",
    "tests/test_batch.py": "batch",                             # the module's courses
    "tests/test_notebooks.py": "notebooks",                     # the released course, the kernel's venv
    "tests/test_without_numba_cuda.py": "without_numba_cuda",   # the bare venv
    "tests/test_collective.py": "collective",                   # the solution, loaded once
    "tests/test_collective_timing.py": "collective_timing",     # the stock-simulator run
    "tests/sim/test_conformance.py": "conformance",             # numba-cuda's own suite
    "tests/sim/test_compile_check.py": "compile_check",         # the module's cache and reports
    "tests/sim/test_patching_scopes.py": "patching_scopes",     # numba, warmed once
}


# optional: the judge loads this conftest too (it lies above tests/exercises), where pytest-xdist
# is not installed (the production image) and the hook would be unknown
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup with the groups of WORKER_GROUPS, read by the controller from each test's
    node id. (pytest-xdist's own `xdist_group` marks are lost with pytest 9.2: pytest-xdist#1386,
    fixed upstream and not yet released; a node id it marks still gets its group.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ByModuleGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return WORKER_GROUPS.get(nodeid.split("::", 1)[0]) or super()._split_scope(nodeid)

    return ByModuleGroup(config, log)
