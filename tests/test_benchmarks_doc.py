"""docs/BENCHMARKS.md holds every benchmark's numbers, the GPU's among them: a benchmark that writes
there rewrites its own section only (a run of bench_sim.py once rewrote the whole file and dropped
the only GPU measurements, the batch throughput and four other sections)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_sim_rewrites_its_own_section_and_keeps_the_others(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    others = ("# Benchmarks\n\nintro\n\n<!-- bench_sim: begin -->\nold numbers\n<!-- bench_sim: end -->\n\n"
              "<!-- bench_model: begin -->\nmodel\n<!-- bench_model: end -->\n\n## Batch grading throughput\n\npasted\n\n"
              "## On a GPU (NVIDIA H200)\n<!-- gpu_check: begin -->\nmeasured\n<!-- gpu_check: end -->\n")
    doc.write_text(others)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_sim.py"), "--no-stock", "--only", "vadd16",
                           "--executors", "simt", "--checks", "counters", "--output", str(doc)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    text = doc.read_text()
    assert "old numbers" not in text and "| vector add 2^16 |" in text
    before, _, after = text.partition("<!-- bench_sim: begin -->")
    assert before == "# Benchmarks\n\nintro\n\n"
    assert after.split("<!-- bench_sim: end -->", 1)[1] == others.split("<!-- bench_sim: end -->", 1)[1]


def test_the_gpu_measurements_and_every_section_are_in_the_document():
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    for name in ("bench_sim", "bench_model", "bench_allreduce", "lockstep_share", "gpu_check"):
        assert text.count(f"<!-- {name}: begin -->") == 1 and text.count(f"<!-- {name}: end -->") == 1, name
    for heading in ("## On a GPU", "## Batch grading throughput", "## Timed calls on a GPU"):
        assert heading in text
