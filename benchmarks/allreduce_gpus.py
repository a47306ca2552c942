"""Time the all-reduce references on N real GPUs beside NCCL's, the nccl-tests way.

    python benchmarks/allreduce_gpus.py [--sizes 64M,256M] [--ranks 2,4,8] [--json FILE]

Run on a lent GPU machine by `benchmarks/gpu_check.sh`. For each N of --ranks that the machine
has GPUs for and each size S (bytes, float32): solutions/allreduce.py's `allreduce_ring` and
`allreduce_pipelined` with rank r on GPU r (`Ranks(N, range(N), enable_peer_access=True)`), and
NCCL's all-reduce through CuPy (`NcclCommunicator.initAll`, one in-place `allReduce` per rank
between `groupStart()` and `groupEnd()`), in this one process. The method is nccl-tests' (its
doc/PERFORMANCE.md and src/common.cu): the data checked once in an untimed run, then on the same
buffers WARMUP calls and TIMED calls, each under a host timer that stops once every rank is
synchronised; the three are interleaved call by call (so drift hits all alike) and each one's
median is reported: algbw = S / t, busbw = algbw * 2 (N - 1) / N (what each rank's links carry:
comparable across N, and with the hardware's link bandwidth). The timing method, NCCL's set-up and
the arithmetic are grader/backends/collective_timing.py's: the ones the grader uses when it times
a student's all-reduce (`Student.time_ranks`) and NCCL's in the reference runner
(`Student.nccl_allreduce`).

What this calibrates: the stage-3 threshold "busbw >= a ratio of NCCL's busbw in the same run"
(research: /work/shared/MULTIGPU.md 6.2). With fewer than 2 GPUs there is nothing to time: the
script says so, reports the GPUs and NCCL it found, and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the grader's timing method, NCCL's set-up and arithmetic
    sys.path.insert(0, str(ROOT))

from grader.backends.collective_timing import (algbw_gbs, allreduce_call, bus_factor, busbw_gbs,  # noqa: E402,F401
                                               load_nccl, nccl_setup, nccl_version_text, seconds_of)

WARMUP, TIMED = 5, 20
REFERENCES = ("allreduce_ring", "allreduce_pipelined")


# -- the arithmetic (pure: tests/test_bench_allreduce.py) ------------------------------------------
def parse_size(text: str) -> int:
    """Bytes of "64M", "1G", "512K" (powers of 1024, as nccl-tests' -b/-e) or a plain number."""
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    value = int(float(number) * scale)
    if value <= 0:
        raise ValueError(f"size {text!r}: must be positive")
    return value


def size_text(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def rank_counts(wanted: list[int], gpus: int) -> list[int]:
    """The N of --ranks this machine can time: 2 <= N <= its GPUs (one GPU per rank)."""
    return [n for n in wanted if 2 <= n <= gpus]


# -- what the machine has ---------------------------------------------------------------------------
def count_gpus() -> tuple[int, str]:
    """(number of GPUs, their names or why there are none)."""
    try:
        from numba import cuda

        if not cuda.is_available():
            return 0, "numba-cuda finds no CUDA driver or GPU"
        names = []
        for gpu in cuda.gpus:
            with gpu:
                name = cuda.get_current_device().name
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return len(names), ", ".join(names)
    except Exception as exc:  # noqa: BLE001 - the report says what it could not read
        return 0, f"no GPU ({type(exc).__name__}: {exc})"


# -- the contenders: each a set-up returning (call, check) on prepared buffers -------------------------
def inputs(ranks: int, count: int) -> list[np.ndarray]:
    """Rank r's float32 input: small integers, so that every sum is exact."""
    base = np.arange(count, dtype=np.int64) % 251
    return [((base + 17 * r) % 97).astype(np.float32) for r in range(ranks)]


def reference(name: str, ranks: int, count: int):
    sys.path.insert(0, str(ROOT / "solutions"))
    try:
        solution = importlib.import_module("allreduce")
    finally:
        sys.path.pop(0)
    from grader.backends.ranks import Ranks

    function = getattr(solution, name)
    helper = Ranks(ranks, list(range(ranks)), enable_peer_access=True)
    hosts = inputs(ranks, count)
    bufs = helper.upload(hosts)

    call = allreduce_call(function, helper, bufs)

    def check_then_zero() -> bool:
        call()
        want = sum(hosts)
        right = all(np.array_equal(b.copy_to_host(), want) for b in bufs)
        zeros = np.zeros(count, np.float32)
        for rank, b in zip(helper, bufs):  # timed calls add zeros: no overflow, the same work
            with rank:
                b.copy_to_device(zeros)
        return right

    return call, check_then_zero


def nccl_allreduce(cupy, nccl, ranks: int, count: int):
    """NCCL's in-place all-reduce (grader/backends/collective_timing.py's set-up, the one the
    reference runner times) on this script's inputs: (call, check_then_zero)."""
    hosts = inputs(ranks, count)
    call, bufs, _ = nccl_setup(cupy, nccl, hosts)

    def check_then_zero() -> bool:
        call()
        want = sum(hosts)
        right = all(np.array_equal(cupy.asnumpy(b), want) for b in bufs)
        for r, b in enumerate(bufs):
            with cupy.cuda.Device(r):
                b.fill(0)
                cupy.cuda.Device(r).synchronize()
        return right

    return call, check_then_zero


def time_interleaved(calls: dict, warmup: int, timed: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Seconds of each call (host timer; each call synchronises every rank before returning),
    the contenders taking turns, warm-up calls untimed; and the error of each that failed."""
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    errors: dict[str, str] = {}
    for i in range(warmup + timed):
        for name, call in calls.items():
            if name in errors:
                continue
            try:
                took = seconds_of(call)
            except Exception as exc:  # noqa: BLE001 - the others go on
                errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            if i >= warmup:
                seconds[name].append(took)
    return {n: t for n, t in seconds.items() if n not in errors}, errors


def measure(ranks: int, nbytes: int, cupy, nccl, warmup: int, timed: int) -> dict:
    count = nbytes // 4
    setups = {name: (lambda name=name: reference(name, ranks, count)) for name in REFERENCES}
    if nccl is not None:
        setups["nccl"] = lambda: nccl_allreduce(cupy, nccl, ranks, count)
    row: dict = {"ranks": ranks, "bytes": count * 4, "size": size_text(count * 4), "results": {}}
    calls = {}
    for name, setup in setups.items():
        try:
            call, check = setup()
            if not check():
                row["results"][name] = {"error": "wrong sum on some rank (the untimed check)"}
                continue
            calls[name] = call
        except Exception as exc:  # noqa: BLE001 - one contender failing must not hide the others
            row["results"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    seconds, errors = time_interleaved(calls, warmup, timed)
    row["results"].update({name: {"error": error} for name, error in errors.items()})
    for name, times in seconds.items():
        median = statistics.median(times)
        row["results"][name] = {"median_s": median, "min_s": min(times), "times_s": times,
                                "algbw_GBs": algbw_gbs(count * 4, median),
                                "busbw_GBs": busbw_gbs(count * 4, median, ranks)}
    nccl_bus = row["results"].get("nccl", {}).get("busbw_GBs")
    for name in REFERENCES:
        result = row["results"].get(name, {})
        if nccl_bus and "busbw_GBs" in result:
            result["ratio_to_nccl"] = result["busbw_GBs"] / nccl_bus
    return row


def table(rows: list[dict]) -> str:
    names = [*REFERENCES, "nccl"]
    head = "| N | size | " + " | ".join(f"{n} algbw | {n} busbw" for n in names) + \
        " | ring / NCCL | pipelined / NCCL |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = [str(row["ranks"]), row["size"]]
        for name in names:
            result = row["results"].get(name, {})
            if "busbw_GBs" in result:
                cells += [f"{result['algbw_GBs']:.1f} GB/s", f"{result['busbw_GBs']:.1f} GB/s"]
            else:
                cells += [result.get("error", "not run")[:60], ""]
        cells += [f"{row['results'].get(n, {})['ratio_to_nccl']:.2f}" if "ratio_to_nccl" in row["results"].get(n, {})
                  else "" for n in REFERENCES]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64M,256M", help="buffer sizes in bytes (K, M, G: powers of 1024)")
    ap.add_argument("--ranks", default="2,4,8", help="rank counts (one GPU per rank)")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--timed", type=int, default=TIMED)
    args = ap.parse_args(argv)
    sizes = [parse_size(s) // 4 * 4 for s in args.sizes.split(",") if s.strip()]
    wanted = [int(n) for n in args.ranks.split(",") if n.strip()]
    sys.path.insert(0, str(ROOT))

    gpus, names = count_gpus()
    meta = {"gpus": gpus, "gpu_names": names, "warmup": args.warmup, "timed": args.timed,
            "date": time.strftime("%Y-%m-%d %H:%M")}
    print(f"GPUs: {gpus} ({names})")
    rows: list[dict] = []
    counts = rank_counts(wanted, gpus)
    if gpus == 0:
        meta["skipped"] = "no GPU: the multi-GPU all-reduce timing needs 2 or more GPUs"
    else:
        cupy, nccl, facts = load_nccl()
        meta.update(facts)
        print(f"CuPy: {facts['cupy'] or 'absent'}; cupy.cuda.nccl: "
              + (f"available, NCCL {facts['nccl']}" if nccl is not None else f"not available ({facts['why']})"))
        if gpus < 2:
            meta["skipped"] = f"{gpus} GPU: the multi-GPU all-reduce timing needs 2 or more GPUs"
        elif not counts:
            meta["skipped"] = f"none of --ranks {wanted} fits {gpus} GPUs (one GPU per rank)"
        for ranks in counts:
            for nbytes in sizes:
                rows.append(measure(ranks, nbytes, cupy, nccl, args.warmup, args.timed))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "results"}
                                 | {n: {k: v for k, v in r.items() if k != "times_s"}
                                    for n, r in rows[-1]["results"].items()}), flush=True)
    if "skipped" in meta:
        print(f"Nothing timed: {meta['skipped']}.")
    else:
        print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    failed = any("error" in r for row in rows for r in row["results"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
