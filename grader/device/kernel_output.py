"""What a call's kernels print: kept for the student's feedback, bounded.

A student debugs with `print()` in a kernel; on the simulated GPU that output is this process's
stdout, which no one reads. The device keeps it per call, while each launch runs (`capture`), and
sends it with the call's report: the first `MAX_LINES` lines, each cut to `MAX_LINE` characters,
and how many more there were. It is the student's text, shown as such, never grade-deciding.
"""

from __future__ import annotations

import contextlib
import io

from ..wire.messages import PRINTED_LINES as MAX_LINES

MAX_LINE = 200  # (the wire takes a few more: the " ..." of a line cut)


class KernelOutput(io.TextIOBase):
    """A stdout that keeps the first lines written to it and counts the rest."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.more = 0  # lines past MAX_LINES, not kept
        self._partial = ""  # the line being written (print writes its text, then "\n")

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        pieces = (self._partial + str(text)).split("\n")
        self._partial = pieces.pop()[: MAX_LINE + 1]  # (enough to know it was cut)
        for line in pieces:
            self._keep(line)
        return len(text)

    def _keep(self, line: str) -> None:
        if len(self.lines) < MAX_LINES:
            self.lines.append(line if len(line) <= MAX_LINE else line[:MAX_LINE] + " ...")
        else:
            self.more += 1

    @contextlib.contextmanager
    def capture(self):
        """Everything printed within, kept here; a line left unfinished ends with the launch."""
        with contextlib.redirect_stdout(self):
            try:
                yield
            finally:
                if self._partial:
                    self._keep(self._partial)
                    self._partial = ""

    def report(self) -> dict:
        return {"printed": self.lines, "printed_more": self.more} if self.lines else {}
