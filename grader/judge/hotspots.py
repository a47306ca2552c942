"""Where a missed performance criterion is missed: the source lines behind it, from the per-line
counts of the simulator's launches (grader.sim.counters.lines), and one warp's request of the worst
line for the feedback's picture."""

from __future__ import annotations

from typing import Iterable

# One warp's request of the line a missed memory criterion is about (lanes, byte addresses, item
# size: grader.sim.counters.lines), for the feedback's lanes-to-sectors or lanes-to-banks picture.
_last_request: dict | None = None


def keep_request(request: dict) -> None:
    global _last_request
    _last_request = request


def take_request() -> dict | None:
    global _last_request
    request, _last_request = _last_request, None
    return request


# Which per-line figure explains a missed criterion: coalescing -> global sectors per request,
# bank conflicts -> shared wavefronts per request.
EXPLAINED_BY = {
    "sectors_per_request": "global", "global_load_sectors": "global", "global_store_sectors": "global",
    "wavefronts_per_shared_request": "shared", "bank_conflict_wavefronts": "shared", "atomics": "atomic",
    "global_loads": "global loads", "global_stores": "global stores",
}
_IDEAL = {"global": "4 for a warp {accessing} consecutive float32", "shared": "1 without bank conflicts"}
_ACCESSING = {"load": "reading", "store": "writing"}  # a line's kind, as the ideal says it
_IDEAL_COST = {"global": 4.0, "shared": 1.0}


def hotspots(launches: list[dict], counters: Iterable[str], reference: list[dict] | None = None
             ) -> list[tuple[str, int, str, str]]:
    """The source lines behind the missed `counters`, as (what, line, kind, the sentence): per memory
    space, the line with the costliest requests ('uncoalesced access at line 47 of kernel k (load):
    32.0 sectors per request (4 for ...)') first, then the worst of the other kind (a conflicted
    load beside the worse store) when it costs more than ideal; the lines that load or store most;
    the line with most atomics. The first space's worst request is kept for the feedback's picture.
    A line is named only when its requests cost more than ideal: when none does but the global
    average is missed, the cause is extra accesses, each coalesced (`_extra_accesses`, against the
    `reference`'s launches), and the note says that instead (space "global extra")."""
    counters = list(counters)
    notes = []
    for space in dict.fromkeys(EXPLAINED_BY[c] for c in counters if EXPLAINED_BY.get(c) in _IDEAL):
        found = _costliest(launches, space)
        if not found and space == "global" and reference:
            found = _extra_accesses(launches, reference)
        notes += found
    for counter, kind in (("global_loads", "load"), ("global_stores", "store")):
        if counter in counters:
            notes += _busiest(launches, kind, reference)
    if "atomics" in counters:
        notes += _atomics(launches)
    return notes


def _per_line(launches: list[dict], keep, value) -> dict[tuple[int, str], float]:
    """(line, kernel) -> the sum of `value(entry)` over the per-line entries `keep(entry)` takes."""
    totals: dict[tuple[int, str], float] = {}
    for launch in launches:
        for entry in launch.get("lines") or []:
            if keep(entry):
                key = (entry["line"], launch.get("kernel", "?"))
                totals[key] = totals.get(key, 0) + value(entry)
    return totals


def _costliest(launches: list[dict], space: str) -> list[tuple]:
    unit = "sectors" if space == "global" else "wavefronts"
    worst: dict[str, tuple] = {}  # kind -> (cost, line, kind, kernel, sample)
    wide: dict[str, tuple] = {}   # the same, of shared lines of 8-byte words at their ideal (2 passes)
    for launch in launches:
        for entry in launch.get("lines") or []:
            kind = entry.get("kind", "")
            if entry.get("space") == space and kind != "atomic" and entry.get("requests"):
                cost = entry.get(unit, 0) / entry["requests"]
                sample = entry.get("sample")
                found = (cost, entry["line"], kind, launch.get("kernel", "?"), sample)
                # a line at the ideal is no culprit, however it weighs in an average criterion ...
                if cost > _ideal_cost(space, sample) + 1e-9 and (kind not in worst or cost > worst[kind][0]):
                    worst[kind] = found
                # ... but one of 8-byte shared words costs twice float32's, however it is laid out
                elif space == "shared" and cost > 1 + 1e-9 and (kind not in wide or cost > wide[kind][0]):
                    wide[kind] = found
    ranked = sorted(worst.values(), key=lambda w: -w[0])
    what = "uncoalesced access" if space == "global" else "bank-conflicted access"
    notes = []
    for k, (cost, line, kind, kernel, sample) in enumerate(ranked):
        if k == 0 and sample and _last_request is None:  # the criterion the message leads with
            keep_request({**sample, "space": space, "kind": kind, "line": line, "kernel": kernel,
                          "per_request": round(cost, 2)})
        notes.append((space, line, kind, f"{what} at line {line} of kernel {kernel!r} ({kind}): "
                      f"{cost:.1f} {unit} per request ({_ideal_text(space, sample, kind)})"))
    said = False
    for cost, line, kind, kernel, sample in sorted((w for k, w in wide.items() if k not in worst), key=lambda w: -w[0]):
        size = _itemsize(sample)
        why = "the same" if said else (
            f"no bank conflict: a warp's 32 of them are {32 * size} bytes, and a pass serves 128 (32 banks of 4 "
            f"bytes); 32 float32 take 1. Do the shared arrays need {size} bytes an element? "
            f"(cuda.shared.array(shape, float32))")
        notes.append((space, line, kind, f"{size}-byte words in shared memory at line {line} of kernel {kernel!r} "
                      f"({kind}): {cost:.1f} {unit} per request, {why}"))
        said = True
    return notes


