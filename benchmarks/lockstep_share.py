"""How often the lockstep (SIMT) executor runs a launch, and what lane compaction buys.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lockstep_share.py            # both, printed
    PYTHONPATH=$PWD .venv/bin/python benchmarks/lockstep_share.py --collatz  # the timing only

Grading suite: the reference solutions and every known-wrong submission of tests/submissions/
(the solutions with their mutations), each module imported in this process under grader.sim
(`executor="auto"`, two virtual GPUs) and its host functions called on small inputs of the sizes
the grading tests use; every launch's `LaunchRecord` says which executor ran it and, for a
fallback, why (`fallback_reason`). A launch that raised a finding publishes no record: those
are counted apart. numba-cuda's own test modules: tests/sim/conformance/numba_suite.py
--launches.

Collatz: the strongly divergent kernel (2^16 starts, 256 threads a block), counters only
(race and uninitialised-read checkers off), lockstep (best of 3 warm launches) and per-thread
(one warm launch).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the grading suite
def _calls(module, name: str):
    """(function name, argument maker) of the host functions the grading tests call."""
    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    if name == "vector_add":
        for n in (1, 33, 1025, 5000):
            yield "vector_add", lambda n=n: (f32(n), f32(n))
            yield "vector_add_grid_stride", lambda n=n: (f32(n), f32(n))
            yield "saxpy_inplace", lambda n=n: (1.5, f32(n), f32(n))
    elif name == "matmul":
        for m, k, n in ((1, 1, 1), (17, 23, 31), (64, 80, 96)):
            for fn in ("matmul_naive", "matmul_tiled", "matmul_coarsened"):
                yield fn, lambda m=m, k=k, n=n: (f32(m, k), f32(k, n))
    elif name == "reduction":
        for n in (1, 1000, 4096 * 5 + 7):
            for fn in ("reduce_tree", "reduce_shuffle", "reduce_grid_stride"):
                yield fn, lambda n=n: (f32(n),)
    elif name == "allreduce":
        from grader.backends.ranks import Ranks, devices_for
        from numba import cuda

        for count, n in ((2, 1003), (3, 1), (4, 4009)):
            for fn in ("allreduce_naive", "allreduce_ring", "allreduce_pipelined"):
                def make(count=count, n=n):
                    ranks = Ranks(count, devices_for(count, 2), cuda)
                    bufs = []
                    for r in ranks:
                        with r:
                            bufs.append(cuda.to_device(f32(n)))
                    return ranks, bufs
                yield fn, make


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_share_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _submissions(tmp: Path) -> list[tuple[str, Path]]:
    from grader.course import Course
    from grader.course.validate import load_known_wrong

    course = Course(ROOT)
    found = [("reference solutions", ROOT / "solutions")]
    for kw in load_known_wrong(course):
        found.append((kw.name, kw.materialize(course, tmp / kw.name)))
    return found


def _feature(reason: str) -> str:
    """A fallback reason without where it happened (the tally's key)."""
    return re.sub(r" at (\S+:)?(line )?\d+$", "", reason)


def grading_suite() -> dict:
    import grader.sim as sim

    tally = {"simt": 0, "thread": 0, "finding": 0, "reasons": collections.Counter(),
             "where": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for label, folder in _submissions(Path(tmp)):
            for path in sorted(folder.glob("*.py")):
                exercise = path.stem
                with sim.installed(devices=2), sim.trace() as records:
                    try:
                        module = _load(path)
                    except Exception:
                        continue
                    for fn, make in _calls(module, exercise):
                        if not hasattr(module, fn):
                            continue
                        try:
                            getattr(module, fn)(*make())
                        except sim.SimError:
                            tally["finding"] += 1
                        except Exception:
                            pass  # a wrong submission's own failure: not a launch
                for r in records:
                    tally[r.executor] += 1
                    if r.fallback_reason:
                        key = _feature(r.fallback_reason)
                        tally["reasons"][key] += 1
                        tally["where"].setdefault(key, f"{label}: {r.kernel}: {r.fallback_reason}")
    return tally


# ------------------------------------------------------------------ Collatz
def collatz_kernel():
    from numba import cuda

    @cuda.jit
    def collatz(start, steps):
        i = cuda.grid(1)
        if i < start.size:
            n = start[i]
            count = 0
            while n != 1:
                n = n // 2 if n % 2 == 0 else 3 * n + 1
                count += 1
            steps[i] = count
    return collatz


def collatz_times(log2n: int = 16) -> dict:
    import grader.sim as sim
    from numba import cuda

    kernel = collatz_kernel()
    n = 1 << log2n
    start = np.arange(1, n + 1, dtype=np.int64)
    out = {}
    for executor, runs in (("simt", 3), ("thread", 1)):
        with sim.installed(executor=executor, checks=sim.Checks(off={"races", "uninitialised"})), \
                sim.trace() as records:
            d_start, steps = cuda.to_device(start), cuda.device_array(n, np.int64)
            kernel[n // 256, 256](d_start, steps)  # warm: typing and transform
            best = float("inf")
            for _ in range(runs):
                t0 = time.process_time()
                kernel[n // 256, 256](d_start, steps)
                cuda.synchronize()
                best = min(best, time.process_time() - t0)
            result = steps.copy_to_host()
        assert all(r.executor == executor for r in records)
        out[executor] = (best, result)
    assert np.array_equal(out["simt"][1], out["thread"][1])
    return {"simt_s": out["simt"][0], "thread_s": out["thread"][0],
            "ratio": out["thread"][0] / out["simt"][0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collatz", action="store_true", help="only the Collatz timing")
    parser.add_argument("--suite", action="store_true", help="only the grading-suite share")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if not args.collatz:
        t = grading_suite()
        total = t["simt"] + t["thread"]
        print(f"grading suite: {total} launches with a record, {t['simt']} lockstep "
              f"({100 * t['simt'] / max(1, total):.1f}%), {t['thread']} per-thread; "
              f"{t['finding']} calls stopped by a finding")
        for key, count in t["reasons"].most_common():
            print(f"  {count:5d}  {key}    (e.g. {t['where'][key]})")
    if not args.suite:
        c = collatz_times()
        print(f"Collatz 2^16: lockstep {c['simt_s'] * 1e3:.1f} ms, per-thread "
              f"{c['thread_s'] * 1e3:.1f} ms: {c['ratio']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
