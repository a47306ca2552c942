"""The prepared GPU check (benchmarks/gpu_check.sh, bench_gpu.py) stays runnable without a GPU:
a session lent one must spend its minutes measuring, not fixing the script."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_bench_gpu_dry_run_on_the_simulator(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--sim",
                           "--json", str(out), "--markdown", str(tmp_path / "bench.md")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    names = {r["case"] for r in results}
    assert {"vector_add.add_kernel", "matmul.matmul_coarsened_kernel",
            "reduction.reduce_grid_stride_kernel"} <= names
    # (the simulator's event clock does not advance for a device-to-device copy: that row reads 0 ms here)
    assert all("error" not in r and (r["median_ms"] > 0 or r["case"] == "vector_add.device_to_device_copy")
               for r in results)
    assert "| matmul.matmul_tiled_kernel |" in (tmp_path / "bench.md").read_text()


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)


def _benchmark(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_gpu_env_carries_only_wheels_whose_requirements_hold_in_the_image():
    """numba 0.68 needs llvmlite 0.50 (57 MiB: it never travels): over an image with another
    llvmlite it stays out and the image's numba grades; numba-cuda still goes in where the image's
    numba satisfies it; what the image has in the same version is not reinstalled."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    env = _benchmark("gpu_env")
    wheel = lambda name, version, *reqs: env.Wheel(Path(f"{name}.whl"), name, Version(version),  # noqa: E731
                                                   [Requirement(r) for r in reqs])
    wheels = [wheel("greenlet", "3.5.6"), wheel("numba", "0.68.1", "llvmlite<0.51,>=0.50.0dev0", "numpy<2.6"),
              wheel("numba-cuda", "0.30.4", "numba>=0.60.0", "cuda-core<2,>=0.5.1"),
              wheel("cuda-core", "1.2.2", "numpy")]
    image = {"numba": Version("0.66.0"), "llvmlite": Version("0.48.0"), "numpy": Version("2.5.2"),
             "cuda-core": Version("1.2.2"), "numba-cuda": Version("0.22.0")}
    chosen, why = env.choose(wheels, image)
    assert [w.name for w in chosen] == ["greenlet", "numba-cuda"]
    assert "llvmlite<0.51,>=0.50.0dev0 (has 0.48.0)" in why["numba"] and "the image has it" in why["cuda-core"]
    # an image whose llvmlite fits takes numba too; one whose numba is too old for numba-cuda
    # takes neither
    chosen, _ = env.choose(wheels, image | {"llvmlite": Version("0.50.0")})
    assert [w.name for w in chosen] == ["greenlet", "numba", "numba-cuda"]
    chosen, why = env.choose(wheels, image | {"numba": Version("0.59.0")})
    assert [w.name for w in chosen] == ["greenlet"] and "numba>=0.60.0 (has 0.59.0)" in why["numba-cuda"]


