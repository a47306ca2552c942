"""What the replay costs: a call of each reference solution, and its replay on other inputs, side by side.

    .venv/bin/python benchmarks/bench_replay.py               # 5 rounds
    .venv/bin/python benchmarks/bench_replay.py --rounds 9

Per function, one call at the size its grading tests use most (through the process sandbox and
the device process, as `gpugrade grade` makes it), then `require_kernel_launch` with the test's
own kind of check twice: the data flow alone, and the data flow with the replay (the call's device
requests run again on other inputs, the answer re-checked: grader.judge.replay). Rounds
interleave them; medians, and the replay's cost as a fraction of the call's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.judge import RunnerConnection, Student, require_kernel_launch  # noqa: E402
from grader.judge.collective import expect_allreduced, rank_inputs  # noqa: E402
from grader.judge.correctness import expect_close  # noqa: E402
from grader.sandbox import Limits, ProcessSandbox  # noqa: E402


def _sum(args, got):
    expect_close(np.array([got], np.float64), np.array([args[0].astype(np.float64).sum()]), rtol=1e-3, what="sum")


def _product(args, got):
    expect_close(got, (args[0].astype(np.float64) @ args[1]).astype(np.float32), rtol=1e-3, atol=1e-3, what="C")


CASES = [  # (module, function, inputs, check, ranks)
    ("vector_add", "vector_add", lambda rng: [rng.standard_normal(1 << 18).astype(np.float32) for _ in range(2)],
     lambda args, got: expect_close(got, args[0] + args[1], rtol=1e-6, what="a + b"), False),
    ("matmul", "matmul_tiled", lambda rng: [rng.standard_normal((64, 80)).astype(np.float32),
                                            rng.standard_normal((80, 96)).astype(np.float32)], _product, False),
    ("reduction", "reduce_shuffle", lambda rng: [(rng.standard_normal(40000) + 1).astype(np.float32)], _sum, False),
    ("allreduce", "allreduce_ring", lambda rng: rank_inputs(rng, 4, 1 << 14, np.float32),
     lambda args, outs: expect_allreduced(outs, args, "ring"), True),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    rng = np.random.default_rng(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for module, function, make, check, ranks in CASES:
            work = Path(tmp) / module
            work.mkdir(mode=0o755)
            shutil.copy(ROOT / "solutions" / f"{module}.py", work / f"{module}.py")
            (work / f"{module}.py").chmod(0o644)
            sandbox = ProcessSandbox(Limits())
            student = Student(module, str(work), "sim", sandbox, allowed_imports=None,
                              connection=RunnerConnection(str(work), "sim", sandbox))
            times: dict[str, list[float]] = {"call": [], "data flow": [], "replay": []}
            try:
                for _ in range(rounds + 1):  # the first round warms up (imports, JIT), untimed
                    inputs = make(rng)
                    started = time.perf_counter()
                    result = student.call_ranks(function, inputs) if ranks else student.call(function, *inputs)
                    call = time.perf_counter() - started
                    started = time.perf_counter()
                    require_kernel_launch(result, "sim")
                    flow = time.perf_counter() - started
                    started = time.perf_counter()
                    require_kernel_launch(result, "sim", check=check)
                    replay = time.perf_counter() - started - flow  # (the data flow runs again in it)
                    for key, value in (("call", call), ("data flow", flow), ("replay", replay)):
                        times[key].append(value)
            finally:
                student.close()
            medians = {key: statistics.median(values[1:]) for key, values in times.items()}
            rows.append((f"{module}.{function}", medians))
    print(f"| call | call (ms) | data flow (ms) | replay (ms) | replay / call |\n|---|---|---|---|---|")
    for name, m in rows:
        print(f"| {name} | {m['call'] * 1e3:.1f} | {m['data flow'] * 1e3:.1f} | {m['replay'] * 1e3:.1f} "
              f"| {m['replay'] / m['call']:.2f} |")
    print(f"\n(medians of {rounds} rounds after one warm-up; a call includes the runner's host code, the "
          f"transfers and the device's report)")


if __name__ == "__main__":
    main()
