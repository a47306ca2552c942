"""The all-reduce reference solutions on the simulator's virtual GPUs: traffic and modelled time.

Runs each stage's reference (solutions/allreduce.py) on 2, 4 and 8 virtual devices, float32, on
the grading tests' sizes, and reports per call: the simulator's wall time, the links used, the
largest link and the largest per-rank receive as multiples of the buffer S (a ring: 2 (N - 1) / N),
messages per link, host waits between copies, and the modelled timeline as on a 64 MiB buffer
(docs/PERF_MODEL.md, "Several GPUs") on each preset: makespan, busbw, copies and adds overlapping.
Then stage 3's variants at N = 4 (1, 2, 4 and 8 slices; one scratch buffer per rank, the known-wrong
submission) modelled as on 64 MiB and on 1 GiB, the size stage 3's timeline is graded at, with the
credit course.toml's threshold gives each there.
Writes the tables into docs/BENCHMARKS.md between their markers (`--no-write` to only print).

    .venv/bin/python benchmarks/bench_allreduce.py
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
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
VARIANT_RANKS = 4
VARIANT_SIZES = (64 << 20, 1 << 30)


def measure() -> list[dict]:
    import allreduce

    import grader.sim as sim

    sim.tune_process()  # this process is the benchmark's own
    rows = []
    rng = np.random.default_rng(2026)
    with sim.installed(devices=8) as simulator:
        for ranks in RANKS:
            inputs = [(rng.standard_normal(SIZE) + 1).astype(np.float32) for _ in range(ranks)]
            for function in STAGES:
                rows.append({"function": function, **_record(simulator, getattr(allreduce, function), inputs)})
    return rows


def _record(simulator, function, inputs: list[np.ndarray]) -> dict:
    """One call on the simulator's virtual devices: right or not, its wall time, stream order and launches."""
    import grader.sim as sim
    from grader.backends.ranks import Ranks, devices_for

    ranks = len(inputs)
    helper = Ranks(ranks, devices_for(ranks, 8))
    bufs = helper.upload(inputs)
    simulator.streams.take_log()
    started = time.perf_counter()
    with sim.trace() as launches:
        function(helper, bufs)
        helper.synchronize()
    wall = time.perf_counter() - started
    log, _ = simulator.streams.take_log()
    total = sum(x.astype(np.float64) for x in inputs)
    ok = all(np.allclose(b.copy_to_host(), total, rtol=1e-5, atol=1e-4 * ranks) for b in bufs)
    return {"ranks": ranks, "ok": ok, "wall_s": wall, "ops": log, "launches": [r.summary() for r in launches]}


def measure_variants(scratch: Path) -> list[dict]:
    """Stage 3 at N = VARIANT_RANKS: the reference with 1, 2, 4 and 8 slices, and the known-wrong
    submission with one scratch buffer per rank (its mutations applied to the reference)."""
    import importlib.util

    import allreduce

    import grader.sim as sim
    from grader.course.tree import Course
    from grader.course.validate import load_known_wrong

    course = Course(ROOT)
    one = next(k for k in load_known_wrong(course) if k.name == "allreduce_pipelined_one_scratch_buffer")
    module = one.materialize(course, scratch) / "allreduce.py"
    spec = importlib.util.spec_from_file_location("allreduce_one_scratch", module)
    one_scratch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(one_scratch)
    rng = np.random.default_rng(2026)
    inputs = [(rng.standard_normal(SIZE) + 1).astype(np.float32) for _ in range(VARIANT_RANKS)]
    rows = []
    with sim.installed(devices=8) as simulator:
        for slices in (1, 2, 4, 8):
            allreduce.SLICES = slices
            name = f"{slices} slice{'s' if slices > 1 else ''}" + (" (the reference)" if slices == 2 else "")
            rows.append({"variant": name, **_record(simulator, allreduce.allreduce_pipelined, inputs)})
        allreduce.SLICES = 2
        rows.append({"variant": "2 slices, one scratch buffer per rank (known-wrong)",
                     **_record(simulator, one_scratch.allreduce_pipelined, inputs)})
    return rows


def variants_table(rows: list[dict]) -> str:
    from grader import perf_model
    from grader.course import manifest
    from grader.judge.collective import size_text
    from grader.perf_model.timeline import schedule

    stage = manifest.find(ROOT).stage("allreduce", 3)
    g = perf_model.gpu(stage.gpu.model_gpu)
    times = [[schedule(r["ops"], r["launches"], g, scale=size / (SIZE * 4)) for size in VARIANT_SIZES] for r in rows]
    reference = times[[r["variant"] for r in rows].index("2 slices (the reference)")]
    head = (f"| stage 3, N = {VARIANT_RANKS}, {g.key} | right | operations issued | "
            + " | ".join(f"{size_text(size)}: us, x the reference, host-bound" for size in VARIANT_SIZES)
            + f" | credit at {size_text(VARIANT_SIZES[-1])} |")
    out = [head, "|" + "---|" * (4 + len(VARIANT_SIZES))]
    for row, timelines in zip(rows, times):
        cells = [f"{t.makespan_s * 1e6:.0f}, {t.makespan_s / ref.makespan_s:.3f}, {'yes' if t.host_bound else 'no'}"
                 for t, ref in zip(timelines, reference)]
        credit = stage.gpu.credit(timelines[-1].makespan_s / reference[-1].makespan_s)
        out.append(f"| {row['variant']} | {'yes' if row['ok'] else 'NO'} | {len(timelines[0].spans)} | "
                   + " | ".join(cells) + f" | {credit:.0%} |")
    return "\n".join(out)




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


def section(rows: list[dict], variants: list[dict]) -> str:
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
        "",
        "Stage 3's variants, modelled on the course's model GPU as on 64 MiB and on 1 GiB (stage 3's timeline "
        "is graded at 1 GiB, where the links are the bound; on 64 MiB one Python thread issuing every copy and "
        "add, `host_issue_us` each, is the bound and fewer pieces win); credit: course.toml's stage-3 threshold "
        "on the 1 GiB ratio:",
        "",
        variants_table(variants),
        END,
    ])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--output", default=str(ROOT / "docs" / "BENCHMARKS.md"))
    args = ap.parse_args(argv)
    rows = measure()
    with tempfile.TemporaryDirectory() as scratch:
        variants = measure_variants(Path(scratch))
    text = section(rows, variants)
    print(text)
    if not args.no_write:
        write_section(Path(args.output), text, BEGIN, END)
        print(f"written to {args.output}", file=sys.stderr)
    return 0 if all(r["ok"] for r in rows + variants) else 1


if __name__ == "__main__":
    sys.exit(main())