@pytest.mark.slow
def test_gpu_env_makes_an_environment_isolated_runners_start_in(tmp_path):
    """Runners and the device process start as `python -I` (PYTHONPATH ignored): the environment
    made for the GPU machine must import grader from this checkout and the image's packages, or
    every test would fail there with "No module named 'grader'"."""
    made = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_env.py"), "--fresh",
                           "--wheels", str(tmp_path / "no-wheels"), "--env", str(tmp_path / "env")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert made.returncode == 0, made.stdout + made.stderr
    python = made.stdout.strip().splitlines()[-1]
    assert python == str(tmp_path / "env" / "bin" / "python") and "grading with numba" in made.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    graded = subprocess.run([python, "-m", "grader", "grade", "solutions", "vector_add", "--backend", "sim",
                             "--sandbox", "none", "--format", "json", "--output", str(tmp_path / "r.json")],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["score"] == result["max_score"] > 0, graded.stdout[-2000:] + graded.stderr[-2000:]


def _summary(folder, solutions: dict, noise: dict, validate: str) -> str:
    """benchmarks/gpu_summary.py's summary of a gpu_check folder holding these."""
    (folder / "solutions.json").write_text(json.dumps(solutions))
    (folder / "noise.json").write_text(json.dumps(noise))
    (folder / "validate.txt").write_text(validate)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_summary.py"), str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_gpu_summary_checks_issue_11s_targets(tmp_path):
    """The summary a GPU session commits: each target met or missed from the measurements, and a
    step that did not finish said so."""
    def test(name, fraction, **more):
        return {"name": name, "status": "passed", "score": 2, "max_score": 2,
                "timing": {"source": "measured", "gpu": "NVIDIA H200", "seconds": 1e-4, "global_bytes": 2e8,
                           "bandwidth_fraction": fraction, "copy_bandwidth_gbs": 4000.0, "ratio": 1.01,
                           "reference_seconds": 1e-4, "repeats": 40, "spread": 0.004, **more}}
    tests = [test("vector_add::keeps_up_with_the_reference", 0.91,
                  model={"gpu": "H200", "seconds": 1e-6, "reference_seconds": 1e-6, "ratio": 1.0,
                         "bound": "memory", "gbs": 4800.0}),
             test("reduction::grid_stride_atomics_and_coalescing", 0.72),
             test("matmul::tiled_reuses_shared_memory", 0.1,
                  library={"name": "cuBLAS SGEMM (CuPy)", "shape": [2048, 2048, 2048], "seconds": 4e-5,
                           "ratio": 2.5},
                  model={"gpu": "H200", "seconds": 1e-6, "reference_seconds": 1e-6, "ratio": 1.1})]
    text = _summary(tmp_path, {"backend": "gpu", "score": 6, "max_score": 6, "execution_time": 80, "tests": tests},
                    {"runs": 10, "worst_cv": 0.013, "tests": {"vector_add::keeps_up_with_the_reference": {}}},
                    "...\nvalidate: ok\n")
    assert ("over 10 runs of `gpugrade bench --reference` (vector_add::keeps_up_with_the_reference): 1.30% "
            "(target <= 2%: met)") in text
    assert "keeps_up_with_the_reference 91% (target >= 85%: met)" in text
    assert "grid_stride_atomics_and_coalescing 72% (target >= 80%: MISSED)" in text
    assert "tiled_reuses_shared_memory: 40% of cuBLAS SGEMM (CuPy)'s speed" in text
    assert "largest error +8.9% (matmul::tiled_reuses_shared_memory: modelled 1.100x, measured 1.010x)" in text
    assert ("model's bandwidth against the measured (memory- and latency-bound tests, steady state): largest error +140.0% "
            "(vector_add::keeps_up_with_the_reference: modelled 4,800 GB/s, measured 2,000 GB/s)") in text
    assert "validate: ok" in text and "(bench_gpu did not finish)" in text


def test_gpu_summary_gives_the_streaming_kernels_beside_the_copy_bench_gpu_timed(tmp_path):
    rows = [{"case": "vector_add.add_kernel", "size": "n=2^26", "median_ms": 0.24, "GB/s": 3400.0},
            {"case": "vector_add.device_to_device_copy", "size": "n=2^26", "median_ms": 0.13, "GB/s": 4000.0},
            {"case": "vector_add.cupy_add", "size": "n=2^26", "median_ms": 0.3, "GB/s": 2500.0,
             "baseline_of": "vector_add"},
            {"case": "reduction.reduce_grid_stride_kernel", "size": "n=2^26", "median_ms": 0.07, "GB/s": 3800.0},
            {"case": "matmul.matmul_tiled_kernel", "size": "2048x2048x2048", "median_ms": 2.0, "GB/s": 20.0}]
    (tmp_path / "bench_gpu.json").write_text(json.dumps({"meta": {"date": "2026-12-05"}, "results": rows}))
    text = _summary(tmp_path, {"backend": "gpu", "score": 0, "max_score": 0, "execution_time": 1, "tests": []},
                    {"runs": 10, "worst_cv": 0.01, "tests": {}}, "validate: ok\n")
    assert ("- bench_gpu at n=2^26, beside a device-to-device copy (4,000 GB/s): add_kernel 85%, "
            "reduce_grid_stride_kernel 95%") in text, text


def test_gpu_summary_keeps_what_a_step_stopped_at_its_limit_found(tmp_path):
    text = _summary(tmp_path, {"backend": "gpu", "score": 0, "max_score": 0, "execution_time": 1, "tests": []},
                    {"runs": 1, "worst_cv": 0.0, "tests": {}},
                    "validate: reference solutions: 111/111\nvalidate: stubs: 0/111\n"
                    "validate: strided_access: 105/111 (failed what it should)\n")  # then stopped at the limit
    assert "harness noise: not measured (1 run of `gpugrade bench --reference`" in text
    assert "validate did not finish; the grades that ended before the limit:" in text
    assert "validate: strided_access: 105/111 (failed what it should)" in text
    assert "validate: ok" not in text
