"""Progressive hints for `gpugrade check --hints`: the next unseen hint of the first failing stage.

Hints are course data (course.toml, three per stage, from gentle to explicit). Which ones a student
has already seen is remembered in a small JSON file in their course folder
(`.gpugrade/hints.json`), so each `--hints` run shows one more; `--hints all` shows every hint of
the stage at once. A missing or damaged file just means no hint has been seen yet.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .manifest import Manifest, Stage
from ..report.results import Results, Status

STATE_FILE = Path(".gpugrade") / "hints.json"


@dataclass
class HintState:
    """How many hints of each stage ("exercise:stage") the student has seen."""
    path: Path
    seen: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, course_root: str | os.PathLike) -> "HintState":
        path = Path(course_root) / STATE_FILE
        try:
            data = json.loads(path.read_text())
            seen = {str(k): int(v) for k, v in data.get("seen", {}).items() if int(v) >= 0}
        except (OSError, ValueError, TypeError, AttributeError):
            seen = {}
        return cls(path, seen)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"seen": self.seen}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def first_failing_stage(results: Results, manifest: Manifest) -> Stage | None:
    """The earliest stage (exercise order of the results, then stage number) with a failed test."""
    for exercise in results.exercises():
        failed = sorted({t.stage for t in results.tests if t.exercise == exercise and t.status == Status.FAILED})
        if failed and exercise in manifest.exercises:
            return manifest.stage(exercise, failed[0])
    return None


def reveal(stage: Stage, state: HintState, everything: bool = False) -> list[tuple[int, str]]:
    """Hints to show now as (number, text): the next unseen one (the last one again once all are
    seen), or all of them; updates `state` (the caller saves it)."""
    total = len(stage.hints)
    seen = min(state.seen.get(stage.key, 0), total)
    upto = total if everything else min(seen + 1, total)
    state.seen[stage.key] = max(seen, upto)
    start = 0 if everything else upto - 1
    return [(n + 1, stage.hints[n]) for n in range(start, upto)]


def render(stage: Stage, shown: list[tuple[int, str]]) -> str:
    total = len(stage.hints)
    lines = [f"Hints for {stage.exercise} stage {stage.number} ({stage.title}):"]
    lines += [f"  hint {n}/{total}: {text}" for n, text in shown]
    if shown and shown[-1][0] < total:
        lines.append("  (run again with --hints for the next one)")
    return "\n".join(lines)
