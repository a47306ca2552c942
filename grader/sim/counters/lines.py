"""Requests and their cost per source line, so a diagnostic can name the line of an
uncoalesced or bank-conflicted access (`Instrument.finish`: "lines"), and show one of its
costliest requests: the lanes of a warp and the byte addresses they asked for (the feedback's
lanes-to-sectors and lanes-to-banks pictures)."""

from __future__ import annotations

import numpy as np

from ..geometry import WARP
from .banks import BANK_SHIFT, BANKS
from .coalescing import SECTOR_SHIFT

# the lanes examined when a sample is taken (the first requests of the access): bounded cost
SAMPLE_LANES = 1024


class LineCounts:
    """Mixin of `memory.Instrument`."""

    def _init_lines(self) -> None:
        # (space, kind, line) -> [requests, sectors (global) or wavefronts (shared)]
        self.by_line: dict[tuple[str, str, int], list[int]] = {}
        # (space, kind, line) -> (units per request of the access sampled, its worst request)
        self.samples: dict[tuple[str, str, int], tuple[float, dict]] = {}
        self.atomics_by_line: dict[tuple[str, int], int] = {}  # (space, line) -> atomic operations
        self.warp_ops_by_line: dict[int, int] = {}  # line -> warp collectives (one a warp taking part)

    def _note_warp_ops(self, line, n: int) -> None:
        if isinstance(line, int) and line > 0:
            self.warp_ops_by_line[line] = self.warp_ops_by_line.get(line, 0) + n

    def _note_atomics(self, space: str, line: int, n: int) -> None:
        key = (space, line)
        self.atomics_by_line[key] = self.atomics_by_line.get(key, 0) + n

    def _note_line(self, space: str, kind: str, line: int, requests: int, units: int,
                   sample=None) -> None:
        """Add an access's requests and units to its line. `sample`: a function giving the
        access's (request number, lane in warp, byte address) vectors and item size; called
        only when this access costs more per request than the line's sample so far."""
        key = (space, kind, line)
        entry = self.by_line.get(key)
        if entry is None:
            self.by_line[key] = [requests, units]
        else:
            entry[0] += requests
            entry[1] += units
        if sample is None or not requests:
            return
        ratio = units / requests
        held = self.samples.get(key)
        if held is None or ratio > held[0]:
            taken = worst_request(space, *sample())
            if taken is not None:
                self.samples[key] = (ratio, taken)

    def _line_report(self) -> list[dict]:
        """The lines in line order: {line, space, kind, requests, sectors | wavefronts,
        sample (when taken): {lanes, addresses, itemsize}}, then the lines of atomic operations:
        {line, space, kind: "atomic", atomics}."""
        report = []
        for key, (r, u) in sorted(self.by_line.items(), key=lambda i: i[0][2]):
            space, kind, line = key
            entry = {"line": line, "space": space, "kind": kind, "requests": r,
                     ("sectors" if space == "global" else "wavefronts"): u}
            if key in self.samples:
                entry["sample"] = self.samples[key][1]
            report.append(entry)
        report += [{"line": line, "space": space, "kind": "atomic", "atomics": n}
                   for (space, line), n in sorted(self.atomics_by_line.items(), key=lambda i: i[0][1])]
        return report


def worst_request(space: str, req, lane, addr, itemsize: int) -> dict | None:
    """The costliest request among the first SAMPLE_LANES lanes of an access: most distinct
    32-byte sectors (global), or most distinct words in one bank (shared). Addresses are made
    relative to an aligned base below them, so the picture does not depend on the allocation."""
    req = np.asarray(req, np.int64).reshape(-1)[:SAMPLE_LANES]
    n = req.shape[0]
    if not n:
        return None
    lane = np.asarray(lane, np.int64).reshape(-1)[:n]
    addr = np.asarray(addr, np.int64).reshape(-1)[:n]
    _, r = np.unique(req, return_inverse=True)
    r = r.reshape(-1)
    if space == "global":  # distinct (request, sector) pairs, as one int64 key each
        keys = np.unique((r << 40) | (addr >> SECTOR_SHIFT))
        cost = np.bincount(keys >> 40)
    else:  # distinct (request, word); then words per (request, bank); the worst bank per request
        words = np.unique((r << 40) | (addr >> BANK_SHIFT))
        per_bank = np.bincount((words >> 40) * BANKS + (words & ((1 << 40) - 1)) % BANKS,
                               minlength=(int(r.max()) + 1) * BANKS)
        cost = per_bank.reshape(-1, BANKS).max(axis=1)
    worst = int(np.argmax(cost))
    pick = np.flatnonzero(r == worst)[:WARP]
    a = addr[pick]
    # relative to an aligned base: a sector (global), a row of the 32 banks (shared: banks kept)
    align = (1 << SECTOR_SHIFT) if space == "global" else BANKS << BANK_SHIFT
    base = int(a.min()) // align * align
    return {"lanes": [int(x) % WARP for x in lane[pick]], "addresses": [int(x) - base for x in a],
            "itemsize": int(itemsize)}

