"""Requests and their cost per source line, so a diagnostic can name the line of an
uncoalesced or bank-conflicted access (`Instrument.finish`: "lines")."""

from __future__ import annotations


class LineCounts:
    """Mixin of `memory.Instrument`."""

    def _init_lines(self) -> None:
        # (space, kind, line) -> [requests, sectors (global) or wavefronts (shared)]
        self.by_line: dict[tuple[str, str, int], list[int]] = {}

    def _note_line(self, space: str, kind: str, line: int, requests: int, units: int) -> None:
        entry = self.by_line.get((space, kind, line))
        if entry is None:
            self.by_line[(space, kind, line)] = [requests, units]
        else:
            entry[0] += requests
            entry[1] += units

    def _line_report(self) -> list[dict]:
        """The lines in line order: {line, space, kind, requests, sectors | wavefronts}."""
        return [{"line": line, "space": space, "kind": kind, "requests": r,
                 ("sectors" if space == "global" else "wavefronts"): u}
                for (space, kind, line), (r, u) in sorted(self.by_line.items(),
                                                          key=lambda i: i[0][2])]
