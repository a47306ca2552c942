"""Performance verdicts: a student's launches against the reference solution's on the same input.

Two parts per stage (course.toml): the counter criteria (the stage's performance idea: the
counters of every launch of a call are added up, ratios such as sectors per request recomputed
from the sums), and the speed threshold on the time, here the simulator performance model's
(grader.perf_model, as the kernels would run at full load on the course's model GPU). Missed
criteria raise `PerformanceShortfall` (no points); a time between full and zero credit raises
`PartialCredit` with the fraction earned.
"""

from __future__ import annotations

import math
from typing import Iterable

from .. import perf_model
from ..report.text import duration
from ..course.manifest import Criterion, Stage
from .correctness import WrongAnswer
from .grid import largest_in_words, threads
from .hotspots import EXPLAINED_BY, busiest_lines, hotspots

# Counters that are ratios: recomputed from the sums of their parts over all launches.
RATIOS = {
    "sectors_per_request": (("global_load_sectors", "global_store_sectors"),
                            ("global_load_requests", "global_store_requests")),
    "wavefronts_per_shared_request": (("bank_conflict_wavefronts",), ("shared_requests",)),
}
MAXIMA = {"max_global_loads_per_thread", "max_global_stores_per_thread"}


class PerformanceShortfall(WrongAnswer):
    """The output is right but a simulator counter is worse than the stage allows."""


class PartialCredit(PerformanceShortfall):
    """Right, meets the criteria, but slower than full credit allows: `credit` of the points."""

    def __init__(self, message: str, credit: float):
        super().__init__(message)
        self.credit = credit


class NeedsCorrectness(WrongAnswer):
    """A performance test of a stage whose correctness tests did not all pass."""


def totals(launches: Iterable[dict]) -> dict[str, float]:
    """The counters of one call: summed over its launches, maxima kept, ratios recomputed."""
    summed: dict[str, float] = {}
    for launch in launches:
        counters = launch.get("counters") if isinstance(launch, dict) else None
        if not isinstance(counters, dict):
            continue
        for key, value in counters.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if key in MAXIMA:
                summed[key] = max(summed.get(key, 0), value)
            elif key not in RATIOS:
                summed[key] = summed.get(key, 0) + value
    for key, (num, den) in RATIOS.items():
        denominator = sum(summed.get(k, 0) for k in den)
        summed[key] = sum(summed.get(k, 0) for k in num) / denominator if denominator else 0.0
    summed[WARPS] = float(sum(_launched(launch)[1] for launch in launches if isinstance(launch, dict)))
    summed[BLOCKS] = float(sum(_launched(launch)[0] for launch in launches if isinstance(launch, dict)))
    return summed


# (totals of `totals`: what a criterion `per = "warp"` or `per = "block"` divides by)
WARPS, BLOCKS = "warps_launched", "blocks_launched"


