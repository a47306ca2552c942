"""`gpugrade check --watch`: grade again on every save of an exercise file, and say only what
changed (a stage that now passes, a new failure, a failure that went away).

Saves are found by polling the modification times (and sizes) of the exercise files once a
second: no dependency, and it works on every file system a course lives on (network mounts and
containers' bind mounts included, where inotify-based watchers miss events). An editor's
save-as-rename or two quick saves are one change once the file has been quiet for `settle`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..report.results import Results
from ..report.table import stage_verdict
from ..report.text import num


def _stamp(paths: list[Path]) -> tuple:
    out = []
    for path in paths:
        try:
            st = path.stat()
            out.append((str(path), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(path), None, None))
    return tuple(out)


def files_of(exercises_dir: Path, exercises: list[str]) -> list[Path]:
    return [exercises_dir / f"{e}{suffix}" for e in exercises for suffix in (".py", ".ipynb")]


def _stages(results: Results) -> dict[tuple[str, int], tuple[float, float, str]]:
    out = {}
    for exercise in results.exercises():
        for stage in sorted({t.stage for t in results.tests if t.exercise == exercise}):
            tests = [t for t in results.tests if t.exercise == exercise and t.stage == stage]
            got, out_of = results.subtotal(exercise, stage)
            out[(exercise, stage)] = (got, out_of, stage_verdict(tests))
    return out


def changes(before: Results | None, after: Results) -> list[str]:
    """What differs, stage by stage: every stage the first time, then only the changed ones; then
    the total."""
    old = _stages(before) if before is not None else {}
    lines = []
    for key, (got, out_of, verdict) in _stages(after).items():
        if key in old and old[key] == (got, out_of, verdict):
            continue
        exercise, stage = key
        was = f" (was {num(old[key][0])}/{num(old[key][1])})" if key in old and old[key][0] != got else ""
        first = verdict.splitlines()[0] if verdict else ""
        lines.append(f"{exercise} stage {stage}: {num(got)}/{num(out_of)}{was}: {first}")
    total = f"{num(after.score)}/{num(after.max_score)}"
    if before is not None and not lines:
        return [f"no change: {total}"]
    was = f" (was {num(before.score)}/{num(before.max_score)})" if before and before.score != after.score else ""
    return [*lines, f"total: {total}{was}"]  # after every grading, not only when nothing changed


def watch(exercises_dir: Path, exercises: list[str], grade: Callable[[], Results],
          show: Callable[[list[str]], None], *, interval: float = 1.0, settle: float = 0.3,
          stop: Callable[[], bool] = lambda: False, sleep: Callable[[float], None] = time.sleep) -> None:
    """Grade now, then again after every change of an exercise file, until `stop()`."""
    paths = files_of(exercises_dir, exercises)
    seen = _stamp(paths)
    before = grade()
    show(changes(None, before))
    while not stop():
        sleep(interval)
        now = _stamp(paths)
        if now == seen:
            continue
        sleep(settle)  # let an editor finish its save (write, rename, chmod)
        seen = _stamp(paths)
        after = grade()
        show(changes(before, after))
        before = after


__all__ = ["changes", "files_of", "watch"]
