"""The reference solutions' simulator counters, recorded for courses handed out without solutions/.

A student's repository has no solutions/, so performance tests there compare with counters
recorded by `gpugrade release` (tests/exercises/reference_counters.json), keyed by function and
argument shapes. Counters depend on the launch geometry, never on the input values, so one
recording serves every seed. Instructors' grading still runs the real reference solutions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .student import CallResult, Student

RECORD = Path("tests") / "exercises" / "reference_counters.json"


def call_key(function: str, args: tuple) -> str:
    """vector_add_grid_stride(<f4[40967], <f4[40967]): what determines a call's counters."""
    parts = [f"{a.dtype.str}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__ for a in args]
    return f"{function}({', '.join(parts)})"


def _numeric_counters(launch: dict) -> dict:
    counters = launch.get("counters") or {}
    return {k: v for k, v in counters.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class RecordingReference:
    """A live reference whose calls' counters are kept in `record` (key -> launches)."""

    def __init__(self, reference: Student, record: dict):
        self.reference, self.record = reference, record

    def call(self, function: str, *args: Any, timeout: float | None = None) -> CallResult:
        result = self.reference.call(function, *args, timeout=timeout)
        self.record[call_key(function, args)] = [
            {"kernel": launch.get("kernel"), "grid": launch.get("grid"), "block": launch.get("block"),
             "shared_bytes": launch.get("shared_bytes", 0), "counters": _numeric_counters(launch)}
            for launch in result.launches]  # the configuration too: the performance model reads it
        return result


class RecordedReference:
    """Answers a performance test's reference call from the recording."""

    def __init__(self, record: dict, path: Path):
        self.record, self.path = record, path

    def call(self, function: str, *args: Any, timeout: float | None = None) -> CallResult:
        key = call_key(function, args)
        if key not in self.record:
            import pytest

            pytest.skip(f"no recorded reference counters for {key} in {self.path}: run `gpugrade release`")
        return CallResult(None, [], list(self.record[key]))


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def dump(record: dict, path: Path) -> None:
    path.write_text(json.dumps(dict(sorted(record.items())), indent=1, sort_keys=True) + "\n")