def _launched(launch: dict) -> tuple[int, int]:
    """(blocks, warps) a launch ran: its blocks, times the warps of a block (a partial warp is one)."""
    try:
        blocks = math.prod(int(d) for d in launch["grid"])
        per_block = math.prod(int(d) for d in launch["block"])
    except (KeyError, TypeError, ValueError):
        return 0, 0
    return blocks, blocks * -(-per_block // 32)


def _compared(criterion: Criterion, got: dict[str, float], ref: dict[str, float]) -> tuple[float, float]:
    """(the student's value, the reference's) of a criterion's counter: per warp (block) launched,
    with `per = "warp"` ("block")."""
    mine, theirs = float(got.get(criterion.counter, 0.0)), float(ref[criterion.counter])
    per = {"warp": WARPS, "block": BLOCKS}.get(criterion.per or "")
    if per:
        mine, theirs = mine / max(got.get(per, 0.0), 1.0), theirs / max(ref.get(per, 0.0), 1.0)
    return mine, theirs


def _count(value: float) -> str:
    """A counter as a student reads it: a whole count in digits with thousands separators
    (1,179,648, not 1.17965e+06), a ratio to 3 significant digits (4, not 3.99996: sectors per
    request of a call's launches added up)."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3g}" if abs(value) < 1e3 else f"{value:,.0f}"


def shortfall(criterion: Criterion, student: float, reference: float) -> str | None:
    """Why `student` misses the criterion, or None when it meets it."""
    if criterion.max_ratio is not None:
        allowed = criterion.max_ratio * reference + criterion.slack
        if student > allowed + 1e-9:
            return (f"{criterion.label}: {_count(student)} against the reference's {_count(reference)} "
                    f"(at most {_count(allowed)} allowed)")
    else:
        needed = criterion.min_ratio * reference
        if student < needed - 1e-9:
            return (f"{criterion.label}: {_count(student)} against the reference's {_count(reference)} "
                    f"(at least {_count(needed)} needed)")
    return None


# The timing of the performance test that ran last (the judge runs one test at a time): the
# plugin takes it into that test's result, passed or not, for the reports and `gpugrade bench`.
_last_timing: dict | None = None


def keep_timing(timing: dict) -> None:
    """A test's timing (modelled or measured), for its result (what `take_timing` hands on)."""
    global _last_timing
    _last_timing = timing


def take_timing() -> dict | None:
    global _last_timing, _beside
    timing, _last_timing, _beside = _last_timing, None, None
    return timing


# On a GPU machine: the simulator's launches of the test's call (student's, reference's), kept by
# `expect_performance` so that `expect_gpu_speed` reports the model's prediction beside the measurement.
_beside: tuple[list[dict], list[dict]] | None = None


def _comparable(student_launches: list[dict], reference_launches: list[dict]) -> tuple[list[dict], list[dict]]:
    """Both sides' launches as the model compares them:
    - the student's modelled with a fixed grid where the reference's grid is fixed (it reads its
      grid's size: a grid-stride stage, whose tests require a grid that does not depend on n):
      whether the student's kernel names `cuda.gridsize` is its spelling, not the judge's decision
      (a stride from a module constant would otherwise be modelled as filling the GPU); elsewhere,
      a grid-stride kernel whose threads each did one iteration's loads is sized to the data;
    - registers (occupancy) on both sides or on neither: where one side's compile check did not
      report them (no toolchain, a recording without them), neither side's occupancy counts them;
      the counters read from the compiled code (loop instructions: the issue limit; DRAM round
      trips: the latency limit) likewise."""
    if any((launch.get("counters") or {}).get("reads_grid_size") for launch in reference_launches):
        student_launches = [{**launch, "counters": {**(launch.get("counters") or {}), "reads_grid_size": 1}}
                            for launch in student_launches]
    else:
        student_launches = [_sized_to_the_data(launch, reference_launches) for launch in student_launches]
        # a grid that did not grow with the input, on far fewer threads than elements (the calls the
        # judge saw: grader/judge/grid.GridGrowth): its threads loop over the data on a grid that stays
        student_launches = [{**launch, "counters": {**(launch.get("counters") or {}), "reads_grid_size": 1}}
                            if launch.get("grid_fixed") else launch for launch in student_launches]
    both = [*student_launches, *reference_launches]
    if not all(perf_model.registers(launch) for launch in both):
        student_launches, reference_launches = _without_registers(student_launches), _without_registers(reference_launches)
    if not all(all(k in (launch.get("counters") or {}) for k in _FROM_THE_COMPILED_CODE) for launch in both):
        student_launches, reference_launches = _without_compiled(student_launches), _without_compiled(reference_launches)
    return student_launches, reference_launches


def _sized_to_the_data(launch: dict, reference_launches: list[dict]) -> dict:
    """A grid-stride loop (the kernel reads its grid's size) on a grid the host sized to the data,
    in a stage whose reference sizes its grid to the data: each thread loads no more elements than
    the reference's threads do, so one iteration each. Modelled as the reference is, filling the
    GPU at full load, not as a fixed grid whose few blocks would loop (3.75x the reference's time
    for an honest SAXPY written as a grid-stride loop)."""
    counters = launch.get("counters") or {}
    most = max((int((r.get("counters") or {}).get("max_global_loads_per_thread", 0)) for r in reference_launches),
               default=0)
    mine = int(counters.get("max_global_loads_per_thread", most + 1))
    if not counters.get("reads_grid_size") or not most or mine > most:
        return launch
    return {**launch, "counters": {**counters, "reads_grid_size": 0}}


def _without_registers(launches: list[dict]) -> list[dict]:
    return [{k: v for k, v in launch.items() if k != "compiled"} for launch in launches]


# the compile check's instruction profile
_FROM_THE_COMPILED_CODE = ("loop_warp_instructions", "loop_fp64_instructions", "loop_fp64_conversions",
                           "load_round_trips")


def _percent(x: float) -> str:
    """5%; 0.16% as 0.2%, not 0%."""
    return f"{x:.0%}" if x >= 0.01 or x == 0 else f"{x:.1%}"


def _without_compiled(launches: list[dict]) -> list[dict]:
    return [{**launch, "counters": {k: v for k, v in (launch.get("counters") or {}).items()
                                    if k not in _FROM_THE_COMPILED_CODE}} for launch in launches]


def modelled_speed(stage: Stage, student_launches: list[dict], reference_launches: list[dict],
                   flops: float = 0.0) -> tuple[float, str]:
    """(time ratio student / reference, the sentence saying so) on the stage's model GPU; `flops`:
    the floating-point operations of the call, for GFLOP/s."""
    global _last_timing
    gpu = perf_model.gpu(stage.gpu.model_gpu)
    student_launches, reference_launches = _comparable(student_launches, reference_launches)
    mine = perf_model.call_time(student_launches, gpu, steady=True)
    ref = perf_model.call_time(reference_launches, gpu, steady=True)
    ratio = mine.seconds / ref.seconds if ref.seconds > 0 else 1.0
    _last_timing = {"source": "modelled", "gpu": gpu.key, "seconds": mine.seconds, "bound": mine.bound,
                    "bandwidth_fraction": round(mine.bandwidth_fraction(gpu), 4),
                    "global_bytes": mine.global_bytes, "reference_seconds": ref.seconds,
                    "ratio": round(ratio, 4), "max_time_ratio": stage.gpu.max_time_ratio,
                    "credit": stage.gpu.credit(ratio), "occupancy": round(mine.occupancy, 4),
                    "reference_occupancy": round(ref.occupancy, 4)}
    if mine.registers:
        _last_timing["registers"] = mine.registers
    if mine.occupancy < ref.occupancy:  # (what the feedback says limits it)
        _last_timing.update(occupancy_limit=mine.occupancy_limit, threads_per_block=mine.threads_per_block,
                            max_blocks_per_sm=gpu.max_blocks_per_sm)
    if mine.bound == "memory" and mine.in_flight < STARVED and mine.in_flight < ref.in_flight:  # too few warps
        _last_timing.update(in_flight=round(mine.in_flight, 4), reference_in_flight=round(ref.in_flight, 3))
    fixed = [launch for launch in student_launches if launch.get("grid_fixed")]
    data_sized = not any((launch.get("counters") or {}).get("reads_grid_size") for launch in reference_launches)
    if not data_sized and ratio > 1:  # both grids fixed (a grid-stride stage): a smaller one walks more a thread
        # (the threads of each call's largest launch)
        mine_threads = max(map(threads, student_launches), default=0)
        their_threads = max(map(threads, reference_launches), default=0)
        if mine_threads < 0.9 * their_threads:
            _last_timing.update(grid_threads=mine_threads, reference_grid_threads=their_threads,
                                grid=largest_in_words(student_launches), sm_threads=gpu.max_warps_per_sm * 32)
    if fixed and data_sized and ratio > 1:  # (the grid the judge saw stay as it was while the input grew)
        _last_timing["fixed_grid"] = largest_in_words(fixed)
    if mine.bound == "issue":  # what the student cannot see: the compiler's instructions
        theirs = _loop_instructions(reference_launches)
        if theirs:
            _last_timing["loop_instructions_ratio"] = round(_loop_instructions(student_launches) / theirs, 2)
        lanes, their_lanes = _lanes_per_request(student_launches), _lanes_per_request(reference_launches)
        if lanes and their_lanes and lanes < DIVERGED * their_lanes:
            _last_timing.update(lanes_per_request=round(lanes, 1), reference_lanes_per_request=round(their_lanes, 1))
        fp64 = _fp64_instructions(student_launches)
        if fp64 > 2 * _fp64_instructions(reference_launches):
            _last_timing["fp64_share"] = round(fp64 / max(1.0, _loop_instructions(student_launches)), 3)
            _last_timing["fp64_lanes_per_clock"] = gpu.fp64_lanes_per_clock
    if mine.bound == "latency":  # nor how often the compiled code makes a warp wait on memory
        mine_trips, theirs = _counted(student_launches, "load_round_trips"), _counted(reference_launches, "load_round_trips")
        if theirs and mine_trips > 1.05 * theirs:
            _last_timing["round_trips_ratio"] = round(mine_trips / theirs, 2)
            loads, their_loads = (_counted(launches, "global_load_requests")
                                  for launches in (student_launches, reference_launches))
            if loads and their_loads:  # the waits split into more loads, and more waits a load
                _last_timing["load_requests_ratio"] = round(loads / their_loads, 2)
                if loads > 1.05 * their_loads:  # which lines load, beside how many lines the reference loads at
                    _last_timing["load_lines"] = [[line, kernel, round(share, 3)] for line, kernel, share
                                                  in busiest_lines(student_launches, "global", "load")]
                    _last_timing["reference_load_lines"] = len(busiest_lines(reference_launches, "global", "load",
                                                                             top=99))
    if flops:
        _last_timing["flops"] = float(flops)
    return ratio, timing_sentence(_last_timing)


# a memory-bound kernel with fewer warps in flight than this fraction of those that saturate DRAM is
# told so: its bandwidth is lost to the grid, not to its accesses
STARVED = 0.5

# a kernel whose memory requests have this fraction of the reference's active lanes, or fewer, issues
# for threads that mostly sit out: the feedback says so before the instruction count
DIVERGED = 0.6


def _lanes_per_request(launches: list[dict]) -> float:
    """Active lanes per warp memory request, global and shared together (0 without requests): 32
    where whole warps work, a few where the working threads are spread over many warps."""
    lanes = sum(_counted(launches, c) for c in ("global_loads", "global_stores", "shared_loads", "shared_stores"))
    requests = sum(_counted(launches, c) for c in ("global_load_requests", "global_store_requests", "shared_requests"))
    return lanes / requests if requests else 0.0


def _loop_instructions(launches: list[dict]) -> float:
    return _counted(launches, "loop_warp_instructions")


def _fp64_instructions(launches: list[dict]) -> float:
    return _counted(launches, "loop_fp64_instructions") + _counted(launches, "loop_fp64_conversions")


def _counted(launches: list[dict], counter: str) -> float:
    return sum(float((launch.get("counters") or {}).get(counter, 0)) for launch in launches)


def gflops(t: dict) -> float:
    """A timing's GFLOP/s (0 when its call's operations were not given)."""
    return t.get("flops", 0.0) / t["seconds"] / 1e9 if t.get("seconds") else 0.0


def timing_sentence(t: dict) -> str:
    rate = f"{gflops(t):,.0f} GFLOP/s, " if t.get("flops") else ""
    return (f"{t['source']} on {t['gpu']} at full load: {duration(t['seconds'])} per call, {rate}"
            f"{t['bound']}-bound{_why_bound(t)}, {t['bandwidth_fraction']:.0%} of its memory bandwidth{_occupancy(t)}; the reference: "
            f"{duration(t['reference_seconds'])} ({t['ratio']:.2f}x its time; full credit up to "
            f"{t['max_time_ratio']:g}x)")


def _why_bound(t: dict) -> str:
    if t.get("fp64_share"):  # (what numba makes of a float literal: the student cannot see it)
        return (f" (its loops compute in float64: {t['fp64_share']:.0%} of their instructions are float64 arithmetic "
                f"or conversions, which this GPU's FP64 units do {t['fp64_lanes_per_clock']} lanes a clock an SM, a "
                f"fraction of its float32 rate; a float literal such as 0.0 is a float64 to numba, and so is all it "
                f"touches: start accumulators from float32(0.0) and write constants as float32(...))")
    ratio = t.get("loop_instructions_ratio")
    if ratio and t.get("lanes_per_request"):
        return (f" (its loops issue {ratio:.1f}x the reference's instructions, for threads that mostly sit out: "
                f"{t['lanes_per_request']:g} of a warp's 32 lanes take part in a memory request on average, the "
                f"reference's {t['reference_lanes_per_request']:g}. A warp issues every step any of its threads "
                f"takes: where the threads that work in a step are spread over every warp (each 2s-th thread, say), "
                f"every warp issues it; gathered in the first threads, the other warps skip it)")
    if ratio:
        return (f" (its loops issue {ratio:.1f}x the reference's instructions: the index arithmetic of a loop "
                f"the compiler did not unroll, or more work a step)")
    if t.get("fixed_grid"):
        return (f" (its grid stays {t['fixed_grid']} whatever the input's size (so it did across this exercise's "
                f"calls, while the input grew), and its threads loop over the data: on a GPU-sized problem "
                f"that grid is all the GPU runs (the reference's grid grows with the data and fills it). Size the "
                f"grid to the data: blocks enough for a thread an element of the output)")
    if t.get("in_flight") is not None:
        return (f" (too few warps in flight: its launch keeps {_percent(t['in_flight'])} of the warps that saturate "
                f"this GPU's memory busy (the reference's: {min(t['reference_in_flight'], 1.0):.0%}), too few loads on "
                f"their way at once: blocks enough to fill every SM, at a good occupancy, stream faster)")
    if t.get("grid_threads"):
        return (f" (its grid, {t['grid']}, runs {t['grid_threads']:,} threads where the reference's runs "
                f"{t['reference_grid_threads']:,}: each thread walks "
                f"{t['reference_grid_threads'] / t['grid_threads']:.1f}x as many elements, one memory round trip "
                f"after another. A grid-stride grid should fill every SM: blocks an SM x threads a block = the "
                f"threads an SM holds ({t['sm_threads']:,} on this GPU), so fewer threads a block needs more "
                f"blocks an SM)")
    ratio = t.get("round_trips_ratio")
    if not ratio:
        return ""
    loads = t.get("load_requests_ratio") or 1.0
    more_loads = ("the same elements read by many threads, or each thread walking more than its share of the "
                  "data")
    in_turn = ("a load issued only after a store or another load's value, or fewer loads issued before their "
               "values are used")
    if loads <= 1.05:
        return f" (its warps wait on memory {ratio:.1f}x as often as the reference's for the same loads: {in_turn})"
    more_loads += _load_lines(t)
    if ratio / loads <= 1.05:
        return (f" (its warps wait on memory {ratio:.1f}x as often as the reference's because they load "
                f"{loads:.1f}x as much: {more_loads})")
    return (f" (its warps wait on memory {ratio:.1f}x as often as the reference's: they load {loads:.1f}x as much "
            f"({more_loads}), and wait {ratio / loads:.1f}x as often a load ({in_turn}))")


def _load_lines(t: dict) -> str:
    """"; its global loads by line: line 152 of kernel 'k' (80%), line 148 of kernel 'k' (20%), the
    reference's at 1 line": a load the reference does not make shows as a line of its own."""
    lines = t.get("load_lines")
    if not lines:
        return ""
    listed = ", ".join(f"line {line} of kernel {kernel!r} ({share:.0%})" for line, kernel, share in lines)
    theirs = t.get("reference_load_lines")
    return (f"; its global loads by line (share of warp requests): {listed}"
            + (f", the reference's at {theirs} line{'s' * (theirs != 1)}" if theirs else ""))


def _occupancy(t: dict) -> str:
    """", occupancy 50% (50 registers a thread; the reference's: 100%)" where the student's kernel
    holds fewer warps per SM than the reference's, with what limits it: registers, shared memory, or
    an SM's most blocks where its blocks are small."""
    mine, theirs = t.get("occupancy", 1.0), t.get("reference_occupancy", 1.0)
    if mine >= theirs:
        return ""
    limit = t.get("occupancy_limit")
    if limit == "blocks":
        why = (f"an SM holds at most {t['max_blocks_per_sm']} blocks, and blocks of {t['threads_per_block']} "
               f"threads leave it part empty: use more threads a block; ")
    elif limit == "shared memory":
        why = "the shared memory its blocks take; "
    else:
        why = f"{t['registers']} registers a thread; " if t.get("registers") else ""
    return f", occupancy {mine:.0%} ({why}the reference's: {theirs:.0%})"


def expect_performance(stage: Stage, student_launches: list[dict], reference_launches: list[dict],
                       what: str = "", modelled: bool = True, flops: float = 0.0) -> dict[str, float]:
    """Apply the stage's criteria, then (`modelled`) its speed threshold on the modelled time:
    raise PerformanceShortfall listing every criterion that fails, or PartialCredit when slower
    than full credit allows. On a GPU machine the criteria apply to the simulator's launches of
    the same call (BesideTheSimulator) and the speed is measured instead (`expect_gpu_speed`)."""
    if not student_launches:
        raise PerformanceShortfall("no kernel was launched: the result must be computed on the GPU")
    global _beside
    got, ref = totals(student_launches), totals(reference_launches)
    ratio, speed = modelled_speed(stage, student_launches, reference_launches, flops) if modelled else (1.0, "")
    if not modelled:
        _beside = (student_launches, reference_launches)
    problems, failed = [], []
    for criterion in stage.criteria:
        if criterion.counter not in ref:
            raise RuntimeError(f"the reference's launches have no counter {criterion.counter!r}")
        problem = shortfall(criterion, *_compared(criterion, got, ref))
        if problem:
            problems.append(problem)
            failed.append(criterion.counter)
    if problems:
        head = (f"{what}: " if what else "") + problems[0]  # a counter, named as such: "too slow" is for times
        spots = hotspots(student_launches, failed, reference_launches)
        lead = EXPLAINED_BY.get(failed[0])
        worst = next(((space, line, kind) for space, line, kind, _ in spots if space in (lead, f"{lead} extra")),
                     None)
        if worst:  # the line the first criterion is missed at, in the first line
            head += (f", not from uncoalesced access but from extra global memory accesses, each coalesced, at line "
                     f"{worst[1]} ({worst[2]})"
                     if worst[0].endswith(" extra") else f", worst at line {worst[1]} ({worst[2]})")
        rest = "\n".join(f"  - {p}" for p in problems)
        where = "\n".join(f"  - {note}" for *_, note in spots)
        raise PerformanceShortfall(f"{head}\n\ncriteria missed on the simulator:\n{rest}"
                                   + (f"\n\nwhere:\n{where}" if where else "") + (f"\n\n{speed}" if speed else ""))
    credit = stage.gpu.credit(ratio)
    if credit < 1:
        launches = (f"{len(student_launches)} kernel launches against the reference's {len(reference_launches)}; "
                    if len(student_launches) > len(reference_launches) else "")
        raise PartialCredit(f"slower than the reference{f' ({what})' if what else ''}{_criteria_met(stage)}: "
                            f"{launches}{speed}{heaviest(got, ref, student_launches)}; {credit:.0%} of the points",
                            credit)
    return got


def _criteria_met(stage: Stage) -> str:
    """The stage's criteria, said as met where only the time failed: a test named for one (a
    test '..._is_coalesced' failing for speed) must not read as that criterion missed."""
    labels = [c.label for c in stage.criteria]
    if not labels:
        return ""
    listed = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
    verb, bound = ("is", "bound") if len(labels) == 1 else ("are", "bounds")
    return f", though its {listed} {verb} within the stage's {bound} of the reference's: only its time is not"


# what a kernel does more of than the reference, as the slow verdict says it (counter -> words, and
# the per-line requests that show where: (space, kind), None where no line does)
_WORK = (("global_loads", "load {r} the reference's elements from global memory", ("global", "load")),
         ("global_stores", "store {r} the reference's elements to global memory", ("global", "store")),
         ("global_load_sectors", "read {r} the reference's global memory sectors", ("global", "load")),
         ("global_store_sectors", "write {r} the reference's global memory sectors", ("global", "store")),
         ("atomics", "do {r} the reference's atomics", ("global", "atomic")),
         ("shared_loads", "load {r} the reference's shared memory words", ("shared", "load")),
         ("barriers", "wait at {r} the reference's barriers", None),
         ("threads_launched", "launch {r} the reference's threads", None))
HEAVIER = 1.5  # this much more of some work than the reference is named beside a slow time


def heaviest(got: dict, ref: dict, launches: list[dict] = ()) -> str:
    """Why a kernel whose criteria all hold is still slower: the work it does most more of than
    the reference, and the lines of `launches` that do most of it, with their shares of its warp
    requests, as hotspots names lines ("; its kernels load 1.5x the reference's elements from
    global memory (...), by line: line 19 of kernel 'add_kernel' (67%), line 18 of ... (33%)")."""
    ratios = [(got.get(counter, 0) / ref[counter], counter, words, lines) for counter, words, lines in _WORK
              if ref.get(counter, 0) > 0 and got.get(counter, 0) >= HEAVIER * ref[counter]]
    if not ratios:
        return ""
    ratio, counter, words, lines = max(ratios, key=lambda r: r[0])
    top = busiest_lines(launches, *lines) if lines else []
    at = ", by line: " + ", ".join(f"line {line} of kernel {kernel!r} ({share:.0%})" for line, kernel, share in top) \
        if top else ""
    again = (f": more than any access pattern adds (an uncoalesced float32 load reads at most "
             f"{REREAD:g}x its sectors), so the same elements are read by many threads: do several blocks, or "
             f"every thread, loop over the same elements?") \
        if counter in ("global_load_sectors", "global_loads") and ratio > REREAD else ""
    return (f"; its kernels {words.format(r=f'{ratio:.1f}x')} "
            f"({got[counter]:,.0f} against {ref[counter]:,.0f}){at}{again}")


# 32 sectors for a warp's 32 scattered float32 against 4 coalesced: past this many times the
# reference's global reads, elements are read again, not read badly
REREAD = 8.0


# A kernel cannot move its minimal traffic faster than the GPU's copy engine moves the same bytes
# (measured in the reference's trusted runner); this much above it is a forged or skipped timing.
PLAUSIBLE_OVER_COPY = 1.5


def _plausible(mine, seconds: float, bytes_moved: float, ceiling: float, stock: bool) -> None:
    """The judge's lower bound on the measured times (the GPU's device process measures them; a
    runner's own harness where a test has no timer): kernels were launched in every timed call,
    and no faster than the memory."""
    from ..errors import RunnerError

    if mine.launches_per_call < 1:
        raise WrongAnswer("the timed calls launched no kernel: the result must be computed on the GPU every call")
    if not stock and ceiling and bytes_moved and seconds * ceiling * PLAUSIBLE_OVER_COPY < bytes_moved:
        raise RunnerError(f"the runner's kernel time ({duration(seconds)} for {bytes_moved / 1e6:.3g} MB) is "
                          f"faster than this GPU's copy bandwidth ({ceiling / 1e9:.0f} GB/s) allows: a forged "
                          f"timing, or work skipped in the timed calls")


def library_baseline(reference, library: tuple | None, seconds: float) -> dict | None:
    """The library's time on the same problem (`library`: ("matmul", (M, K, N)) or ("sum", (n,))),
    timed in the trusted reference runner, and the student's time against it; what stood in the
    way when it cannot be timed here. Reported beside the grade, never graded on."""
    from ..backends.library_baselines import LIBRARIES
    from ..errors import Unavailable

    if not library or not hasattr(reference, "library_seconds"):
        return None
    what, shape = library
    entry = {"name": LIBRARIES[what][0], "shape": [int(d) for d in shape]}
    try:
        entry["seconds"] = reference.library_seconds(what, shape)
    except Unavailable as exc:
        entry["unavailable"] = str(exc)
        return entry
    entry["ratio"] = round(seconds / entry["seconds"], 4) if entry["seconds"] > 0 else 0.0
    return entry


def model_beside(stage: Stage, device_name: str) -> dict | None:
    """The performance model's prediction for the measured test, from the simulator's launches of
    the same call (kept by `expect_performance`): the student's time over the reference's on the
    preset of this GPU (the stage's model GPU when none matches), to calibrate the model."""
    global _beside
    if _beside is None:
        return None
    mine, theirs = _beside
    _beside = None
    g = perf_model.preset_for(device_name) or perf_model.gpu(stage.gpu.model_gpu)
    mine, theirs = _comparable(mine, theirs)
    a, b = perf_model.call_time(mine, g, steady=True), perf_model.call_time(theirs, g, steady=True)
    # the modelled bandwidth (steady state: independent of the simulator's smaller problem), for
    # the model's absolute error against the measured GB/s
    return {"gpu": g.key, "seconds": a.seconds, "reference_seconds": b.seconds,
            "ratio": round(a.seconds / b.seconds, 4) if b.seconds > 0 else 1.0, "bound": a.bound,
            "gbs": round(a.global_bytes / a.seconds / 1e9, 1) if a.seconds > 0 else 0.0}


def expect_gpu_speed(student, reference, stage: Stage, function: str, input_sets: list, check,
                     bytes_moved: float = 0.0, returns=None, what: str = "", flops: float = 0.0,
                     library: tuple | None = None) -> None:
    """On a GPU: time the student's `function` and the reference's on the same input sets (each
    in its own runner, the reference's trusted, same GPU, same run), re-check every output the
    timed calls gave (`check(inputs, output)`), and apply the stage's speed threshold to the
    ratio of the medians. `bytes_moved`: the minimal global traffic of one call, for GB/s and the
    fraction of the copy bandwidth (measured by the reference's runner)."""
    global _last_timing
    import pytest

    if not hasattr(reference, "time"):
        pytest.skip("no reference solution here to time against on this GPU (a copy without solutions/)")
    # numba's stock simulator runs kernels in Python: a few calls prove the plumbing
    options = {"min_repeats": 2, "max_repeats": 3, "cap_s": 1.0, "flush_bytes": 0} if student.stock_simulator else {}
    mine = student.time(function, input_sets, check=check, returns=returns, **options)
    base = reference.time(function, input_sets, returns=returns, **options)
    ceiling = reference.copy_bandwidth(int(bytes_moved)) if bytes_moved else 0.0
    seconds, ref_seconds = mine.median_ms / 1e3, base.median_ms / 1e3
    _plausible(mine, seconds, bytes_moved, ceiling, student.stock_simulator)
    ratio = seconds / ref_seconds if ref_seconds > 0 else 1.0
    achieved = bytes_moved / seconds if seconds > 0 else 0.0
    _last_timing = {"source": "measured", "gpu": mine.device, "seconds": seconds, "bound": "measured",
                    "bandwidth_fraction": round(achieved / ceiling, 4) if ceiling else 0.0,
                    "global_bytes": bytes_moved, "reference_seconds": ref_seconds, "ratio": round(ratio, 4),
                    "max_time_ratio": stage.gpu.max_time_ratio, "credit": stage.gpu.credit(ratio),
                    "repeats": len(mine.times_ms), "spread": round(mine.spread, 4), "stopped": mine.stopped,
                    "copy_bandwidth_gbs": round(ceiling / 1e9, 1)}
    if flops:
        _last_timing["flops"] = float(flops)
    lib = library_baseline(reference, library, seconds)
    if lib:
        _last_timing["library"] = lib
    model = model_beside(stage, mine.device)
    if model:
        _last_timing["model"] = model
    sentence = (f"measured on {mine.device}: {duration(seconds)} per call (median of {len(mine.times_ms)}, "
                f"spread {mine.spread:.1%}), {achieved / 1e9:.0f} GB/s"
                + (f", {gflops(_last_timing):,.0f} GFLOP/s" if flops else "")
                + (f", {achieved / ceiling:.0%} of the copy bandwidth" if ceiling else "")
                + f"; the reference: {duration(ref_seconds)} ({ratio:.2f}x its time; full credit up to "
                f"{stage.gpu.max_time_ratio:g}x)"
                + (f"; {lib['name']}: {duration(lib['seconds'])} ({lib['ratio']:.2f}x its time)"
                   if lib and "seconds" in lib else "")
                + (f"; the performance model predicted {model['ratio']:.2f}x on {model['gpu']}" if model else ""))
    if student.stock_simulator:
        pytest.skip(f"numba's stock simulator stands in for the GPU, so times prove nothing ({sentence})")
    credit = stage.gpu.credit(ratio)
    if credit < 1:
        raise PartialCredit(f"slower than the reference{f' ({what})' if what else ''}: {sentence}; "
                            f"{credit:.0%} of the points", credit)
