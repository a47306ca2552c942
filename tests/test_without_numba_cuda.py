"""Students' laptops without the CUDA Python wheels (macOS, ...): numba alone provides numba.cuda,
and `gpugrade check` must still grade on the simulator. Built here as a real venv without
numba-cuda (its wheels, and nvidia-cuda-nvcc's, are only required on Linux and Windows)."""

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _pin(dist: str) -> str:
    from importlib import metadata

    return f"{dist}=={metadata.version(dist)}"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    env_dir = tmp_path_factory.mktemp("no-numba-cuda") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    deps = [_pin(d) for d in ("numba", "numpy", "pytest", "greenlet", "rich")]
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *deps], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "-e", ROOT],
                   check=True)
    probe = subprocess.run([py, "-c", "import importlib.util as u; print(u.find_spec('numba_cuda'))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "None", "numba-cuda must be absent in this venv"
    return py


def test_check_grades_on_the_simulator_with_numba_alone(bare_python, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copytree(ROOT / "solutions", course / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # numba-cuda's typing is what the lockstep executor types with: without it every thread runs on
    # the per-thread executor, stage 2's grid of 270,336 threads some 10 s a launch (the limit only
    # stops a hang)
    done = subprocess.run([bare_python, "-m", "grader", "check", "vector_add", "--backend", "auto"], cwd=course,
                          capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(sim backend" in done.stdout and re.search(r"Total: (\d+)/\1 ", done.stdout)


def test_doctor_reports_the_compile_check_unavailable_not_failed(bare_python):
    done = subprocess.run([bare_python, "-m", "grader", "doctor"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "numba-cuda" in done.stdout and "not installed" in done.stdout
