"""What the judge/runner split costs: one submission graded with each sandbox, side by side.

    .venv/bin/python benchmarks/bench_sandbox.py                       # vector_add, 3 rounds
    .venv/bin/python benchmarks/bench_sandbox.py --rounds 5 --exercise vector_add matmul

Each cell is a whole `gpugrade grade SUBMISSION EXERCISE --backend sim --sandbox S` as
`grader.grading.grade()` runs it (a pytest judge in a child process, one runner per exercise,
plus one for the reference solution where performance tests ask for it). Submissions: the
reference solutions (every test runs its kernels) and the stubs (every call fails at once, so
the sandbox's own cost dominates). Rounds interleave the sandboxes so drift hits all alike; the
median and the fastest round are reported, and each sandbox's median over `none` (a plain
subprocess, no confinement: the closest there is to grading in-process). Docker needs an engine
and the runner image (docker/build-images.sh); without them its column says so.
A second table takes the grade apart: starting a runner and its first call (the interpreter,
numba and the simulator imported, the student's module imported, one vector_add of 2^16 on the
simulator), a warm call, and closing the runner.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course import Course  # noqa: E402
from grader.errors import UsageError  # noqa: E402
from grader.course import make_workspace  # noqa: E402
from grader.grading import grade  # noqa: E402
from grader.judge import Student  # noqa: E402
from grader.sandbox import SANDBOXES, Limits, SandboxSpec, make_sandbox  # noqa: E402

SUBMISSIONS = {"reference": ROOT / "solutions", "stubs": ROOT / "exercises"}
ORDER = ("none", "process", "docker")
TARGET_OVER_NONE = {"process": 1.0, "docker": 3.0}  # seconds per submission


def runner_costs(sandbox: str, image: str, rounds: int) -> dict[str, list[float]]:
    """Seconds for: start + first call, a warm call, close; one runner per round."""
    costs: dict[str, list[float]] = {"start + first call": [], "warm call": [], "close": []}
    rng = np.random.default_rng(0)
    a, b = rng.random(1 << 16, dtype=np.float32), rng.random(1 << 16, dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="gpugrade-bench-") as tmp:
        workspace = Path(tmp) / "workspace"
        make_workspace({"vector_add": ROOT / "solutions" / "vector_add.py"}, workspace)
        box = make_sandbox(SandboxSpec(sandbox, docker_image=image), Limits(call_timeout_s=120))
        for _ in range(rounds):
            student = Student("vector_add", str(workspace), "sim", box)
            started = time.perf_counter()
            student.call("vector_add", a, b)
            costs["start + first call"].append(time.perf_counter() - started)
            warm = []
            for _ in range(5):
                started = time.perf_counter()
                student.call("vector_add", a, b)
                warm.append(time.perf_counter() - started)
            costs["warm call"].append(min(warm))
            started = time.perf_counter()
            student.close()
            costs["close"].append(time.perf_counter() - started)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--exercise", nargs="+", default=["vector_add"])
    parser.add_argument("--sandbox", nargs="+", default=list(ORDER), choices=SANDBOXES)
    parser.add_argument("--docker-image", default=SandboxSpec.docker_image)
    args = parser.parse_args(argv)
    course = Course(ROOT)
    sandboxes = [s for s in ORDER if s in args.sandbox]
    skipped: dict[str, str] = {}
    if "docker" in sandboxes:
        try:
            from grader.sandbox.container import check_available

            check_available(args.docker_image)
        except UsageError as exc:
            skipped["docker"] = str(exc)
            sandboxes.remove("docker")

    times: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for label, folder in SUBMISSIONS.items():
            for sandbox in sandboxes:
                spec = SandboxSpec(sandbox, docker_image=args.docker_image)
                started = time.perf_counter()
                results = grade(folder, args.exercise, backend="sim", course=course, sandbox=spec, seed="5eed")
                elapsed = time.perf_counter() - started
                if results.errors:
                    print(f"{label}/{sandbox}: grader errors: {results.errors}", file=sys.stderr)
                    return 3
                times.setdefault((label, sandbox), []).append(elapsed)
                print(f"round {rnd + 1}: {label:<9} {sandbox:<8} {elapsed:6.2f} s  "
                      f"({results.score:g}/{results.max_score:g})", file=sys.stderr)

    print(f"\ngpugrade grade <submission> {' '.join(args.exercise)} --backend sim, per submission: "
          f"median (fastest) of {args.rounds} rounds, seconds")
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    header = ["submission", *sandboxes, *(f"{s} - none" for s in sandboxes if s != "none")]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for label in SUBMISSIONS:
        medians = {s: statistics.median(times[(label, s)]) for s in sandboxes}
        cells = [label] + [f"{medians[s]:.2f} ({min(times[(label, s)]):.2f})" for s in sandboxes]
        for s in sandboxes:
            if s != "none" and "none" in medians:
                over = medians[s] - medians["none"]
                verdict = "ok" if over <= TARGET_OVER_NONE.get(s, float("inf")) else "over target"
                cells.append(f"{over:+.2f} ({verdict} <= {TARGET_OVER_NONE.get(s, 0):g})")
        print("| " + " | ".join(cells) + " |")

    print(f"\none runner (vector_add.py of the reference, 2^16 elements, sim backend): median (fastest) of "
          f"{args.rounds} rounds, seconds\n")
    costs = {s: runner_costs(s, args.docker_image, args.rounds) for s in sandboxes}
    steps = list(next(iter(costs.values())))
    print("| step | " + " | ".join(sandboxes) + " |")
    print("|" + "---|" * (len(sandboxes) + 1))
    for step in steps:
        print(f"| {step} | " + " | ".join(f"{statistics.median(costs[s][step]):.3f} ({min(costs[s][step]):.3f})"
                                          for s in sandboxes) + " |")
    for sandbox, why in skipped.items():
        print(f"\n{sandbox}: not measured: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
