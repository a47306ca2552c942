"""benchmarks/allreduce_gpus.py, the prepared multi-GPU timing: it must run as it is on a lent
machine (whatever it has), and its bandwidth arithmetic is nccl-tests'."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "allreduce_gpus.py"


def load():
    spec = importlib.util.spec_from_file_location("allreduce_gpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_gpus_it_says_multi_gpu_timing_needs_them_and_exits_0(tmp_path):
    out = tmp_path / "allreduce.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine with some
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "1M", "--ranks", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "GPUs: 0" in done.stdout
    assert "needs 2 or more GPUs" in done.stdout, done.stdout
    written = json.loads(out.read_text())
    assert written["rows"] == [] and "2 or more GPUs" in written["meta"]["skipped"]


def test_bandwidths_are_nccl_tests_algbw_and_busbw():
    bench = load()
    assert bench.algbw_gbs(2_000_000_000, 0.5) == pytest.approx(4.0)  # GB/s are 10^9 bytes
    assert bench.bus_factor(2) == 1.0 and bench.bus_factor(4) == 1.5 and bench.bus_factor(8) == 1.75
    assert bench.busbw_gbs(1 << 30, 0.1, 8) == pytest.approx((1 << 30) / 0.1 / 1e9 * 1.75)
    assert bench.busbw_gbs(1 << 30, 0.1, 2) == bench.algbw_gbs(1 << 30, 0.1)
    assert [bench.parse_size(s) for s in ("64M", "256m", "1G", "512K", "4096", "1.5K")] == \
        [64 << 20, 256 << 20, 1 << 30, 512 << 10, 4096, 1536]
    with pytest.raises(ValueError):
        bench.parse_size("0M")
    assert [bench.size_text(n) for n in (64 << 20, 1 << 30, 1000)] == ["64M", "1G", "1000"]
    assert bench.rank_counts([2, 4, 8], 4) == [2, 4] and bench.rank_counts([2, 4, 8], 1) == []
    assert bench.nccl_version_text(22703) == "2.27.3" and bench.nccl_version_text(2708) == "2.7.8"


def test_contenders_are_checked_then_timed_in_turn_and_compared_with_nccl(monkeypatch):
    bench = load()
    order: list[str] = []

    def contender(name, seconds, right=True, fail_at=None):
        def setup(*_):
            calls = []

            def call():
                calls.append(1)
                order.append(name)
                if fail_at is not None and len(calls) == fail_at:
                    raise RuntimeError("lost the context")
                time.sleep(seconds)
            return call, lambda: (call(), right)[1]
        return setup

    ring, pipelined = contender("allreduce_ring", 0.004), contender("allreduce_pipelined", 0.002)
    monkeypatch.setattr(bench, "reference", lambda name, *a: (ring if name == "allreduce_ring" else pipelined)(*a))
    monkeypatch.setattr(bench, "nccl_allreduce", contender("nccl", 0.001))
    row = bench.measure(4, 1 << 20, None, object(), warmup=2, timed=5)
    results = row["results"]
    assert order[:4] == ["allreduce_ring", "allreduce_pipelined", "nccl", "allreduce_ring"], \
        "one untimed check each, then the contenders take turns"
    assert all(len(results[n]["times_s"]) == 5 for n in ("allreduce_ring", "allreduce_pipelined", "nccl"))
    assert results["allreduce_ring"]["median_s"] >= 0.004
    assert results["nccl"]["busbw_GBs"] == pytest.approx(results["nccl"]["algbw_GBs"] * 1.5)
    assert 0 < results["allreduce_ring"]["ratio_to_nccl"] < results["allreduce_pipelined"]["ratio_to_nccl"] < 1
    assert "| 4 | 1M |" in bench.table([row])

    monkeypatch.setattr(bench, "nccl_allreduce", contender("nccl", 0.0, right=False))
    monkeypatch.setattr(bench, "reference", contender("ref", 0.0, fail_at=3))
    row = bench.measure(2, 4096, None, object(), warmup=1, timed=2)
    assert row["results"]["nccl"]["error"].startswith("wrong sum")
    assert all(row["results"][n]["error"] == "RuntimeError: lost the context" for n in bench.REFERENCES)
    assert "ratio_to_nccl" not in json.dumps(row)
