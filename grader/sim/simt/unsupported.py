"""The one exception of the SIMT executor: a kernel it cannot run in lockstep.

The launcher catches it and falls back to the per-thread executor, recording `reason`.
"""

from __future__ import annotations


class SimtUnsupported(Exception):
    """A feature the lockstep executor does not model; the message names it and its line."""

    def __init__(self, feature: str, line: int | None = None, filename: str | None = None):
        where = ""
        if line is not None:
            where = f" at line {line}" if filename is None else f" at {filename}:{line}"
        super().__init__(f"{feature}{where}")
        self.feature, self.line, self.filename = feature, line, filename

    @property
    def reason(self) -> str:
        return str(self)
