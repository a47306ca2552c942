"""The prepared GPU check (benchmarks/gpu_check.sh, bench_gpu.py) stays runnable without a GPU:
a session lent one must spend its minutes measuring, not fixing the script."""

import json
import subprocess
import sys
from pathlib import Path

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
    assert all("error" not in r and r["median_ms"] > 0 for r in results)
    assert "| matmul.matmul_tiled_kernel |" in (tmp_path / "bench.md").read_text()


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)
