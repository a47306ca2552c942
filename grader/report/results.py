"""The results model: what a grade is, independent of how it is shown.

`Results` owns the exit code (0 full marks of the tests that could run here, 1 points lost, 2 usage
error, 3 internal error) and round-trips through JSON, which is how the pytest judge hands results
to the CLI: the grade comes from test outcomes and points, never from parsing printed text.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from enum import Enum, IntEnum
from typing import Any

from ..wire.messages import Finding


class ExitCode(IntEnum):
    """What `gpugrade` exits with (documented in the README)."""

    FULL_MARKS = 0
    POINTS_LOST = 1
    USAGE = 2
    INTERNAL = 3


class Status(str, Enum):
    """A test's outcome; its value is what every format writes (Gradescope's `status`)."""

    PASSED = "passed"
    FAILED = "failed"
    # the test cannot run on this machine (multi-GPU timing on one GPU, ...): no points, its
    # maximum kept, so the maximum score is the same on every backend
    NOT_GRADABLE = "not_gradable"

    def __str__(self) -> str:
        return self.value


NOT_RUN = "not run: grading stopped before this test"  # a collected test the judge never reached
CONSEQUENCE = "needs correctness first"  # a performance test not run because its stage failed elsewhere


@dataclass
class TestResult:
    __test__ = False          # not a pytest test class, despite the name
    name: str                 # "<exercise>::<test>", what every format shows
    exercise: str
    stage: int
    max_score: float
    score: float
    status: Status
    output: str = ""          # one-line reason for a failure, then details
    nodeid: str = ""
    visibility: str = "visible"
    tags: list[str] = field(default_factory=list)
    # the simulator finding that failed the test: check, type, message, kernel, file, line, block,
    # thread, array, index (the record the device process sent, checked by grader.wire)
    finding: Finding | None = None
    # a performance test's time (grader.judge.perf: source "modelled" or "measured", gpu, seconds,
    # bound, bandwidth_fraction, reference_seconds, ratio, max_time_ratio, credit)
    timing: dict | None = None
    # a collective's traffic between ranks (grader.judge.collective): ranks, links [[src, dst, bytes,
    # messages]], host_bytes: the feedback's per-link table and ring diagram
    traffic: dict | None = None
    # one warp's request of the line a missed memory criterion is about: space, kind, line, kernel,
    # per_request (sectors or wavefronts), lanes, addresses (bytes, from an aligned base), itemsize
    request: dict | None = None
    # a wrong matrix's wrong elements, coarsened (grader.judge.correctness.wrong_mask): shape,
    # cell (rows, columns of the output per cell), rows (one string per cell row, '#' wrong, '.' right)
    wrong: dict | None = None
    # the student's source around the finding's line: [first_line_number, [text, ...]] (a few lines
    # each side, each capped; grader.judge.plugin reads it from the workspace), for the HTML feedback
    source: list | None = None

    @property
    def failed_itself(self) -> bool:
        """Failed for a reason of its own, not a performance test gated by its stage's failures
        (`CONSEQUENCE`): what every report and the hints count as the stage's failures."""
        return self.status == Status.FAILED and not self.output.startswith(CONSEQUENCE)


@dataclass
class Results:
    submission: str
    backend: str
    tests: list[TestResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # grader-side failures: never the student's fault
    execution_time: float = 0.0
    seed: str = ""
    backend_note: str = ""  # what stood in for the backend, when something did
    sandbox: str = ""  # how the student's code was confined (grader.sandbox: process, docker, uid, none)
    # which file was graded, where the submission held both an exercise's .py and .ipynb
    # (grader.course.choice): for the student, as the feedback's first lines
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tests), 6)

    @property
    def max_score(self) -> float:
        return round(sum(t.max_score for t in self.tests), 6)

    @property
    def exit_code(self) -> ExitCode:
        """FULL_MARKS when every test that could run here earned its points: a test not gradable on
        this machine (multi-GPU timing on one GPU) keeps its points in the maximum, unearned, but
        is not the submission's loss (the reference solutions exit 0 on any machine)."""
        if self.errors:
            return ExitCode.INTERNAL
        graded = [t for t in self.tests if t.status != Status.NOT_GRADABLE]
        lost = sum(t.max_score - t.score for t in graded)
        return ExitCode.FULL_MARKS if lost <= 1e-9 else ExitCode.POINTS_LOST

    def exercises(self) -> list[str]:
        return list(dict.fromkeys(t.exercise for t in self.tests))

    def subtotal(self, exercise: str, stage: int | None = None) -> tuple[float, float]:
        chosen = [t for t in self.tests if t.exercise == exercise and (stage is None or t.stage == stage)]
        return round(sum(t.score for t in chosen), 6), round(sum(t.max_score for t in chosen), 6)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "score": self.score, "max_score": self.max_score}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Results":
        data = _printable(data)
        tests = [TestResult(**{**t, "status": Status(t["status"]),
                               "finding": Finding.parse(t["finding"]) if t.get("finding") else None})
                 for t in data.get("tests", [])]
        return cls(submission=data["submission"], backend=data["backend"], tests=tests,
                   errors=list(data.get("errors", [])), execution_time=float(data.get("execution_time", 0.0)),
                   seed=str(data.get("seed", "")), backend_note=str(data.get("backend_note", "")),
                   sandbox=str(data.get("sandbox", "")),
                   notes=[str(n) for n in data.get("notes", [])])

    def dump(self, path: str) -> None:
        """Written whole or not at all (the judge rewrites it after every test, and may be killed
        at the submission's time limit while it does): a temporary file beside it, then renamed."""
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "Results":
        with open(path) as f:
            return cls.from_dict(json.load(f))


# What no report may carry as it is: control characters but newline and tab (escape sequences on
# a terminal, invalid in XML), lone surrogates (unencodable: every file write fails)
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _printable(value: Any) -> Any:
    r"""`value` (a results file's JSON) with every string's unprintable characters as escapes
    (`\x1b`, `\ud800`): a student's exception message reaches the results as any text JSON holds."""
    if isinstance(value, str):
        return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), value)
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    return value
