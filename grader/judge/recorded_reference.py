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

from .. import perf_model, wire
from .student import CallResult, Student

RECORD = Path("tests") / "exercises" / "reference_counters.json"


def call_key(function: str, args: tuple) -> str:
    """vector_add_grid_stride(<f4[540679], <f4[540679]): what determines a call's counters."""
    parts = [f"{a.dtype.str}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__ for a in args]
    return f"{function}({', '.join(parts)})"


def ranks_key(function: str, buffers: list) -> str:
    """allreduce_ring(ranks=4, <f4[1003]): what determines a collective's counters and stream order."""
    first = buffers[0]
    return f"{function}(ranks={len(buffers)}, {first.dtype.str}{list(first.shape)})"


def _numeric_counters(launch: dict) -> dict:
    counters = launch.get("counters") or {}
    return {k: v for k, v in counters.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class RecordingReference:
    """A live reference whose calls' counters are kept in `record` (key -> launches)."""

    def __init__(self, reference: Student, record: dict):
        self.reference, self.record = reference, record

    def call(self, function: str, *args: Any, timeout: float | None = None) -> CallResult:
        result = self.reference.call(function, *args, timeout=timeout)
        self.record[call_key(function, args)] = _launches(result.launches)
        return result

    def call_ranks(self, function: str, buffers: list, timeout: float | None = None) -> CallResult:
        result = self.reference.call_ranks(function, buffers, timeout=timeout)
        proof = result.proof if result.proof is not None else result
        self.record[ranks_key(function, buffers)] = {
            "launches": _launches(result.launches),
            "timeline": [_compact(op.as_dict()) for op in proof.device.timeline] if proof.device is not None else []}
        return result


def _launches(launches: list[dict]) -> list[dict]:
    """What the performance model and the criteria read of each launch: configuration and counters."""
    return [{"kernel": launch.get("kernel"), "grid": launch.get("grid"), "block": launch.get("block"),
             "shared_bytes": launch.get("shared_bytes", 0), "counters": _numeric_counters(launch),
             **({"compiled": {"registers": registers}} if (registers := perf_model.registers(launch)) else {})}
            for launch in launches]


# a recorded stream-order operation as a row (the names are feedback, not needed to model it)
_OP_FIELDS = ("index", "kind", "device", "stream", "tick", "after", "nbytes", "src", "dst", "launch")


def _compact(op: dict) -> list:
    return [op.get(name) for name in _OP_FIELDS]


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

    def call_ranks(self, function: str, buffers: list, timeout: float | None = None) -> CallResult:
        key = ranks_key(function, buffers)
        if key not in self.record:
            import pytest

            pytest.skip(f"no recorded reference counters for {key} in {self.path}: run `gpugrade release`")
        entry = self.record[key]
        timeline = [wire.StreamOp.parse(dict(zip(_OP_FIELDS, row)), f"{key}.timeline[{i}]")
                    for i, row in enumerate(entry["timeline"])]
        report = wire.DeviceReport(0, [], [], [], [], timeline)
        return CallResult(None, [], list(entry["launches"]), report)


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def dump(record: dict, path: Path) -> None:
    """One call per line (a collective's stream order is thousands of small records)."""
    lines = [f" {json.dumps(key)}: {json.dumps(value, sort_keys=True, separators=(',', ':'))}"
             for key, value in sorted(record.items())]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
