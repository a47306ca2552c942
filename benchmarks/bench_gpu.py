"""Time the course's reference kernels on a real GPU with CUDA events, beside library baselines.

    python3 benchmarks/bench_gpu.py --json out.json --markdown out.md   # on a GPU machine
    .venv/bin/python benchmarks/bench_gpu.py --sim                      # dry run on grader.sim

Run on a lent GPU by `benchmarks/gpu_check.sh`. Each case launches one kernel of solutions/
exactly as the solution's host function does (grid and block from the module's constants), on
device arrays made once: WARMUP launches, then the median of REPEATS launches timed with CUDA
events. The first launch's result is checked against NumPy. CuPy's own kernels (when CuPy is
there) are timed the same way as baselines; every ratio in the report is measured in this one
run. What this calibrates: the `gpu` thresholds of course.toml (time ratios to the reference
kernel timed in the same run), which the GPU performance grading will use.

`--sim` runs the same cases at small sizes on the simulator: it checks this script, not speed.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WARMUP, REPEATS = 3, 20


@dataclass
class Case:
    name: str  # exercise.kernel
    size: str
    run: Callable[[], None]  # one launch (or a CuPy call) on prepared device data
    check: Callable[[], None]  # raises AssertionError when the last result is wrong
    before: Callable[[], None] | None = None  # untimed, before each launch (resetting outputs)
    bytes_moved: float = 0.0  # minimal global traffic, for GB/s
    flops: float = 0.0
    baseline_of: str = ""  # this case is a library baseline for that exercise
    extra: dict = field(default_factory=dict)


def _solutions(name: str):
    sys.path.insert(0, str(ROOT / "solutions"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def _close(got, want, rtol, atol=0.0):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@functools.cache
def _plain_grid_stride(cuda):
    """Stage 2's grid-stride loop without the reference's loads issued ahead: each iteration's
    loads wait for the previous iteration's store (the compiler cannot reorder them: `out` may
    alias `a`)."""
    def add_one_at_a_time(a, b, out):
        for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
            out[i] = a[i] + b[i]
    return cuda.jit(add_one_at_a_time)


def vector_add_cases(cuda, n: int, cp) -> list[Case]:
    m = _solutions("vector_add")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    d_a, d_b, d_out = cuda.to_device(a), cuda.to_device(b), cuda.device_array(n, np.float32)
    blocks, grid = math.ceil(n / m.THREADS_PER_BLOCK), m.grid_blocks()
    y0 = rng.standard_normal(n, np.float32)
    d_y = cuda.to_device(y0)
    size = f"n=2^{int(math.log2(n))}" if n & (n - 1) == 0 else f"n={n}"
    cases = [
        Case("vector_add.add_kernel", size,
             lambda: m.add_kernel[blocks, m.THREADS_PER_BLOCK](d_a, d_b, d_out),
             lambda: _close(d_out.copy_to_host(), a + b, 1e-6), bytes_moved=12.0 * n),
        Case("vector_add.add_grid_stride_kernel", size,
             lambda: m.add_grid_stride_kernel[grid, m.THREADS_PER_BLOCK](d_a, d_b, d_out),
             lambda: _close(d_out.copy_to_host(), a + b, 1e-6), bytes_moved=12.0 * n),
        # side by side with the reference's: the plain loop (a round trip an element: the model
        # says 71% of an H200's bandwidth against the reference's 100%, docs/PERF_MODEL.md)
        Case("vector_add.grid_stride_one_element_a_round_trip", size,
             lambda: _plain_grid_stride(cuda)[grid, m.THREADS_PER_BLOCK](d_a, d_b, d_out),
             lambda: _close(d_out.copy_to_host(), a + b, 1e-6), bytes_moved=12.0 * n),
        Case("vector_add.saxpy_kernel", size,
             lambda: m.saxpy_kernel[blocks, m.THREADS_PER_BLOCK](np.float32(2.0), d_a, d_y),
             lambda: _close(d_y.copy_to_host(), 2.0 * a + y0, 1e-5, 1e-5),
             before=lambda: d_y.copy_to_device(y0), bytes_moved=12.0 * n),
        # the ceiling the graded fractions use, side by side: one device-to-device copy (read + write)
        Case("vector_add.device_to_device_copy", size, lambda: d_out.copy_to_device(d_a),
             lambda: _close(d_out.copy_to_host(), a, 0.0), bytes_moved=8.0 * n),
    ]
    if cp is not None:
        ca, cb, co = cp.asarray(d_a), cp.asarray(d_b), cp.asarray(d_out)
        cases.append(Case("vector_add.cupy_add", size, lambda: cp.add(ca, cb, out=co),
                          lambda: _close(d_out.copy_to_host(), a + b, 1e-6),
                          bytes_moved=12.0 * n, baseline_of="vector_add"))
    return cases


def matmul_cases(cuda, n: int, cp) -> list[Case]:
    m = _solutions("matmul")
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    d_A, d_B, d_C = cuda.to_device(A), cuda.to_device(B), cuda.device_array((n, n), np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    tol = 1e-3 * math.sqrt(n)

    def check():
        np.testing.assert_allclose(d_C.copy_to_host(), want, rtol=1e-3, atol=tol)

    flops, traffic = 2.0 * n ** 3, 12.0 * n * n
    grid = lambda tile: (math.ceil(n / tile), math.ceil(n / tile))  # noqa: E731
    size = f"{n}x{n}x{n}"
    cases = [
        Case("matmul.matmul_naive_kernel", size,
             lambda: m.matmul_naive_kernel[grid(m.BLOCK), (m.BLOCK, m.BLOCK)](d_A, d_B, d_C),
             check, bytes_moved=traffic, flops=flops),
        Case("matmul.matmul_tiled_kernel", size,
             lambda: m.matmul_tiled_kernel[grid(m.TILE), (m.TILE, m.TILE)](d_A, d_B, d_C),
             check, bytes_moved=traffic, flops=flops),
        Case("matmul.matmul_coarsened_kernel", size,
             lambda: m.matmul_coarsened_kernel[grid(m.BIG_TILE), (m.BIG_TILE, m.ROWS_PER_PASS)](
                 d_A, d_B, d_C),
             check, bytes_moved=traffic, flops=flops),
    ]
    if cp is not None:
        cA, cB, cC = cp.asarray(d_A), cp.asarray(d_B), cp.asarray(d_C)
        cases.append(Case("matmul.cupy_matmul", size, lambda: cp.matmul(cA, cB, out=cC), check,
                          bytes_moved=traffic, flops=flops, baseline_of="matmul"))
    return cases


def reduction_cases(cuda, n: int, cp) -> list[Case]:
    m = _solutions("reduction")
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n, np.float32)
    d_x = cuda.to_device(x)
    blocks, grid = math.ceil(n / m.THREADS_PER_BLOCK), m.grid_blocks()
    d_partial = cuda.device_array(blocks, np.float32)
    d_out = cuda.device_array(1, np.float32)
    zero = np.zeros(1, np.float32)
    want = float(x.astype(np.float64).sum())
    tol = 1e-3 * math.sqrt(n) + 1e-3
    size = f"n=2^{int(math.log2(n))}" if n & (n - 1) == 0 else f"n={n}"

    def check_out():
        _close(d_out.copy_to_host()[0], want, 0.0, tol)

    def check_partial():  # the first pass: one partial sum per block
        _close(float(d_partial.copy_to_host().astype(np.float64).sum()), want, 0.0, tol)

    cases = [
        Case("reduction.reduce_tree_kernel (first pass)", size,
             lambda: m.reduce_tree_kernel[blocks, m.THREADS_PER_BLOCK](d_x, d_partial),
             check_partial, bytes_moved=4.0 * n),
        Case("reduction.reduce_shuffle_kernel", size,
             lambda: m.reduce_shuffle_kernel[blocks, m.THREADS_PER_BLOCK](d_x, d_out),
             check_out, before=lambda: d_out.copy_to_device(zero), bytes_moved=4.0 * n),
        Case("reduction.reduce_grid_stride_kernel", size,
             lambda: m.reduce_grid_stride_kernel[grid, m.THREADS_PER_BLOCK](d_x, d_out),
             check_out, before=lambda: d_out.copy_to_device(zero), bytes_moved=4.0 * n),
    ]
    if cp is not None:
        cx, co = cp.asarray(d_x), cp.asarray(d_out)
        cases.append(Case("reduction.cupy_sum", size, lambda: cp.sum(cx, out=co[0]), check_out,
                          bytes_moved=4.0 * n, baseline_of="reduction"))
    return cases


def time_case(cuda, case: Case, warmup: int, repeats: int, hold: Callable[[], object] = lambda: None) -> dict:
    """Median of `repeats` launches timed with CUDA events (ms), after `warmup` launches; `hold()`
    before each start event (grader.backends.gpu.hold_gpu: the launch's dispatch not timed)."""
    start, end = cuda.event(), cuda.event()
    if case.before:
        case.before()
    case.run()
    cuda.synchronize()
    case.check()
    for _ in range(warmup):
        if case.before:
            case.before()
        case.run()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        if case.before:
            case.before()
        hold()
        start.record()
        case.run()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end))
    ms = statistics.median(times)
    out = {"case": case.name, "size": case.size, "median_ms": ms, "min_ms": min(times),
           "max_ms": max(times), "runs": len(times), "baseline_of": case.baseline_of}
    if case.bytes_moved and ms > 0:  # (the simulator's clock does not time a device-to-device copy)
        out["GB/s"] = case.bytes_moved / (ms * 1e-3) / 1e9
    if case.flops and ms > 0:
        out["GFLOP/s"] = case.flops / (ms * 1e-3) / 1e9
    return out


