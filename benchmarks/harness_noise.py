"""The timing harness's run-to-run noise: `gpugrade bench --reference` N times, then per performance
test the coefficient of variation of its median over the runs (issue 11's target: <= 2% on a GPU).

    python3 benchmarks/harness_noise.py --backend gpu --runs 10 --out DIR     # on a GPU machine
    .venv/bin/python benchmarks/harness_noise.py --backend sim --runs 2       # dry run (modelled: 0%)

`--budget-s`: start no run that would end past it (judged from the runs so far). DIR/noise.json
holds the result (benchmarks/gpu_summary.py reads it), written again after every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting runs that would end after this")
    ap.add_argument("--out", default=None, help="folder for each run's JSON (default: a temporary one)")
    ap.add_argument("--exercise", default=None, help="only this exercise's perf tests (a run of all of them took "
                                                     "65 s on an H200: ten do not fit a device check)")
    ap.add_argument("--stage", type=int, default=None, help="only this stage's")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="harness-noise-"))
    out.mkdir(parents=True, exist_ok=True)
    runs, began = [], time.monotonic()
    for i in range(args.runs):
        elapsed = time.monotonic() - began
        if args.budget_s and runs and elapsed + elapsed / len(runs) > args.budget_s:
            print(f"stopped after {len(runs)} runs: another would end past the {args.budget_s:g} s budget")
            break
        path = out / f"noise.{i + 1}.json"
        chosen = ([args.exercise] if args.exercise else []) + (["--stage", str(args.stage)] if args.stage else [])
        done = subprocess.run([sys.executable, "-m", "grader", "bench", *chosen, "--reference", "--backend",
                               args.backend, "--sandbox", "none", "--json", str(path)], cwd=ROOT)
        if done.returncode != 0:
            return done.returncode
        runs.append(json.loads(path.read_text()))
        _summarize(runs, out, final=False)  # after every run: a run stopped at a limit keeps these
    worst = _summarize(runs, out, final=True)
    print(f"worst CV: {worst:.2%} over {len(runs)} runs (target <= 2%)")
    return 0


def _summarize(runs: list, out: Path, final: bool) -> float:
    """noise.json from the runs so far; the worst CV (0 with one run: no spread to tell)."""
    worst, tests = 0.0, {}
    for row in runs[0] if runs else ():
        medians = [next(r["seconds"] for r in run if r["test"] == row["test"]) for run in runs]
        cv = statistics.stdev(medians) / statistics.mean(medians) if len(medians) > 1 else 0.0
        worst = max(worst, cv)
        tests[row["test"]] = {"source": row["source"], "gpu": row["gpu"], "median_s": statistics.median(medians),
                              "runs": len(medians), "cv": cv}
        if final:
            print(f"{row['test']}: {row['source']} on {row['gpu']}: median {statistics.median(medians) * 1e6:.4g} us "
                  f"over {len(medians)} runs, CV {cv:.2%}")
    (out / "noise.json").write_text(json.dumps({"runs": len(runs), "worst_cv": worst, "tests": tests}, indent=1))
    return worst

if __name__ == "__main__":
    sys.exit(main())
