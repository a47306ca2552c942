"""The device check's numbers as the section for docs/BENCHMARKS.md ("On a GPU"), from the folder
`benchmarks/gpu_check.sh` filled: the machine, the grade of the reference solutions on the gpu
backend with each performance test's measurement, issue 11's targets checked (harness noise,
fraction of the copy bandwidth, tiled matmul against cuBLAS, the model beside the measurement),
the known-wrong submissions, the kernels timed with CUDA events, the all-reduce.

    python3 benchmarks/gpu_summary.py DIR > DIR/summary.md

Missing pieces (a step that ran out of time) are said, never guessed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _read(folder: Path, name: str) -> str:
    path = folder / name
    return path.read_text(errors="replace") if path.is_file() else ""


def _json(folder: Path, name: str):
    try:
        return json.loads(_read(folder, name))
    except ValueError:
        return None


def _target(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "MISSED")


def perf_rows(grade: dict) -> list[dict]:
    return [t for t in grade.get("tests", []) if isinstance(t.get("timing"), dict)]


def measurement_table(rows: list[dict]) -> list[str]:
    lines = ["| test | status | median | spread | repeats | GB/s | of the bandwidth | vs reference | "
             "library | model beside |", "|---|---|---|---|---|---|---|---|---|---|"]
    for t in rows:
        m = t["timing"]
        secs = m.get("seconds") or 0.0
        gbs = m.get("global_bytes", 0) / secs / 1e9 if secs else 0.0
        lib = m.get("library") or {}
        lib_text = (f"{lib['name']}: {lib['ratio']:.2f}x its time" if "ratio" in lib
                    else (f"{lib.get('name', '')}: {lib['unavailable']}" if "unavailable" in lib else ""))
        model = m.get("model") or {}
        model_text = (f"{model['ratio']:.2f}x on {model['gpu']}"
                      + (f", {model['gbs']:,.0f} GB/s" if model.get("gbs") else "") if model else "")
        of = (f"{m['copy_bandwidth_gbs']:,.0f} GB/s copy" if m.get("copy_bandwidth_gbs")
              else "its memory (modelled)")
        lines.append(f"| {t['name']} | {t['status']} {t['score']:g}/{t['max_score']:g} | {secs * 1e6:.4g} us | "
                     f"{m.get('spread', 0):.1%} | {m.get('repeats', '')} | {gbs:,.0f} | "
                     f"{m.get('bandwidth_fraction', 0):.0%} of {of} | "
                     f"{m.get('ratio', 0):.3f}x | {lib_text} | {model_text} |")
    return lines


def targets(rows: list[dict], noise: dict | None) -> list[str]:
    by = {t["name"]: t["timing"] for t in rows}

    def fractions(exercise: str) -> list[tuple[str, float]]:
        return [(n, m.get("bandwidth_fraction", 0.0)) for n, m in by.items()
                if n.startswith(exercise + "::") and m.get("source") == "measured" and m.get("global_bytes")]

    out = []
    timed = ", ".join(noise.get("tests", {})) if noise else ""
    if noise and noise.get("runs", 0) < 2:
        out.append(f"- harness noise: not measured ({noise.get('runs', 0)} run of `gpugrade bench --reference` "
                   f"within the step's limit; the CV needs 2 or more)")
    elif noise:
        worst = noise.get("worst_cv", 0.0)
        out.append(f"- harness noise: worst coefficient of variation of the median over {noise.get('runs')} runs "
                   f"of `gpugrade bench --reference` ({timed}): {worst:.2%} (target <= 2%: {_target(worst <= 0.02)})")
    else:
        out.append("- harness noise: not measured (the noise step did not finish)")
    for exercise, need in (("vector_add", 0.85), ("reduction", 0.80)):
        got = fractions(exercise)
        if not got:
            out.append(f"- reference {exercise}: no measured bandwidth (target >= {need:.0%} of the copy bandwidth)")
            continue
        best = max(f for _, f in got)
        each = ", ".join(f"{n.split('::')[1]} {f:.0%}" for n, f in got)
        out.append(f"- reference {exercise} of the measured copy bandwidth: {each} (target >= {need:.0%}: "
                   f"{_target(best >= need)})")
    for name, m in by.items():
        lib = m.get("library") or {}
        if name.startswith("matmul::") and "ratio" in lib:
            out.append(f"- {name.split('::')[1]}: {1 / lib['ratio']:.0%} of {lib['name']}'s speed "
                       f"({m['seconds'] * 1e6:.4g} us against {lib['seconds'] * 1e6:.4g} us, {lib['shape']})")
    errors = [(n, m["model"]["ratio"], m["ratio"]) for n, m in by.items() if m.get("model") and m.get("ratio")]
    if errors:
        worst = max(errors, key=lambda e: abs(e[1] / e[2] - 1))
        out.append(f"- the model beside the measurement (student/reference time ratio, the quantity graded): "
                   f"largest error {worst[1] / worst[2] - 1:+.1%} ({worst[0]}: modelled {worst[1]:.3f}x, "
                   f"measured {worst[2]:.3f}x)")
    bandwidth = [(n, m["model"]["gbs"], m["global_bytes"] / m["seconds"] / 1e9) for n, m in by.items()
                 if (m.get("model") or {}).get("bound") in ("memory", "latency") and m["model"].get("gbs")
                 and m.get("global_bytes") and m.get("seconds")]
    if bandwidth:
        worst = max(bandwidth, key=lambda e: abs(e[1] / e[2] - 1))
        out.append(f"- the model's bandwidth against the measured (memory- and latency-bound tests, steady state): largest "
                   f"error {worst[1] / worst[2] - 1:+.1%} ({worst[0]}: modelled {worst[1]:,.0f} GB/s, measured "
                   f"{worst[2]:,.0f} GB/s)")
    return out


def beside_a_copy(bench: dict | None) -> list[str]:
    """The streaming kernels' bandwidth as a fraction of a device-to-device copy timed in the same
    bench_gpu run (same size, same events): the ceiling without the graded tests' size or harness."""
    rows = {r["case"]: r for r in (bench or {}).get("results", []) if r.get("GB/s")}
    copy = rows.get("vector_add.device_to_device_copy")
    if not copy:
        return []
    each = ", ".join(f"{name.split('.', 1)[1]} {r['GB/s'] / copy['GB/s']:.0%}" for name, r in rows.items()
                     if name.split(".")[0] in ("vector_add", "reduction") and name != copy["case"]
                     and not r.get("baseline_of"))
    return [f"- bench_gpu at {copy['size']}, beside a device-to-device copy ({copy['GB/s']:,.0f} GB/s): {each}"]


