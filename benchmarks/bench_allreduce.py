"""The all-reduce reference solutions on the simulator's virtual GPUs: traffic and modelled time.

Runs each stage's reference (solutions/allreduce.py) on 2, 4 and 8 virtual devices, float32, on
the grading tests' sizes, and reports per call: the simulator's wall time, the links used, the
largest link and the largest per-rank receive as multiples of the buffer S (a ring: 2 (N - 1) / N),
messages per link, host waits between copies, and the modelled timeline as on a 64 MiB buffer
(docs/PERF_MODEL.md, "Several GPUs") on each preset: makespan, busbw, copies and adds overlapping.
Writes the table into docs/BENCHMARKS.md between its markers (`--no-write` to only print).

    .venv/bin/python benchmarks/bench_allreduce.py
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_section import write_section  # noqa: E402

BEGIN, END = "<!-- bench_allreduce: begin -->", "<!-- bench_allreduce: end -->"
STAGES = ("allreduce_naive", "allreduce_ring", "allreduce_pipelined")
RANKS = (2, 4, 8)
SIZE = 40009        # float32 elements per rank (the grading tests' largest, not divisible by N)
MODEL_BYTES = 64 << 20
PRESETS = ("H100", "A100", "L4")


def measure() -> list[dict]:
    import allreduce

    import grader.sim as sim
    from grader.backends.ranks import Ranks, devices_for

    sim.tune_process()  # this process is the benchmark's own
    rows = []
    rng = np.random.default_rng(2026)
    with sim.installed(devices=8) as simulator:
        for ranks in RANKS:
            inputs = [(rng.standard_normal(SIZE) + 1).astype(np.float32) for _ in range(ranks)]
            for function in STAGES:
                helper = Ranks(ranks, devices_for(ranks, 8))
                bufs = helper.upload(inputs)
                simulator.streams.take_log()
                started = time.perf_counter()
                with sim.trace() as launches:
                    getattr(allreduce, function)(helper, bufs)
                    helper.synchronize()
                wall = time.perf_counter() - started
                log, _ = simulator.streams.take_log()
                total = sum(x.astype(np.float64) for x in inputs)
                ok = all(np.allclose(b.copy_to_host(), total, rtol=1e-5, atol=1e-4 * ranks) for b in bufs)
                rows.append({"function": function, "ranks": ranks, "ok": ok, "wall_s": wall, "ops": log,
                             "launches": [r.summary() for r in launches]})
    return rows


def summarise(row: dict) -> dict:
    from grader import perf_model
    from grader.perf_model.timeline import schedule

    ranks, nbytes = row["ranks"], SIZE * 4
    links: dict[tuple[int, int], list[int]] = {}
    for op in row["ops"]:
        if op["kind"] == "copy" and -1 not in (op["src"], op["dst"]) and op["src"] != op["dst"]:
            link = links.setdefault((op["src"], op["dst"]), [0, 0])
            link[0] += op["nbytes"]
            link[1] += 1
    received = [sum(v[0] for (s, d), v in links.items() if d == r) for r in range(ranks)]
    out = {"links": len(links), "max_link": max(v[0] for v in links.values()) / nbytes,
           "max_received": max(received) / nbytes, "messages": sorted({v[1] for v in links.values()})}
    for preset in PRESETS:
        t = schedule(row["ops"], row["launches"], perf_model.gpu(preset), scale=MODEL_BYTES / nbytes)
        busbw = MODEL_BYTES / t.makespan_s * 2 * (ranks - 1) / ranks / 1e9 if t.makespan_s else 0.0
        out[preset] = (t.makespan_s * 1e6, busbw, t.overlap_s() * 1e6)
        out["waits"] = t.waits_between_copies
    return out


def table(rows: list[dict]) -> str:
    head = ("| N | reference | right | sim wall (ms) | links | max link / S | max received / S | messages per link "
            "| host waits | " + " | ".join(f"{p}: us, busbw GB/s, overlap us" for p in PRESETS) + " |")
    out = [head, "|" + "---|" * (9 + len(PRESETS))]
    for row in rows:
        s = summarise(row)
        out.append(f"| {row['ranks']} | `{row['function']}` | {'yes' if row['ok'] else 'NO'} | "
                   f"{row['wall_s'] * 1e3:.0f} | {s['links']} | {s['max_link']:.3f} | {s['max_received']:.3f} | "
                   f"{', '.join(map(str, s['messages']))} | {s['waits']} | "
                   + " | ".join(f"{s[p][0]:.0f}, {s[p][1]:.0f}, {s[p][2]:.0f}" for p in PRESETS) + " |")
    return "\n".join(out)


def section(rows: list[dict]) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return "\n".join([
        BEGIN,
        "## All-reduce: traffic and modelled timeline of the reference solutions",
        "",
        f"Generated by `.venv/bin/python benchmarks/bench_allreduce.py` ({when}, commit {commit}); method: "
        f"docs/ALLREDUCE.md and docs/PERF_MODEL.md. float32, n = {SIZE} per rank (S = {SIZE * 4} bytes) on the "
        "simulator's virtual devices (inline, one process); the timeline modelled as on a 64 MiB buffer. A ring "
        "moves 2 (N - 1) / N x S per link and per rank; naive the same total, but N - 1 buffers into rank 0. "
        "Modelled, not measured: no GPU was used (benchmarks/allreduce_gpus.py measures on several GPUs).",
        "",
        table(rows),
        END,
    ])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--output", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    args = ap.parse_args(argv)
    rows = measure()
    text = section(rows)
    print(text)
    if not args.no_write:
        write_section(Path(args.output), text, BEGIN, END)
        print(f"written to {args.output}", file=sys.stderr)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
