"""Benchmark grader.sim (SIMT lockstep and per-thread executors) against numba-cuda's stock
simulator, side by side in one run, and write the Markdown table into its section of docs/BENCHMARKS.md
(between its markers: the other benchmarks' sections stay).

    .venv/bin/python benchmarks/bench_sim.py                  # everything (several minutes)
    .venv/bin/python benchmarks/bench_sim.py --only matmul128 --executors simt --no-write

Every cell runs in its own subprocess with a timeout: the stock simulator with
NUMBA_ENABLE_CUDASIM=1 (and a minimal `shfl_down_sync` shim, see kernels.stock_shim), ours with
`grader.sim.install(executor=..., checks=...)`. Every result is checked against NumPy in the
worker; a wrong result is reported as such, never timed as a success. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from doc_section import write_section  # noqa: E402

BEGIN, END = "<!-- bench_sim: begin -->", "<!-- bench_sim: end -->"

# Our configurations: counters are always collected; "counters" turns off the race and
# uninitialised-read checkers (bounds stay on, they cannot be turned off), "races" is the
# default Checks() with every checker on, as grading runs it.
CHECKS = {
    "counters": {"off": ["races", "uninitialised"]},
    "races": {"off": []},
}
# The workers check results with NumPy (`A @ B` for matmul). A multithreaded BLAS keeps its
# worker threads spinning for a while after each call: on a small machine they then compete with
# the next timed launch and show up in its process time (measured: SIMT matmul 128 at 20 ms
# doubled to 40 ms CPU). No simulator here calls BLAS, so every worker gets a single-threaded one.
SINGLE_THREADED_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
EXECUTORS = ("simt", "thread")
WORKLOAD_KEYS = ("matmul128", "vadd16", "vadd20", "reduce16")

# Repeats: after the first launch (which includes the one-off per-kernel set-up: the SIMT
# transform and numba's typing), a configuration is launched again up to REPEATS times or until
# REPEAT_BUDGET seconds are spent, and the fastest warm launch is reported; one whose first launch
# took over SINGLE_ABOVE seconds (the per-thread executor on big grids, where the set-up is small
# next to the run) is reported from its first launch only.
REPEATS, REPEAT_BUDGET, SINGLE_ABOVE = 7, 3.0, 15.0
# The stock simulator starts one OS thread per CUDA thread: vector add 2^20 would take minutes.
STOCK_CAPS = {"vadd20": 60.0}


# ------------------------------------------------------------------------------ workers
def _worker(args) -> dict:
    sys.path.insert(0, str(HERE))
    if args.mode == "stock":
        assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    import numpy as np
    from numba import cuda

    import kernels

    if args.mode == "stock":
        kernels.stock_shim()
    else:
        import grader.sim as sim

        sim.tune_process()  # this worker process is the simulator's own, as the device process is
        sim.install(executor=args.executor, checks=sim.Checks(**CHECKS[args.checks]))
    w = kernels.WORKLOADS[args.workload]()
    host = w.make_inputs()
    grid, block = w.launch(host)
    inputs = [cuda.to_device(h) for h in host[:-1]]

    def once():
        out = cuda.to_device(np.zeros_like(host[-1]))
        records = []
        t0, c0 = time.perf_counter(), time.process_time()
        if args.mode == "stock":
            w.kernel[grid, block](*inputs, out)
        else:
            with sim.trace() as records:
                w.kernel[grid, block](*inputs, out)
        cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        result = out.copy_to_host()
        w.check(host, result)  # raises AssertionError on a wrong result
        return wall, cpu, records

    res = {"workload": w.name}
    first_wall, first_cpu, records = once()
    res["first_wall"], res["first_cpu"] = first_wall, first_cpu
    walls, cpus = [first_wall], [first_cpu]
    if args.mode == "sim" and first_wall < SINGLE_ABOVE:
        walls, cpus = [], []
        start = time.perf_counter()
        while len(walls) < REPEATS and (not walls or time.perf_counter() - start < REPEAT_BUDGET):
            wall, cpu, records = once()
            walls.append(wall)
            cpus.append(cpu)
    res["wall"], res["cpu"], res["runs"] = min(walls), min(cpus), len(walls)
    if records:
        rec = records[0]
        res["executor"], res["fallback_reason"] = rec.executor, rec.fallback_reason
        res["counters"] = {k: rec.counters[k] for k in (
            "sectors_per_request", "wavefronts_per_shared_request", "atomics", "warp_ops")}
    return res


def run_cell(mode: str, workload: str, timeout: float, executor: str = "", checks: str = "",
             python: str = sys.executable) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", mode, "--workload", workload]
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.update(SINGLE_THREADED_BLAS)
    if mode == "stock":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        cmd += ["--executor", executor, "--checks", checks]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "timeout": timeout}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"status": "error", "error": " | ".join(tail), "elapsed": time.perf_counter() - t0}


# ------------------------------------------------------------------------------ report
def _fmt_time(cell: dict | None) -> str:
    if cell is None:
        return "not run"
    status = cell.get("status", "ok")
    if status == "timeout":
        return f"> {cell['timeout']:.0f} s"
    if status == "wrong":
        return "WRONG RESULT"
    if status != "ok":
        return "error"
    t = cell["wall"]
    mark = "" if cell.get("runs", 1) > 1 else " (1 run)"
    if t < 1:
        return f"{t * 1e3:.1f} ms{mark}"
    return f"{t:.2f} s{mark}"


def _ratio(stock: dict | None, ours: dict | None) -> str:
    if not stock or not ours or ours.get("status", "ok") != "ok":
        return "-"
    s = stock.get("status", "ok")
    if s == "ok":
        return f"{stock['wall'] / ours['wall']:,.0f}x" if stock["wall"] / ours["wall"] >= 10 \
            else f"{stock['wall'] / ours['wall']:.1f}x"
    if s == "timeout":
        return f"> {stock['timeout'] / ours['wall']:,.0f}x"
    return "-"


def machine() -> dict:
    from importlib.metadata import version

    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "grader"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        commit += " (grader/ modified)" if dirty else ""
    except OSError:
        commit = "?"
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
        "versions": {p: version(p) for p in ("numpy", "numba", "numba-cuda", "greenlet")},
        "commit": commit,
    }


def targets(results: dict) -> list[tuple[str, str, bool | None]]:
    def ratio(workload, key):
        st, ours = results.get((workload, "stock")), results.get((workload, key))
        if not st or not ours or ours.get("status", "ok") != "ok":
            return None
        if st.get("status", "ok") == "ok":
            return st["wall"] / ours["wall"]
        if st.get("status") == "timeout":
            return st["timeout"] / ours["wall"]  # a lower bound
        return None

    out = []
    for label, key, goal in (("tiled matmul 128 vs stock, SIMT, counters", "simt/counters", 1000),
                             ("tiled matmul 128 vs stock, SIMT, race checking", "simt/races", 100),
                             ("tiled matmul 128 vs stock, per-thread, counters",
                              "thread/counters", 20)):
        r = ratio("matmul128", key)
        out.append((f"{label} >= {goal}x", "not run" if r is None else f"{r:,.0f}x",
                    None if r is None else r >= goal))
    v = results.get(("vadd20", "simt/counters"))
    ok = v is not None and v.get("status", "ok") == "ok"
    out.append(("vector add 2^20, SIMT, counters < 0.2 s", _fmt_time(v) if v else "not run",
                (v["wall"] < 0.2) if ok else None))
    return out


def markdown(results: dict, info: dict, configs: list[str], workloads: list[str],
             load: tuple[tuple, tuple], elapsed: float) -> str:
    names = {}
    for key in configs:
        ex, ch = key.split("/")
        names[key] = f"{'SIMT' if ex == 'simt' else 'per-thread'}, " \
                     f"{'counters' if ch == 'counters' else 'all checks (races on)'}"
    head = "| workload | stock simulator | " + " | ".join(
        f"{names[k]} | ratio" for k in configs) + " |"
    lines = [head, "|---" * (2 + 2 * len(configs)) + "|"]
    for wkey in workloads:
        row = [results.get((wkey, "name"), wkey), _fmt_time(results.get((wkey, "stock")))]
        for k in configs:
            row += [_fmt_time(results.get((wkey, k))),
                    _ratio(results.get((wkey, "stock")), results.get((wkey, k)))]
        lines.append("| " + " | ".join(row) + " |")
    # second table: first launch and CPU time
    lines2 = ["| workload | configuration | first launch (wall) | best warm (wall) | "
              "best warm (CPU) | runs | executor used |", "|---|---|---|---|---|---|---|"]
    for wkey in workloads:
        for k in ["stock", *configs]:
            c = results.get((wkey, k))
            if not c or c.get("status", "ok") != "ok":
                continue
            lines2.append(
                f"| {results.get((wkey, 'name'), wkey)} | {'stock' if k == 'stock' else names[k]}"
                f" | {c['first_wall']:.4f} s | {c['wall']:.4f} s | {c['cpu']:.4f} s | "
                f"{c.get('runs', 1)} | {c.get('executor', 'stock')}"
                f"{' (fallback: ' + c['fallback_reason'] + ')' if c.get('fallback_reason') else ''}"
                " |")
    problems = [f"- {results.get((w, 'name'), w)}, {k}: {c.get('status')}: {c.get('error', '')}"
                for (w, k), c in sorted(results.items(), key=str)
                if isinstance(c, dict) and c.get("status") in ("error", "wrong")]
    tlines = ["| target | measured | met |", "|---|---|---|"]
    for label, measured, met in targets(results):
        tlines.append(f"| {label} | {measured} | "
                      f"{'-' if met is None else ('yes' if met else '**no**')} |")
    v = info["versions"]
    return "\n".join([
        BEGIN,
        "## Simulator speed: ours against numba's stock simulator",
        "",
        "Generated by `.venv/bin/python benchmarks/bench_sim.py` (method: benchmarks/README.md);"
        " this section, between its markers, is rewritten by it: do not edit it by hand.",
        "",
        f"- date: {info['date']}; commit {info['commit']}",
        f"- machine: {info['nproc']} CPUs, {info['cpu']}; load average before/after "
        f"{' '.join(f'{x:.1f}' for x in load[0])} / {' '.join(f'{x:.1f}' for x in load[1])} "
        "(other processes share the CPUs: wall times are noisy, see the CPU column)",
        f"- Python {info['python']}, numpy {v['numpy']}, numba {v['numba']}, "
        f"numba-cuda {v['numba-cuda']}, greenlet {v['greenlet']}",
        f"- whole benchmark: {elapsed:.0f} s",
        "",
        "Times are one kernel launch plus `cuda.synchronize()`, wall clock, inputs already on "
        "the device; ours: the best warm launch (the first launch, which includes the SIMT "
        "transform and numba typing, is in the second table); stock: a single launch, capped by "
        "a timeout. \"counters\": counters + bounds checks, race and uninitialised-read checkers "
        "off (`Checks(off={'races', 'uninitialised'})`); \"all checks\": the default `Checks()`, "
        "race checker on. Every result was checked against NumPy. Ratio = stock / ours.",
        "",
        *lines,
        "",
        "### Targets",
        "",
        *tlines,
        "",
        "### First launch and CPU time",
        "",
        *lines2,
        "",
        *(["### Failures", "", *problems, ""] if problems else []),
        "The stock simulator has no warp shuffles: the reduction runs on it with a minimal "
        "`shfl_down_sync` shim (benchmarks/kernels.py: `stock_shim`, the block barrier as the "
        "warp rendezvous), which adds two block barriers per shuffle.",
        END,
    ])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(WORKLOAD_KEYS),
                    help=f"comma-separated workloads ({', '.join(WORKLOAD_KEYS)})")
    ap.add_argument("--executors", default=",".join(EXECUTORS))
    ap.add_argument("--checks", default=",".join(CHECKS))
    ap.add_argument("--no-stock", action="store_true", help="skip the stock simulator")
    ap.add_argument("--stock-timeout", type=float, default=150.0,
                    help="seconds per stock cell (default 150; vector add 2^20: 60)")
    ap.add_argument("--timeout", type=float, default=240.0,
                    help="seconds per cell of ours (default 240)")
    ap.add_argument("--output", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--json", help="also write the raw results here")
    # internal: one cell in this process
    ap.add_argument("--worker", choices=("stock", "sim"), dest="mode")
    ap.add_argument("--workload")
    ap.add_argument("--executor")
    args = ap.parse_args(argv)

    if args.mode:
        args.checks = args.checks if args.checks in CHECKS else "counters"
        try:
            res = _worker(args)
            res["status"] = "ok"
        except AssertionError as e:
            res = {"status": "wrong", "error": str(e).strip().splitlines()[0][:200]}
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    workloads = [w for w in args.only.split(",") if w]
    executors = [e for e in args.executors.split(",") if e]
    checks = [c for c in args.checks.split(",") if c]
    configs = [f"{e}/{c}" for e in executors for c in checks]
    results: dict = {}
    load0 = os.getloadavg()
    t_start = time.perf_counter()
    for wkey in workloads:
        sys.path.insert(0, str(HERE))
        # the name without importing numba here
        results[(wkey, "name")] = {"matmul128": "tiled matmul 128x128 (16x16 tiles)",
                                   "vadd16": "vector add 2^16", "vadd20": "vector add 2^20",
                                   "reduce16": "warp-shuffle reduction 2^16"}.get(wkey, wkey)
        if not args.no_stock:
            print(f"[stock] {wkey} ...", file=sys.stderr, flush=True)
            cap = min(args.stock_timeout, STOCK_CAPS.get(wkey, args.stock_timeout))
            results[(wkey, "stock")] = run_cell("stock", wkey, cap)
            print(f"        {_fmt_time(results[(wkey, 'stock')])}", file=sys.stderr, flush=True)
        for k in configs:
            ex, ch = k.split("/")
            print(f"[{k}] {wkey} ...", file=sys.stderr, flush=True)
            results[(wkey, k)] = run_cell("sim", wkey, args.timeout, ex, ch)
            print(f"        {_fmt_time(results[(wkey, k)])}", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t_start
    text = markdown(results, machine(), configs, workloads, (load0, os.getloadavg()), elapsed)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({f"{w}|{k}": v for (w, k), v in results.items()},
                                              indent=1))
    if not args.no_write:
        write_section(Path(args.output), text, BEGIN, END)  # (the other benchmarks' sections stay)
        print(f"written to {args.output}", file=sys.stderr)
    bad = [c for c in results.values() if isinstance(c, dict) and c.get("status") == "wrong"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