def markdown(results: list[dict], meta: dict) -> str:
    lines = [f"GPU: {meta.get('gpu', '?')}; {meta.get('versions', '')}; "
             f"median of {meta['repeats']} launches after {meta['warmup']} warm-up, CUDA events"
             + ("; each launch's dispatch hidden behind a hold kernel" if meta.get("held") else
                "; the dispatch of each launch timed too (no hold kernel)" if not meta.get("sim") else ""),
             "", "| kernel | size | median | min | GB/s | GFLOP/s | vs library baseline |",
             "|---|---|---|---|---|---|---|"]
    baselines = {r["baseline_of"]: r for r in results if r.get("baseline_of")}
    for r in results:
        exercise = r["case"].split(".")[0]
        base = baselines.get(exercise)
        ratio = "" if base is None or r is base or "error" in r or "error" in base else \
            f"{r['median_ms'] / base['median_ms']:.2f}x its time"
        if "error" in r:
            lines.append(f"| {r['case']} | {r['size']} | FAILED: {r['error']} | | | | |")
            continue
        rate = {k: f"{r[k]:,.1f}" if k in r else "" for k in ("GB/s", "GFLOP/s")}
        lines.append(f"| {r['case']} | {r['size']} | {r['median_ms']:.4f} ms | "
                     f"{r['min_ms']:.4f} ms | {rate['GB/s']} | {rate['GFLOP/s']} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", action="store_true", help="a dry run on grader.sim, small sizes")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--repeats", type=int, default=REPEATS)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.sim:
        import grader.sim as sim

        sim.install(checks=sim.Checks(off={"races", "uninitialised"}))
    from numba import cuda

    cp = None
    if not args.sim:
        try:
            import cupy as cp  # noqa: F811 - the library baselines
        except ImportError:
            cp = None
    sizes = {"vector_add": 1 << 12, "matmul": 64, "reduction": 1 << 12} if args.sim else \
        {"vector_add": 1 << 26, "matmul": 2048, "reduction": 1 << 26}
    warmup, repeats = (1, 2) if args.sim else (WARMUP, args.repeats)
    meta = {"warmup": warmup, "repeats": repeats, "sim": args.sim,
            "date": time.strftime("%Y-%m-%d %H:%M")}
    try:
        dev = cuda.get_current_device()
        meta["gpu"] = f"{dev.name.decode() if isinstance(dev.name, bytes) else dev.name}, " \
                      f"cc {dev.compute_capability}"
    except Exception as exc:  # noqa: BLE001 - the report says what it could not read
        meta["gpu"] = f"unknown ({exc})"
    import numba

    meta["versions"] = f"numba {numba.__version__}, numpy {np.__version__}" + (
        f", cupy {cp.__version__}" if cp is not None else ", no cupy")
    hold = lambda: None  # noqa: E731
    if not args.sim:
        from grader.backends.gpu import hold_gpu

        meta["held"] = hold_gpu()
        hold = hold_gpu
    results: list[dict] = []
    for make, key in ((vector_add_cases, "vector_add"), (matmul_cases, "matmul"),
                      (reduction_cases, "reduction")):
        try:
            cases = make(cuda, sizes[key], cp)
        except Exception as exc:  # noqa: BLE001 - one exercise failing must not hide the rest
            results.append({"case": f"{key} (set-up)", "size": str(sizes[key]),
                            "error": f"{type(exc).__name__}: {exc}"})
            continue
        for case in cases:
            try:
                results.append(time_case(cuda, case, warmup, repeats, hold))
            except Exception as exc:  # noqa: BLE001
                results.append({"case": case.name, "size": case.size,
                                "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            print(json.dumps(results[-1]), flush=True)
    text = markdown(results, meta)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
