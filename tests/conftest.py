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
