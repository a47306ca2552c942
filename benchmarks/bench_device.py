"""What the device process costs: the simulated GPU in a process of its own vs inside the runner.

    .venv/bin/python benchmarks/bench_device.py [--rounds 3]

1. A full self-check of every stage of the reference solutions of the single-GPU exercises
   (`gpugrade grade solutions vector_add matmul reduction`; all-reduce's traffic and timeline tests
   are not gradable inline), `--simulator device` and `--simulator inline` interleaved, median
   (and fastest) wall time.
2. Launch overhead: one call that launches a one-block kernel 200 times (arguments already on the
   device) and one that copies 4 MiB to the device and back, in each mode, warm, median.
Both in the default process sandbox, side by side in one run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.judge import RunnerConnection, Student  # noqa: E402
from grader.sandbox import Limits, ProcessSandbox  # noqa: E402

KERNELS = """
import numpy as np
from numba import cuda

@cuda.jit
def bump(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1

def launches(n):
    d = cuda.to_device(np.zeros(32, np.float32))
    for _ in range(n):
        bump[1, 32](d)
    return d.copy_to_host()

def round_trip(a):
    return cuda.to_device(a).copy_to_host()
"""


EXERCISES = ("vector_add", "matmul", "reduction")  # what both modes grade in full


def grade_seconds(simulator: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grader", "grade", "solutions", *EXERCISES, "--backend", "sim",
                           "--simulator", simulator], cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"grade --simulator {simulator} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def call_seconds(student: Student, function: str, *args, repeat: int = 5) -> list[float]:
    student.call(function, *args)  # warm: typing, compile check, package sent
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        student.call(function, *args)
        times.append(time.perf_counter() - started)
    return times


def fmt(times: list[float]) -> str:
    return f"{statistics.median(times):.3f} ({min(times):.3f})"


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    grades: dict[str, list[float]] = {"device": [], "inline": []}
    for _ in range(args.rounds):
        for mode in grades:
            grades[mode].append(grade_seconds(mode))
    print(f"full self-check of the reference solutions ({', '.join(EXERCISES)}: all stages), seconds, median (fastest):")
    for mode, times in grades.items():
        print(f"  --simulator {mode:6s} {fmt(times)}")
    ratio = statistics.median(grades["device"]) / statistics.median(grades["inline"])
    print(f"  device / inline: {ratio:.2f}x")

    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "bench.py").write_text(textwrap.dedent(KERNELS))
        data = np.zeros(1 << 20, np.float32)
        rows = {}
        for mode in ("device", "inline"):
            sandbox = ProcessSandbox(Limits(call_timeout_s=600))
            connection = RunnerConnection(work, "sim", sandbox, device_process=mode == "device")
            student = Student("bench", work, "sim", sandbox, connection=connection)
            try:
                rows[mode] = (call_seconds(student, "launches", 200), call_seconds(student, "round_trip", data))
            finally:
                student.close()
    print("one call, warm, seconds, median (fastest):")
    print(f"  {'':8s} {'200 launches':>18s} {'4 MiB there and back':>22s}")
    for mode, (launch, copy) in rows.items():
        print(f"  {mode:8s} {fmt(launch):>18s} {fmt(copy):>22s}")
    per_launch = (statistics.median(rows["device"][0]) - statistics.median(rows["inline"][0])) / 200
    print(f"  launch overhead of the device process: {per_launch * 1e3:.2f} ms per kernel launch")


if __name__ == "__main__":
    main()