def stage_speedups(bench: dict | None) -> list[str]:
    """Each stage's reference kernel over the previous stage's, measured with CUDA events."""
    if not bench:
        return ["(bench_gpu did not finish)"]
    ms = {r["case"]: r["median_ms"] for r in bench.get("results", []) if r.get("median_ms")}
    chains = [("vector_add (stage 2: loads issued ahead)", ["vector_add.grid_stride_one_element_a_round_trip",
                                                           "vector_add.add_grid_stride_kernel"]),
              ("matmul", ["matmul.matmul_naive_kernel", "matmul.matmul_tiled_kernel", "matmul.matmul_coarsened_kernel"]),
              ("reduction", ["reduction.reduce_tree_kernel (first pass)", "reduction.reduce_shuffle_kernel",
                             "reduction.reduce_grid_stride_kernel"])]
    lines = []
    for exercise, chain in chains:
        steps = [f"{b.split('.')[1]} {ms[a] / ms[b]:.2f}x over {a.split('.')[1]}"
                 for a, b in zip(chain, chain[1:]) if a in ms and b in ms]
        if steps:
            lines.append(f"- {exercise}: " + "; ".join(steps))
    return lines


def main(argv=None) -> int:
    folder = Path((argv or sys.argv[1:])[0])
    machine = _read(folder, "machine.txt").strip()
    env = next((line for line in _read(folder, "env.txt").splitlines() if line.startswith("grading with")), "")
    grade = _json(folder, "solutions.json") or {}
    noise = _json(folder, "noise.json")
    bench = _json(folder, "bench_gpu.json")
    date = (bench or {}).get("meta", {}).get("date", "")
    rows = perf_rows(grade)
    print(f"## On a GPU ({date or 'date unknown'})\n")
    print(f"Made by `benchmarks/gpu_check.sh` (then `benchmarks/gpu_summary.py`). Machine: {machine or 'unknown'}. "
          f"{env or 'Environment: see env.txt'}.\n")
    if grade:
        print(f"### The reference solutions graded on `--backend {grade.get('backend')}`\n")
        print(f"Score {grade.get('score'):g}/{grade.get('max_score'):g} in {grade.get('execution_time', 0):.0f} s"
              + (f"; {grade['backend_note']}" if grade.get("backend_note") else "") + ".\n")
        print("\n".join(measurement_table(rows)) + "\n")
    else:
        print("The reference solutions' grade is missing (the solutions step did not finish).\n")
    print("### Issue 11's targets\n")
    print("\n".join(targets(rows, noise) + beside_a_copy(bench)) + "\n")
    print("Stage speedups of the reference kernels, measured with CUDA events (bench_gpu):\n")
    print("\n".join(stage_speedups(bench)) + "\n")
    validate = _read(folder, "validate.txt")
    verdict = re.findall(r"^validate: (?:ok|\d+ problem).*$", validate, re.M)
    print("### Known-wrong submissions on the gpu backend (`gpugrade validate`)\n")
    print(f"{verdict[-1] if verdict else 'validate did not finish; the grades that ended before the limit:'}\n")
    # each grade as it ended, and the problems the finished run named
    told = re.findall(r"^validate: .+: .*$", validate, re.M) + re.findall(r"^problem: .*$", validate, re.M)
    if told:
        print("```\n" + "\n".join(told) + "\n```\n")
    if (folder / "bench_gpu.md").is_file():
        print("### Kernels timed with CUDA events (`benchmarks/bench_gpu.py`)\n")
        print(_read(folder, "bench_gpu.md").strip() + "\n")
    allreduce = _read(folder, "allreduce_gpus.txt").strip()
    if allreduce:
        print("### All-reduce (`benchmarks/allreduce_gpus.py`)\n")
        print("```\n" + "\n".join(allreduce.splitlines()[-12:]) + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
