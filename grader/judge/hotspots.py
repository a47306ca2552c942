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
_IDEAL = {"global": "4 for a warp reading consecutive float32", "shared": "1 without bank conflicts"}
_IDEAL_COST = {"global": 4.0, "shared": 1.0}


def hotspots(launches: list[dict], counters: Iterable[str]) -> list[tuple[str, int, str, str]]:
    """The source lines behind the missed `counters`, as (what, line, kind, the sentence): per memory
    space, the line with the costliest requests ('uncoalesced access at line 47 of kernel k (load):
    32.0 sectors per request (4 for ...)') first, then the worst of the other kind (a conflicted
    load beside the worse store) when it costs more than ideal; the lines that load or store most;
    the line with most atomics. The first space's worst request is kept for the feedback's picture."""
    counters = list(counters)
    notes = []
    for space in dict.fromkeys(EXPLAINED_BY[c] for c in counters if EXPLAINED_BY.get(c) in _IDEAL):
        notes += _costliest(launches, space)
    for counter, kind in (("global_loads", "load"), ("global_stores", "store")):
        if counter in counters:
            notes += _busiest(launches, kind)
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
    for launch in launches:
        for entry in launch.get("lines") or []:
            kind = entry.get("kind", "")
            if entry.get("space") == space and kind != "atomic" and entry.get("requests"):
                cost = entry.get(unit, 0) / entry["requests"]
                if kind not in worst or cost > worst[kind][0]:
                    worst[kind] = (cost, entry["line"], kind, launch.get("kernel", "?"), entry.get("sample"))
    ranked = sorted(worst.values(), key=lambda w: -w[0])
    ranked = ranked[:1] + [w for w in ranked[1:] if w[0] > _IDEAL_COST[space]]
    what = "uncoalesced access" if space == "global" else "bank-conflicted access"
    notes = []
    for k, (cost, line, kind, kernel, sample) in enumerate(ranked):
        if k == 0 and sample and _last_request is None:  # the criterion the message leads with
            keep_request({**sample, "space": space, "kind": kind, "line": line, "kernel": kernel,
                          "per_request": round(cost, 2)})
        notes.append((space, line, kind, f"{what} at line {line} of kernel {kernel!r} ({kind}): "
                      f"{cost:.1f} {unit} per request ({_IDEAL[space]})"))
    return notes


def _busiest(launches: list[dict], kind: str) -> list[tuple]:
    per_line = _per_line(launches, lambda e: e.get("space") == "global" and e.get("kind") == kind,
                         lambda e: e.get("requests", 0))
    top = sorted(per_line.items(), key=lambda item: -item[1])[:3]
    if not top:
        return []
    total = sum(per_line.values()) or 1
    listed = ", ".join(f"line {line} of kernel {kernel!r} ({n / total:.0%})" for (line, kernel), n in top)
    return [(f"global {kind}s", top[0][0][0], kind, f"global {kind}s by line (share of warp requests): {listed}")]


def _atomics(launches: list[dict]) -> list[tuple]:
    per_line = _per_line(launches, lambda e: e.get("kind") == "atomic", lambda e: int(e.get("atomics", 0)))
    if not per_line:
        return []
    (line, kernel), n = max(per_line.items(), key=lambda item: item[1])
    return [("atomic", line, "atomic", f"most atomic operations at line {line} of kernel {kernel!r}: {n:g} of "
             f"{sum(per_line.values()):g} (combine within a warp or a block first, then one atomic per warp or block)")]
