"""What the student's kernels printed during a test, for that test's feedback.

Every call's device report carries the first lines its kernels printed (grader.device.kernel_output);
`heard` keeps them across the test's calls, the first `PRINTED_LINES` in all, and `take_printed`
gives them once, as a block the plugin appends to the test's message: after the grader's own words,
every line marked as the kernels' (a student's print cannot pass for the grader's verdict). It is
feedback only: nothing of the grade reads it.
"""

from __future__ import annotations

import re

from ..wire import DeviceReport
from ..wire.messages import PRINTED_LINES

MARK = "  kernel> "  # before each printed line

# what any renderer may take for a line break: escaped, so every printed line keeps its mark
_BREAKS = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")

_lines: list[str] = []
_more = 0


def heard(report: DeviceReport) -> None:
    """Keep what a call of the student's printed on the GPU."""
    global _more
    room = PRINTED_LINES - len(_lines)
    _lines.extend(_BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), line)
                  for line in report.printed[:room])
    _more += report.printed_more + max(0, len(report.printed) - room)


def take_printed() -> str:
    """The test's kernel output as a block for its message ("" when nothing was printed); forgets it."""
    global _more
    lines, more = list(_lines), _more
    _lines.clear()
    _more = 0
    if not lines:
        return ""
    return ("what your kernels printed (print() in a kernel; the first lines, not the grader's words):\n"
            + "\n".join(MARK + line for line in lines)
            + (f"\n  ... {more} more line{'s' if more != 1 else ''}" if more else ""))
