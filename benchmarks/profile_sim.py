"""Time (and optionally profile) grader.sim's hot paths on the benchmark workloads.

    .venv/bin/python benchmarks/profile_sim.py                      # the target table
    .venv/bin/python benchmarks/profile_sim.py --case simt-matmul-races --profile
    .venv/bin/python benchmarks/profile_sim.py --dump counters.json # counters, for diffing

Each case: executor, checks, workload. Best of --repeat warm launches (the first launch, which
transforms the kernel, is not timed). Results are checked against NumPy.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

# before NumPy loads BLAS: its spinning worker threads (after the checks' `A @ B`) would be
# timed with the next launch (see bench_sim.SINGLE_THREADED_BLAS)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import grader.sim as sim  # noqa: E402

OFF = {"counters": ["races", "uninitialised"], "races": []}
CASES = {
    "simt-matmul-counters": ("simt", "counters", "matmul128"),
    "simt-matmul-races": ("simt", "races", "matmul128"),
    "simt-vadd20-counters": ("simt", "counters", "vadd20"),
    "simt-vadd20-races": ("simt", "races", "vadd20"),
    "simt-reduce16-races": ("simt", "races", "reduce16"),
    "thread-matmul-counters": ("thread", "counters", "matmul128"),
    "thread-matmul-races": ("thread", "races", "matmul128"),
}
DEFAULT = ["simt-matmul-counters", "simt-matmul-races", "simt-vadd20-counters",
           "thread-matmul-counters", "thread-matmul-races"]


def run_case(name, repeat, profile=False, warmup=1):
    from numba import cuda

    import kernels

    executor, checks, workload = CASES[name]
    sim.tune_process()  # as the device process does at its start
    sim.install(executor=executor, checks=sim.Checks(off=OFF[checks]))
    try:
        w = kernels.WORKLOADS[workload]()
        host = w.make_inputs()
        grid, block = w.launch(host)
        inputs = [cuda.to_device(h) for h in host[:-1]]
        times, record = [], None
        for k in range(repeat + warmup):
            out = cuda.to_device(np.zeros_like(host[-1]))
            prof = cProfile.Profile() if profile and k == repeat + warmup - 1 else None
            with sim.trace() as records:
                t0, c0 = time.perf_counter(), time.process_time()
                if prof:
                    prof.enable()
                w.kernel[grid, block](*inputs, out)
                if prof:
                    prof.disable()
                t = (time.perf_counter() - t0, time.process_time() - c0)
            w.check(host, out.copy_to_host())
            record = records[-1]
            if k >= warmup:
                times.append(t)
            if prof:
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        assert record.executor == executor, record.fallback_reason
        counters = {k: v for k, v in record.counters.items() if k != "threads"}
        threads = {k: int(np.asarray(v).sum() + (np.asarray(v) * np.arange(v.size).reshape(v.shape)).sum())
                   for k, v in record.threads.items()}
        return (min(t[0] for t in times), min(t[1] for t in times)), counters, threads
    finally:
        sim.uninstall()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", choices=list(CASES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dump")
    args = ap.parse_args()
    out = {}
    for name in args.case or DEFAULT:
        thread = name.startswith("thread")  # slow: one cold launch (set-up is small next to it)
        best, counters, threads = run_case(name, 1 if thread else args.repeat, args.profile,
                                           warmup=0 if thread else 1)
        print(f"{name:28s} {best[0] * 1000:10.1f} ms wall {best[1] * 1000:10.1f} ms cpu",
              flush=True)
        out[name] = {"counters": counters, "threads": threads}
    if args.dump:
        Path(args.dump).write_text(json.dumps(out, indent=1, sort_keys=True, default=float))


if __name__ == "__main__":
    main()
