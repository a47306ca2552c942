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

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


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
    done = subprocess.run([bare_python, "-m", "grader", "check", "vector_add", "--backend", "auto"], cwd=course,
                          capture_output=True, text=True, env=_env(), timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(sim backend" in done.stdout and re.search(r"Total: (\d+)/\1 ", done.stdout)


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_kernels_run_in_lockstep_typed_by_numbas_own_cuda_target(bare_python, tmp_path):
    """The lockstep executor types with numba's own CUDA target where numba-cuda is missing: a
    student's script runs there as with numba-cuda, not one thread at a time."""
    script = tmp_path / "add.py"
    script.write_text(
        "import numpy as np\n"
        "from numba import cuda\n\n"
        "@cuda.jit\n"
        "def add(a, b, out):\n"
        "    i = cuda.grid(1)\n"
        "    if i < out.size:\n"
        "        out[i] = a[i] + b[i]\n\n"
        "a = np.arange(4096, dtype=np.float32)\n"
        "out = cuda.device_array_like(a)\n"
        "add[16, 256](cuda.to_device(a), cuda.to_device(a), out)\n"
        "assert (out.copy_to_host() == 2 * a).all()\n")
    done = subprocess.run([bare_python, "-m", "grader", "run", str(script)], cwd=tmp_path, capture_output=True,
                          text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"│ add +│ 16 / 256 +│ simt ", done.stdout), done.stdout


def _without_libnvvm(bare_python) -> list:
    """A bwrap prefix that hides the folders libNVVM is loaded from (the CUDA toolkit's, as on
    macOS, which has none): numba's own target then cannot compile a device function."""
    found = subprocess.run(
        [bare_python, "-c", "from numba.cuda.cuda_paths import get_cuda_paths; print(get_cuda_paths()['nvvm'].info or '')"],
        capture_output=True, text=True, env=_env(), check=True).stdout.split()
    found += [line.split("=>")[-1].strip() for line in
              subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout.splitlines()
              if "libnvvm" in line and "=>" in line]
    hidden = sorted({os.path.dirname(os.path.realpath(p)) for p in found if p})
    prefix = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for folder in hidden:
        prefix += ["--tmpfs", folder]
    probe = subprocess.run(prefix + [bare_python, "-c", "from numba.cuda.cudadrv import nvvm; print(nvvm.is_available())"],
                           capture_output=True, text=True, env=_env())
    assert probe.stdout.strip() == "False", f"libNVVM still loads with {hidden} hidden: {probe.stdout}{probe.stderr}"
    return prefix


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="hiding libNVVM needs bubblewrap (CI installs it)")
def test_warp_shuffles_and_device_functions_run_in_lockstep_where_libnvvm_is_missing(bare_python, tmp_path):
    """numba's own target lowers a device function (numba's warp-shuffle wrappers are device
    functions) with libNVVM's data layout; where libNVVM is missing the lockstep typing types them
    instead of compiling them, so such kernels do not fall back to one thread at a time."""
    script = tmp_path / "warp_sum.py"
    script.write_text(
        "import numpy as np\n"
        "from numba import cuda, float32\n\n"
        "@cuda.jit(device=True)\n"
        "def twice(v):\n"
        "    return 2 * v\n\n"
        "@cuda.jit\n"
        "def warp_sum(x, out):\n"
        "    i = cuda.grid(1)\n"
        "    v = twice(x[i]) if i < x.size else float32(0)\n"
        "    offset = 16\n"
        "    while offset > 0:\n"
        "        v += cuda.shfl_down_sync(0xffffffff, v, offset)\n"
        "        offset //= 2\n"
        "    if cuda.laneid == 0:\n"
        "        cuda.atomic.add(out, 0, v)\n\n"
        "x = np.arange(4096, dtype=np.float32) % 7\n"
        "out = cuda.to_device(np.zeros(1, np.float32))\n"
        "warp_sum[16, 256](cuda.to_device(x), out)\n"
        "assert out.copy_to_host()[0] == 2 * x.sum(), out.copy_to_host()\n")
    done = subprocess.run(_without_libnvvm(bare_python) + [bare_python, "-m", "grader", "run", str(script)],
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"│ warp_sum +│ 16 / 256 +│ simt ", done.stdout), done.stdout


def test_doctor_reports_the_compile_check_unavailable_not_failed(bare_python):
    done = subprocess.run([bare_python, "-m", "grader", "doctor"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "numba-cuda" in done.stdout and "not installed" in done.stdout
