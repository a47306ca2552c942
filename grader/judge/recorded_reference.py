"""The reference solutions' simulator counters, recorded for courses handed out without solutions/.

A student's repository has no solutions/, so performance tests there compare with counters
recorded by `gpugrade release` (tests/exercises/reference_counters.json), keyed by function and
argument shapes. Counters depend on the launch geometry, never on the input values, so one
recording serves every seed. Instructors' grading still runs the real reference solutions.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

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
        self.record[ranks_key(function, buffers)] = _ranks_entry(result)
        return result


def _ranks_entry(result: CallResult) -> dict:
    """What a collective's recording keeps: its launches and its stream order."""
    proof = result.proof if result.proof is not None else result
    return {"launches": _launches(result.launches),
            "timeline": [_compact(op.as_dict()) for op in proof.device.timeline] if proof.device is not None else []}


def _recorded_call(entry: list) -> CallResult:
    return CallResult(None, [], list(entry))


def _recorded_ranks(key: str, entry: dict) -> CallResult:
    timeline = [wire.StreamOp.parse(dict(zip(_OP_FIELDS, row)), f"{key}.timeline[{i}]")
                for i, row in enumerate(entry["timeline"])]
    report = wire.DeviceReport(0, [], [], [], [], timeline)
    return CallResult(None, [], list(entry["launches"]), report)


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
        return _recorded_call(self.record[key])

    def call_ranks(self, function: str, buffers: list, timeout: float | None = None) -> CallResult:
        key = ranks_key(function, buffers)
        if key not in self.record:
            import pytest

            pytest.skip(f"no recorded reference counters for {key} in {self.path}: run `gpugrade release`")
        return _recorded_ranks(key, self.record[key])


class SharedReference:
    """The live reference, its answers shared by the judges of one run (validate, a batch) through
    `folder`: the first judge to make a call runs it and leaves its record there (one file per call
    key, written whole, then renamed into place); every later judge reads the record and starts no
    reference runner at all. A record serves any seed: counters depend on the launch geometry
    alone. Only on the simulator, whose reference answers are counters: a GPU's reference is
    timed in the same run as the submission. `live()` makes the live reference on a first miss.
    The folder is the judge's (made 0700 by the run): no runner sees it."""

    def __init__(self, folder: Path, live: Callable[[], Any]):
        self.folder, self._make_live, self._live = Path(folder), live, None

    @property
    def live(self):
        if self._live is None:
            self._live = self._make_live()
        return self._live

    def call(self, function: str, *args: Any, timeout: float | None = None) -> CallResult:
        key = call_key(function, args)
        entry = self._read(key)
        if entry is not None:
            return _recorded_call(entry)
        result = self.live.call(function, *args, timeout=timeout)
        self._write(key, _launches(result.launches))
        return result

    def call_ranks(self, function: str, buffers: list, timeout: float | None = None) -> CallResult:
        key = ranks_key(function, buffers)
        entry = self._read(key)
        if entry is not None:
            return _recorded_ranks(key, entry)
        result = self.live.call_ranks(function, buffers, timeout=timeout)
        self._write(key, _ranks_entry(result))
        return result

    def _path(self, key: str) -> Path:
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:40] + ".json")

    def _read(self, key: str):
        """The record of `key`, or None (none yet, or unreadable: the live reference answers)."""
        try:
            doc = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        return doc.get("entry") if isinstance(doc, dict) and doc.get("key") == key else None

    def _write(self, key: str, entry) -> None:
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".part")
            with os.fdopen(fd, "w") as f:
                json.dump({"key": key, "entry": entry}, f)
            os.replace(tmp, self._path(key))
        except OSError:
            pass  # the record is a saving, not a result: the next judge runs the call itself


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def dump(record: dict, path: Path) -> None:
    """One call per line (a collective's stream order is thousands of small records)."""
    lines = [f" {json.dumps(key)}: {json.dumps(value, sort_keys=True, separators=(',', ':'))}"
             for key, value in sorted(record.items())]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
