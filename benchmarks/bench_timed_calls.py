"""What a timed call costs the judge on a GPU machine: the judge's side of grader.judge.gpu_timing.

    .venv/bin/python benchmarks/bench_timed_calls.py            # 6 timed calls a size
    .venv/bin/python benchmarks/bench_timed_calls.py --calls 10

On a GPU every performance test calls the student's function (and the reference's) several times
with fresh inputs, through a runner whose device is the GPU's device process (grader.device.
gpu_server), each call's answer checked and its data flow verified. Besides the kernels, each call
costs the judge: drawing the fresh inputs, sending them to the runner and on to the device,
the answer's way back, the device's digests, the check and the data flow. This measures that cost
without a GPU: numba's stock simulator stands in for it in the device process, and the kernel
computes one block of the answer only (the stock simulator runs a thread per CUDA thread), so the
time is the transfers' and the judge's, not a kernel's; the check compares the whole answer (the
first block with the sum, the rest with itself), as a test's check costs. Per size: the whole
timed call as the judge waits for it, and the fresh inputs' draw apart; medians. Not a GPU
measurement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.judge import Returns, RunnerConnection, Student  # noqa: E402
from grader.judge.correctness import expect_close  # noqa: E402
from grader.judge.gpu_timing import _fresh, time_calls  # noqa: E402
from grader.sandbox import Limits, ProcessSandbox  # noqa: E402

MODULE = """
    import numpy as np
    from numba import cuda

    @cuda.jit
    def first_block(a, b, out):
        i = cuda.grid(1)
        if i < 64:
            out[i] = a[i] + b[i]

    def add(a, b):
        out = cuda.device_array(a.shape, a.dtype)
        first_block[1, 64](cuda.to_device(a), cuda.to_device(b), out)
        return out.copy_to_host()
"""


def _check(args, out) -> None:
    """The first block's sum; the whole answer compared too (with itself), as a test's check costs."""
    expect_close(out[:64], args[0][:64] + args[1][:64], rtol=1e-6)
    whole = np.nan_to_num(out)  # (past the first block: what the device array held, NaN among it)
    expect_close(whole, whole.copy(), rtol=1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6)
    calls = parser.parse_args().calls
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # (the device process's: the stock simulator stands in)
    rng = np.random.default_rng(3)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir(mode=0o755)
        (work / "ex.py").write_text(textwrap.dedent(MODULE))
        (work / "ex.py").chmod(0o644)
        sandbox = ProcessSandbox(Limits.on_stock_simulator(call_timeout_s=300))
        timer = Student("ex", str(work), "sim", sandbox, allowed_imports=None,
                        connection=RunnerConnection(str(work), "sim", sandbox, gpu_device=True))
        try:
            for exponent in (20, 22, 24):
                n = 1 << exponent
                sets = [[rng.standard_normal(n).astype(np.float32) for _ in range(2)] for _ in range(2)]
                started = time.perf_counter()
                timing = time_calls(timer, "add", sets, _check, Returns((n,), np.dtype(np.float32)), warmup=1,
                                    min_repeats=calls, max_repeats=calls, target=0.0, cap_s=1e9)
                per_call = (time.perf_counter() - started) / (calls + 1)
                draws = []
                for _ in range(3):
                    t = time.perf_counter()
                    _fresh(sets[0], rng)
                    draws.append(time.perf_counter() - t)
                rows.append((f"2^{exponent}", 3 * 4 * n / 2**20, per_call, statistics.median(draws),
                             statistics.median(timing.times_ms)))
        finally:
            timer.close()
    print("| elements | MiB moved (2 in, 1 out) | judge's wall per call (ms) | of it, the fresh inputs' draw (ms) "
          "| stock simulator's kernel (ms) |\n|---|---|---|---|---|")
    for size, mib, per_call, draw, kernel in rows:
        print(f"| {size} | {mib:.0f} | {per_call * 1e3:.0f} | {draw * 1e3:.0f} | {kernel:.1f} |")
    print(f"\n({calls} timed calls and a warm-up a size; per call: the whole timed call, the warm-up's share "
          f"included; the draw: median of 3, for the timed calls after each input set's first)")


if __name__ == "__main__":
    main()