def _itemsize(sample) -> int:
    return int((sample or {}).get("itemsize") or 4)


def _ideal_cost(space: str, sample) -> float:
    """The fewest units a full warp's request of the line's element size takes: one 32-byte
    sector per 8 lanes of float32 (4), of float64 (8); in shared memory one wavefront per 128
    bytes (32 float32: 1; 32 float64: 2)."""
    if space == "global":
        return max(1.0, float(_itemsize(sample)))
    return max(_IDEAL_COST[space], 32 * _itemsize(sample) / 128)


def _ideal_text(space: str, sample, kind: str) -> str:
    size, accessing = _itemsize(sample), _ACCESSING.get(kind, "accessing")
    if space == "shared":
        if size <= 4:
            return _IDEAL[space]
        return f"{_ideal_cost(space, sample):g} without bank conflicts for {size}-byte words"
    if size == 4:
        return _IDEAL[space].format(accessing=accessing)
    return f"{max(1, size)} for a warp {accessing} consecutive {size}-byte elements"


def _extra_accesses(launches: list[dict], reference: list[dict]) -> list[tuple]:
    """The global average is missed with no line above the ideal: more accesses than the
    reference's, coalesced ones, raise it (a value kept in global memory, loaded and stored on
    every step, where the reference keeps it in a register). Their kinds per thread against the
    reference's, and the line with most requests of each kind that grew."""
    def most(runs, key):
        return max((int((run.get("counters") or {}).get(key, 0)) for run in runs), default=0)

    grew, parts = [], []
    for kind in ("load", "store"):
        mine, theirs = most(launches, f"max_global_{kind}s_per_thread"), most(reference, f"max_global_{kind}s_per_thread")
        if mine > theirs:
            grew.append(kind)
            parts.append(f"{kind} up to {mine:,} elements each (the reference's {theirs:,})")
    if not grew:
        return []
    lines: dict[tuple[int, str], list[str]] = {}
    for kind in grew:
        per_line = _per_line(launches, lambda e, kind=kind: e.get("space") == "global" and e.get("kind") == kind,
                             lambda e: e.get("requests", 0))
        if per_line:
            lines.setdefault(max(per_line, key=per_line.get), []).append(kind)
    if not lines:
        return []
    (line, kernel), kinds = next(iter(lines.items()))
    at = "; ".join(f"line {ln} of kernel {k!r} ({', '.join(ks)})" for (ln, k), ks in lines.items())
    return [("global extra", line, ", ".join(kinds),
             f"extra global memory accesses, coalesced ones: its threads {' and '.join(parts)}, most at {at}; "
             f"no line is uncoalesced, but each access the reference keeps in a register (or makes once) is "
             f"one more request")]


def busiest_lines(launches: list[dict], space: str, kind: str, top: int = 3) -> list[tuple[int, str, float]]:
    """The `top` lines with most warp requests of `kind` ("load", "store", "atomic": operations) in
    `space`, as (line, kernel, share of them all), the most first."""
    if kind == "atomic":
        per_line = _atomic_lines(launches, space)
    else:
        per_line = _per_line(launches, lambda e: e.get("space") == space and e.get("kind") == kind,
                             lambda e: e.get("requests", 0))
    total = sum(per_line.values()) or 1
    ranked = sorted(per_line.items(), key=lambda item: -item[1])[:top]
    return [(line, kernel, n / total) for (line, kernel), n in ranked if n > 0]


def _atomic_lines(launches: list[dict], space: str) -> dict[tuple[int, str], float]:
    """(line, kernel) -> atomic operations on `space` (the `atomics` counter and criteria: global)."""
    return _per_line(launches, lambda e: e.get("kind") == "atomic" and e.get("space", space) == space,
                     lambda e: int(e.get("atomics", 0)))


def _busiest(launches: list[dict], kind: str, reference: list[dict] | None = None) -> list[tuple]:
    """The lines with most global `kind`s, those of a kernel the `reference` does not launch first:
    its work is the extra (the all-reduce audit: a copy kernel's stores were named after the add's)."""
    top = busiest_lines(launches, "global", kind)
    if not top:
        return []
    theirs = {launch.get("kernel") for launch in reference or []}
    extra = [t for t in top if theirs and t[1] not in theirs]
    top = extra + [t for t in top if t not in extra]
    listed = ", ".join(f"line {line} of kernel {kernel!r} ({share:.0%})" for line, kernel, share in top)
    why = (f"; kernel {extra[0][1]!r} is one the reference does without: are its {kind}s needed?" if extra else "")
    return [(f"global {kind}s", top[0][0], kind, f"global {kind}s by line (share of warp requests): {listed}{why}")]


def _atomics(launches: list[dict]) -> list[tuple]:
    """The line with most global atomics (the `atomics` counter's; shared ones the SM does itself)."""
    per_line = _atomic_lines(launches, "global")
    if not per_line:
        return []
    (line, kernel), n = max(per_line.items(), key=lambda item: item[1])
    return [("atomic", line, "atomic", f"most atomic operations at line {line} of kernel {kernel!r}: {n:g} of "
             f"{sum(per_line.values()):g} (combine within a warp or a block first, then one atomic per warp or block)")]
