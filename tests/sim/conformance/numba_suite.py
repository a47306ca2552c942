"""Run numba-cuda's own test modules (shipped in its wheel: `cudapy/` and the documentation
examples, `doc_examples/`) on grader.sim, and on numba-cuda's
stock simulator for comparison, counting one outcome per test method.

    .venv/bin/python tests/sim/conformance/numba_suite.py                 # the timed set, executor auto
    .venv/bin/python tests/sim/conformance/numba_suite.py --full --thread --stock --write
        # everything, both executors and the stock simulator; rewrites expected.json and
        # docs/CONFORMANCE.md (several minutes)

Each run is `python -m pytest -p sim_plugin <modules>` in a subprocess (see sim_plugin.py), with
the modules split over `--jobs` processes.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
EXPECTED = HERE / "expected.json"
DOC = ROOT / "docs" / "CONFORMANCE.md"

MODULES = ("test_warp_ops", "test_sync", "test_atomics", "test_sm", "test_localmem",
           "test_reduction", "test_array_args", "test_intrinsics", "test_laplace",
           "test_montecarlo", "test_idiv", "test_multigpu", "test_random", "test_globals",
           "test_constmem", "test_ufuncs")
# numba-cuda's documentation examples (`tests/doc_examples/`), named with their folder
DOC_MODULES = tuple(f"doc_examples/{m}" for m in (
    "test_cg", "test_cpointer", "test_cpu_gpu_compat", "test_ffi", "test_globals",
    "test_laplace", "test_matmul", "test_montecarlo", "test_random", "test_reduction",
    "test_sessionize", "test_ufunc", "test_vecadd"))
ALL_MODULES = MODULES + DOC_MODULES
# measured by the project with numba-cuda 0.30.4 on the stock simulator (shared/REFERENCE.md)
STOCK_REFERENCE = {"test_warp_ops": 0, "test_localmem": 0, "test_multigpu": 0, "test_sync": 16,
                   "test_intrinsics": 59, "test_atomics": 128, "test_sm": 17,
                   "test_reduction": 7, "test_array_args": 11, "test_laplace": 1,
                   "test_montecarlo": 1, "test_idiv": 2}
# never run on grader.sim: 5.7e9 threads (see reasons.py)
ALWAYS_DESELECT = ("test_intrinsics.py::TestCudaIntrinsic::test_issue_9229",)
# left out of the timed set (tests/sim/test_conformance.py); `--full` runs them
SLOW_MODULES = ("test_laplace", "doc_examples/test_laplace", "doc_examples/test_random")
SLOW_TESTS = ("test_reduction.py::TestReduction::test_sum_reduce",)
# test_atomics alone takes about as long as all the others together; the laplace modules (full
# runs only) take minutes (the documentation's: 10,000 grid syncs, per-thread executor), the
# documentation's random example two (2M threads drawing 453M numbers)
GROUPS = (("doc_examples/test_laplace",), ("test_laplace",), ("test_atomics",))
# a test running longer than this fails (pytest-timeout), the others go on
TEST_TIMEOUT = 600


def tests_dir() -> Path | None:
    """numba-cuda's `numba/cuda/tests` (pytest's rootdir: node ids under `cudapy/` are
    recorded without that folder, `doc_examples/` ones with theirs)."""
    spec = importlib.util.find_spec("numba_cuda")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "numba" / "cuda" / "tests"
    return path if (path / "cudapy").is_dir() else None


def cudapy_dir() -> Path | None:
    tests = tests_dir()
    return None if tests is None else tests / "cudapy"


def _path_id(nodeid: str) -> str:
    """A recorded node id as pytest names it from `tests_dir()`."""
    return nodeid if nodeid.startswith("doc_examples/") else f"cudapy/{nodeid}"


def _recorded_id(nodeid: str) -> str:
    return nodeid.removeprefix("cudapy/")


def _split(modules: list[str], jobs: int) -> list[list[str]]:
    if jobs <= 1:
        return [modules]
    groups = [[m for m in g if m in modules] for g in GROUPS]
    rest = [m for m in modules if not any(m in g for g in GROUPS)]
    groups = [g for g in groups if g] + ([rest] if rest else [])
    while len(groups) > jobs:
        groups[-2:] = [groups[-2] + groups[-1]]
    return groups


def run(modules, executor: str = "auto", stock: bool = False, deselect=(),
        timeout: float = 600.0, jobs: int = 2) -> tuple[dict, float]:
    """{nodeid: {"outcome", "message"}} for the modules, and the wall time. A group of modules
    that times out or crashes gets one "<module>" entry with outcome "error"."""
    tests = tests_dir()
    if tests is None:
        raise RuntimeError("numba-cuda's test suite is not installed")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.pop("GRADER_CONFORMANCE_STOCK", None)
    if stock:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
        env["GRADER_CONFORMANCE_STOCK"] = "1"
    else:
        env["GRADER_SIM_EXECUTOR"] = executor
    timeout_opt = [f"--timeout={TEST_TIMEOUT}"] if importlib.util.find_spec("pytest_timeout") \
        else []
    procs = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for k, group in enumerate(_split(list(modules), jobs)):
            out = Path(tmp) / f"outcomes{k}.json"
            cmd = [sys.executable, "-m", "pytest", "-p", "sim_plugin", "-p", "no:cacheprovider",
                   "-o", "addopts=", "--rootdir", str(tests), "--import-mode=importlib", "-q",
                   "--tb=no", "--no-header", "-W", "ignore", *timeout_opt,
                   *[str(tests / f"{_path_id(m)}.py") for m in group],
                   *[a for d in deselect for a in ("--deselect", _path_id(d))]]
            log = open(Path(tmp) / f"log{k}.txt", "w")
            p = subprocess.Popen(cmd, env={**env, "GRADER_CONFORMANCE_JSON": str(out)},
                                 cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
            procs.append((group, p, out, log))
        results: dict = {}
        for group, p, out, log in procs:
            left = max(1.0, timeout - (time.perf_counter() - start))
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
            if out.exists():
                results.update((_recorded_id(n), e) for n, e in json.loads(out.read_text()).items())
            else:
                tail = Path(log.name).read_text().strip().splitlines()[-3:]
                why = "timed out" if p.returncode in (-9, 137) else " | ".join(tail)
                for m in group:
                    results[f"{m}.py"] = {"outcome": "error", "message": why[:300]}
    return results, time.perf_counter() - start


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].removesuffix(".py")


def summarise(outcomes: dict) -> dict[str, collections.Counter]:
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for nodeid, entry in outcomes.items():
        out[module_of(nodeid)][entry["outcome"]] += 1
    return out


def fast_modules() -> list[str]:
    return [m for m in ALL_MODULES if m not in SLOW_MODULES]


def fast_deselect() -> tuple[str, ...]:
    return ALWAYS_DESELECT + SLOW_TESTS


# ------------------------------------------------------------------ the recorded numbers
def write(runs: dict, times: dict) -> None:
    import numpy
    from importlib.metadata import version

    from reasons import REPRODUCERS, classify

    auto = runs["auto"]
    fast = set(fast_deselect())
    modules = {}
    for m in ALL_MODULES:
        entry = {"stock_reference": STOCK_REFERENCE.get(m)}
        for key, outcomes in runs.items():
            c = summarise(outcomes).get(m, collections.Counter())
            entry[key] = dict(sorted(c.items()))
        # the floor the timed test asserts: passes among the tests it runs
        entry["fast_passed_min"] = sum(
            1 for n, e in auto.items() if module_of(n) == m and e["outcome"] == "passed"
            and n not in fast and m not in SLOW_MODULES)
        modules[m] = entry
    expected = {
        "generated": datetime.date.today().isoformat(),
        "numba_cuda": version("numba-cuda"),
        "modules": modules,
        "not_passing": {
            n: {"auto": auto.get(n, {}).get("outcome", "not run"),
                **{k: runs[k].get(n, {}).get("outcome", "not run") for k in runs if k != "auto"},
                "category": (classify(n) or ("unclassified", ""))[0]}
            for n in sorted(set().union(*runs.values()))
            if any(r.get(n, {}).get("outcome", "passed") != "passed"
                   for k, r in runs.items() if k != "stock")
        },
    }
    EXPECTED.write_text(json.dumps(expected, indent=1) + "\n")

    has = [k for k in ("auto", "thread", "stock") if k in runs]
    title = {"auto": "grader.sim, executor auto (SIMT)", "thread": "grader.sim, per-thread",
             "stock": "stock simulator (measured here)"}
    lines = ["| module | " + " | ".join(title[k] for k in has) +
             " | stock (REFERENCE.md) | timed set: floor |",
             "|---" * (len(has) + 3) + "|"]

    def cell(c: dict) -> str:
        if not c:
            return "not run"
        parts = [f"{c.get('passed', 0)} passed"]
        for k in ("failed", "skipped", "xfailed", "error"):
            if c.get(k):
                parts.append(f"{c[k]} {k}")
        return ", ".join(parts)

    totals = collections.Counter()
    docs = collections.Counter()  # the documentation examples alone
    for m, e in modules.items():
        ref = "-" if e["stock_reference"] is None else e["stock_reference"]
        lines.append(f"| {m} | " + " | ".join(cell(e.get(k, {})) for k in has) +
                     f" | {ref} | "
                     f"{e['fast_passed_min'] if m not in SLOW_MODULES else '(not run)'} |")
        for k in has:
            totals[k] += e.get(k, {}).get("passed", 0)
            if m in DOC_MODULES:
                docs[k] += e.get(k, {}).get("passed", 0)
        totals["ref"] += e["stock_reference"] or 0
        totals["floor"] += e["fast_passed_min"]
        if m in DOC_MODULES:
            docs["floor"] += e["fast_passed_min"]
            docs["tests"] += sum(e.get("auto", {}).values())
    lines.append("| **doc_examples passed** (of " + str(docs["tests"]) + ") | " +
                 " | ".join(f"**{docs[k]}**" for k in has) + f" | - | **{docs['floor']}** |")
    lines.append("| **total passed** | " + " | ".join(f"**{totals[k]}**" for k in has) +
                 f" | **{totals['ref']}** (cudapy) | **{totals['floor']}** |")

    by_cat = collections.defaultdict(list)
    for n, e in expected["not_passing"].items():
        cat, reason = classify(n) or ("unclassified", "")
        if not reason:
            reason = "; ".join(f"{k}: {runs[k].get(n, {}).get('message', '')}" for k in runs
                               if runs[k].get(n, {}).get("outcome", "passed") != "passed")
        states = ", ".join(f"{k} {e[k]}" for k in has if k in e)
        by_cat[cat].append(f"- `{n}` ({states}): {reason}")
    for n in ALWAYS_DESELECT:
        by_cat["size"].append(f"- `{n}` (not run): {(classify(n) or ('', ''))[1]}")
    order = ["bug", "gap", "checker", "compiled code", "foreign code", "size", "unclassified"]
    heads = {"bug": "Simulator bugs (reproducers below)", "gap": "Simulator gaps",
             "checker": "Checker findings (real findings in the test's kernel)",
             "compiled code": "Out of scope: inspects compiled code",
             "foreign code": "Out of scope: CUDA C/C++ device code",
             "size": "Out of scope: GPU-sized problems", "unclassified": "Unclassified"}
    listing = []
    for cat in order:
        if by_cat.get(cat):
            listing += [f"### {heads[cat]}", "", *by_cat[cat], ""]
    compare = []
    if "stock" in runs:
        stock = runs["stock"]
        gained = sum(1 for n, e in auto.items() if e["outcome"] == "passed"
                     and stock.get(n, {}).get("outcome") != "passed")
        lost = collections.Counter((classify(n) or ("unclassified", ""))[0]
                                   for n, e in stock.items() if e["outcome"] == "passed"
                                   and auto.get(n, {}).get("outcome") != "passed")
        compare = [
            "## Against the stock simulator",
            "",
            f"Executor auto passes {totals['auto']} tests, the stock simulator {totals['stock']}. "
            f"{gained} tests pass here and not on stock (skipped there: warp operations, local "
            f"memory, multi-GPU, typing, and every documentation example: \"cudasim doesn't "
            f"support cuda import at non-top-level\"). {sum(lost.values())} pass on stock and not here: " +
            ", ".join(f"{k} {c}" for k, c in lost.most_common()) + " (see below). Some stock "
            "passes are free: under NUMBA_ENABLE_CUDASIM the tests return before their "
            "compiled-code assertions (`if config.ENABLE_CUDASIM: return`) and the stock "
            "simulator runs no checker; grader.sim answers those assertions with code "
            "numba-cuda compiles on the CPU (`inspect_llvm`, `inspect_asm`, `inspect_lto_ptx`).",
            "",
        ]
    v = {p: version(p) for p in ("numba", "numba-cuda", "filecheck")}
    text = "\n".join([
        "# Conformance: numba-cuda's own tests on grader.sim",
        "",
        "Generated by `.venv/bin/python tests/sim/conformance/numba_suite.py --full --thread --stock "
        "--write` (do not edit by hand; the text lives in tests/sim/conformance/numba_suite.py and "
        "reasons.py).",
        "",
        f"- date {expected['generated']}; numba {v['numba']}, numba-cuda {v['numba-cuda']}, "
        f"filecheck {v['filecheck']}, numpy {numpy.__version__}; "
        f"{os.cpu_count()} CPUs",
        "- modules: numba-cuda's `numba/cuda/tests/cudapy/<module>.py` and its documentation "
        "examples `numba/cuda/tests/doc_examples/<module>.py` (named `doc_examples/...`) from its "
        "wheel, run by "
        "pytest in a subprocess with `tests/sim/conformance/sim_plugin.py`, which installs "
        "grader.sim (2 devices, default `Checks()`: every checker on) before the modules are "
        "imported. NUMBA_ENABLE_CUDASIM is unset, so `skip_on_cudasim` does not skip: every "
        "test runs, including those the stock simulator skips.",
        "- one outcome per test method (subtests folded in: a method fails when any subtest "
        "fails). \"stock (measured here)\": the same harness with NUMBA_ENABLE_CUDASIM=1; "
        "\"REFERENCE.md\": the project's earlier measurement.",
        f"- wall time of each run: " + ", ".join(f"{k} {times[k]:.0f} s" for k in has),
        "",
        *lines,
        "",
        "The timed set (`tests/sim/test_conformance.py`, marked slow, executor auto) runs every "
        "module but " + ", ".join(SLOW_MODULES) + " and deselects " +
        ", ".join(f"`{t}`" for t in SLOW_TESTS + ALWAYS_DESELECT) + "; it asserts each module "
        "passes at least its floor above, and that its total beats the stock simulator's "
        "recorded total for the same modules.",
        "",
        "Harness shim: the class fixture `initialize_from_pytest_config` comes from "
        "numba-cuda's repository conftest, which the wheel does not ship (only its FileCheck "
        "tests read it). Nothing else is shimmed: `skip_unless_cc_XX` asks the simulated "
        "`cudadrv.devices.get_context()` like on a GPU.",
        "",
        *compare,
        "## Tests that do not pass",
        "",
        *listing,
        REPRODUCERS,
    ])
    DOC.write_text(text.rstrip() + "\n")


def print_launches(paths) -> None:
    """The launch tallies sim_plugin wrote (GRADER_CONFORMANCE_LAUNCHES), added up."""
    simt = thread = 0
    reasons: collections.Counter = collections.Counter()
    example = {}
    for path in paths:
        t = json.loads(Path(path).read_text())
        simt, thread = simt + t["simt"], thread + t["thread"]
        for reason, count in t["reasons"].items():  # by construct, one place named
            key = re.sub(r" at (\S+:)?(line )?\d+$", "", reason)
            reasons[key] += count
            example.setdefault(key, reason)
    total = simt + thread
    print(f"   launches: {total}, lockstep {simt} ({100 * simt / max(1, total):.1f}%), "
          f"per-thread {thread}", file=sys.stderr)
    for key, count in reasons.most_common():
        print(f"   {count:6d}  {key}  (e.g. {example[key]})", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="also the slow modules and tests")
    ap.add_argument("--thread", action="store_true", help="also run the per-thread executor")
    ap.add_argument("--stock", action="store_true", help="also run the stock simulator")
    ap.add_argument("--executor", default="auto")
    ap.add_argument("--modules", help="comma-separated subset")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--save", help="also write the raw outcomes of every run to this JSON file")
    ap.add_argument("--load", help="take the runs from a --save file instead of running")
    ap.add_argument("--launches", action="store_true",
                    help="print how many launches ran lockstep, and the fallback reasons")
    ap.add_argument("--write", action="store_true",
                    help="rewrite expected.json and docs/CONFORMANCE.md (needs --full)")
    args = ap.parse_args(argv)
    if args.write and not args.full:
        ap.error("--write needs --full")
    modules = args.modules.split(",") if args.modules else (
        list(ALL_MODULES) if args.full else fast_modules())
    deselect = ALWAYS_DESELECT if args.full else fast_deselect()
    runs, times = {}, {}
    todo = [("auto", args.executor, False)]
    if args.thread:
        todo.append(("thread", "thread", False))
    if args.stock:
        todo.append(("stock", "", True))
    if args.load:
        saved = json.loads(Path(args.load).read_text())
        runs, times = saved["runs"], saved["times"]
        todo = []
        for outcomes in runs.values():  # drop what a later deselection leaves out
            for nodeid in deselect:
                outcomes.pop(nodeid, None)
    tally_dir = tempfile.TemporaryDirectory() if args.launches else None
    for key, executor, stock in todo:
        if tally_dir is not None:  # read by sim_plugin in each pytest process (run's env)
            os.environ["GRADER_CONFORMANCE_LAUNCHES"] = os.path.join(tally_dir.name, key)
        mods = modules
        if key == "thread":
            # hours on the per-thread executor; the documentation's laplace runs per thread
            # under auto already (lockstep cannot choose its buffers per lane)
            mods = [m for m in mods if m not in SLOW_MODULES]
        runs[key], times[key] = run(mods, executor, stock, deselect, args.timeout, args.jobs)
        counts = summarise(runs[key])
        print(f"== {key}: {times[key]:.0f} s", file=sys.stderr)
        for m in modules:
            print(f"   {m:18s} {dict(counts.get(m, {}))}", file=sys.stderr)
        print(f"   total passed: {sum(c.get('passed', 0) for c in counts.values())}",
              file=sys.stderr)
        if tally_dir is not None and not stock:
            print_launches(Path(tally_dir.name).glob(f"{key}.*"))
    if args.save:
        Path(args.save).write_text(json.dumps({"runs": runs, "times": times}, indent=1))
    if args.write:
        sys.path.insert(0, str(HERE))
        write(runs, times)
        print(f"written {EXPECTED} and {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
