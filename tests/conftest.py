"""Fixtures shared by the sandbox suites: the docker engine and the runner image."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_support import unavailable

ROOT = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("GPUGRADE_RUNNER_IMAGE", "gpugrade-runner:latest")


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
    import docker.errors

    source = subprocess.run([sys.executable, str(ROOT / "docker" / "source_digest.py")], capture_output=True,
                            text=True, check=True).stdout.strip()
    try:
        built_from = docker_client.images.get(IMAGE).labels.get("gpugrade.source")
    except docker.errors.ImageNotFound:
        built_from = None
    if built_from != source:  # missing, or made from other grader sources: (re)build, warm in seconds
        done = subprocess.run([str(ROOT / "docker" / "build-images.sh"), "runner"], cwd=ROOT,
                              env=os.environ | {"GPUGRADE_RUNNER_IMAGE": IMAGE}, capture_output=True, text=True)
        if done.returncode != 0:
            unavailable(f"the runner image {IMAGE} is {'stale' if built_from else 'missing'} and "
                         f"docker/build-images.sh failed:\n{done.stderr[-2000:]}")
    return IMAGE


