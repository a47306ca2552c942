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

from .manifest import FAILURE_KINDS, Manifest, Stage
from ..report.results import Results, Status

STATE_FILE = Path(".gpugrade") / "hints.json"


@dataclass
class HintState:
    """Which hints (numbers from 1) of each stage ("exercise:stage") the student has seen."""
    path: Path
    seen: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def load(cls, course_root: str | os.PathLike) -> "HintState":
        path = Path(course_root) / STATE_FILE
        try:
            data = json.loads(path.read_text())
            seen = {}
            for k, v in data.get("seen", {}).items():  # an int: the first v seen (the older file)
                numbers = list(range(1, int(v) + 1)) if isinstance(v, int) else [int(n) for n in v]
                seen[str(k)] = sorted({n for n in numbers if n >= 1})
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


def failure_kind(results: Results, stage: Stage) -> str | None:
    """What the stage's first real failure is about: the simulator finding's checker, else what
    its message says (None: nothing to tell apart)."""
    for t in results.tests:
        if t.exercise != stage.exercise or t.stage != stage.number or not t.failed_itself:
            continue
        if t.finding is not None and t.finding.check in FAILURE_KINDS:
            return t.finding.check
        text = t.output.lower()
        for words, kind in _MESSAGE_KINDS:
            if any(w in text for w in words):
                return kind
        return "wrong_answer"
    return None


_MESSAGE_KINDS = (
    (("not implemented",), "stub"),
    (("stream race",), "streams"),
    (("data race",), "races"),
    (("out-of-bounds", "out of bounds"), "bounds"),
    (("uninitialised",), "uninitialised"),
    # before "uncoalesced": a missed coalescing average with every line at the ideal (judge.hotspots)
    (("extra global memory accesses",), "extra_accesses"),
    (("sectors per", "uncoalesced", "coalescing"), "uncoalesced"),
    # before "bank conflict": a float64 tile's two passes a request, or float64 arithmetic (judge.hotspots, judge.perf)
    (("-byte words in shared memory", "compute in float64"), "float64"),
    (("bank conflict", "wavefronts", "shared memory passes"), "bank_conflicts"),
    (("atomic",), "atomics"),
    (("not a ring", "bytes between ranks", "host traffic", "went between the host"), "traffic"),
    (("slower than", "too slow", "far slower"), "slow"),
    (("would not compile",), "compile"),
)


def reveal(stage: Stage, state: HintState, everything: bool = False, kind: str | None = None
           ) -> list[tuple[int, str]]:
    """Hints to show now as (number, text): the first unseen hint that answers the failure's
    `kind` if one does, else the next unseen one (the last again once all are seen), or all of
    them; updates `state` (the caller saves it)."""
    total = len(stage.hints)
    seen = set(state.seen.get(stage.key, []))
    if everything:
        chosen = list(range(1, total + 1))
    else:
        kinds = stage.hint_kinds or ((),) * total
        unseen = [n for n in range(1, total + 1) if n not in seen]
        matching = [n for n in unseen if kind and kind in kinds[n - 1]]
        chosen = [(matching or unseen or [total])[0]]
    state.seen[stage.key] = sorted(seen | set(chosen))
    return [(n, stage.hints[n - 1]) for n in chosen]


def render(stage: Stage, shown: list[tuple[int, str]], state: HintState | None = None,
           kind: str | None = None) -> str:
    total = len(stage.hints)
    lines = [f"Hints for {stage.exercise} stage {stage.number} ({stage.title}):"]
    kinds = stage.hint_kinds or ((),) * total
    lines += [f"  hint {n}/{total}{' (about your failure: ' + kind + ')' if kind and kind in kinds[n - 1] else ''}: "
              f"{text}" for n, text in shown]
    more = len(state.seen.get(stage.key, [])) < total if state is not None else bool(shown) and shown[-1][0] < total
    if more:
        lines.append("  (run again with --hints for the next one)")
    return "\n".join(lines)
