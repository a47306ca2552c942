"""What an assignment of a batch folder is graded on: its exercises and its deadline, chosen by its
first batch, kept by every later one; and which assignment a batch or an export means.

A course releases one exercise per deadline (homework 3 is `matmul` only, with its own folder,
deadline and Gradescope assignment): `gpugrade batch ROSTER --out grades/hw3 matmul` records
`matmul` in the folder's store; a later batch or regrade without exercises grades on it, one naming
others is refused before anything is graded or stored (a folder never mixes a row graded on one
exercise with one graded on four), and grades.csv, the summary and every export show only those
exercises, with their maximum. An assignment stored before selections were recorded was graded on
all the course's exercises: that is its selection.

The deadline likewise: `batch ... --deadline T` records T (or, without one, that the latest
commits are graded), and a later batch or regrade without `--deadline` chooses commits by it. A
regrade that forgot it would grade a late commit in place of the on-time one; one giving another
deadline is refused (a student's extension is a `deadline` column in the roster).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Callable

from ..course import Course
from ..errors import UsageError
from .store import NOT_RECORDED, Store


def graded_on(store: Store, assignment: str, all_exercises: Callable[[], list[str]]) -> list[str] | None:
    """The exercises `assignment` is graded on: recorded, or for an assignment stored before
    selections were recorded, all the course's (`all_exercises()`); None for a new assignment."""
    recorded = store.selection(assignment)
    if recorded is None and assignment in store.assignments():
        return all_exercises()
    return recorded


def for_batch(store: Store, assignment: str, named: list[str], course: Course, folder: Path,
              on_notice: Callable[[str], None] | None = None) -> list[str]:
    """The exercises a batch of `assignment` grades: those `named` (checked against the course; none
    named means all) where the assignment is new, recorded now; else its selection, which `named`
    must match (a usage error otherwise, with nothing stored). A selection nothing was graded on
    yet (a first batch whose fetches all failed, or killed before its first grade) is no folder's
    choice: `named` replaces it, said through `on_notice`."""
    wanted = _in_course_order(course, course.select(named)) if named else None
    recorded = store.selection(assignment)
    if recorded is not None and wanted is not None and set(wanted) != set(recorded) \
            and not store.has_grades(assignment):
        store.replace_selection(assignment, wanted)
        if on_notice is not None:
            on_notice(f"{folder} is graded on {', '.join(wanted)} now, not on {', '.join(recorded)} as its first "
                      f"batch chose: that batch stored no grade")
        recorded = wanted
    if recorded is None and assignment not in store.assignments():
        # the first batch of the assignment records its selection (or, where another batch recorded
        # one an instant before, gets that one, checked below as any recorded selection is)
        recorded = store.record_selection(assignment, wanted or course.exercises())
    selection = recorded if recorded is not None else course.exercises()  # stored before selections were
    if wanted is not None and set(wanted) != set(selection):
        raise UsageError(
            f"{folder} holds assignment {assignment!r} graded on {', '.join(selection)}, not on {', '.join(wanted)}: "
            f"a batch folder keeps the exercises of its first batch (name none to grade on those); grade other "
            f"exercises in another folder (--out ANOTHER_FOLDER {' '.join(wanted)})")
    gone = [e for e in selection if e not in course.exercises()]
    if gone:
        raise UsageError(f"{folder} holds assignment {assignment!r} graded on {', '.join(selection)}, but this course "
                         f"has no {', '.join(gone)} (it has: {', '.join(course.exercises())})")
    if recorded is None:
        store.record_selection(assignment, selection)
    return selection


def assignment_name(store: Store, default: str, legacy_default: str, folder: Path) -> str:
    """The assignment a batch of `folder` grades when none is named: the only one its store holds,
    else `default` for a new folder; of several, `default` or `legacy_default` (batches before
    named them after their roster), where one of them is there, else --assignment must say."""
    names = store.assignments()
    if len(names) == 1:
        return names[0]
    if not names:
        return default
    for name in (default, legacy_default):
        if name in names:
            return name
    raise UsageError(f"{folder} holds {len(names)} assignments ({', '.join(names)}): name one with --assignment")


def deadline_for_batch(store: Store, assignment: str, given: datetime | None, folder: Path,
                       new: bool, on_notice: Callable[[str], None] | None = None) -> datetime | None:
    """The deadline a batch of `assignment` chooses commits by: `given` where the assignment is
    `new`, recorded now (None: the latest commits); else the recorded one, which `given` (None:
    not given) must match (a usage error otherwise) once a grade is stored: before, `given`
    replaces it, as `for_batch` does the exercises. An assignment graded before deadlines were
    recorded takes `given` and records it, where one is given."""
    recorded = store.deadline(assignment)
    if recorded is NOT_RECORDED:
        if not new and given is None:
            return None  # as it was graded: nothing says it had a deadline
        recorded = store.record_deadline(assignment, given)
    if given is not None and given != recorded and not store.has_grades(assignment):
        store.replace_deadline(assignment, given)
        if on_notice is not None:
            was = "none (the latest commits)" if recorded is None else recorded.isoformat()
            on_notice(f"{folder} chooses commits by the deadline {given.isoformat()} now, not by {was} as its first "
                      f"batch chose: that batch stored no grade")
        return given
    if given is not None and given != recorded:
        held = ("each student's latest commit (its first batch had no --deadline)" if recorded is None
                else f"the last commits at or before {recorded.isoformat()} (its first batch's --deadline)")
        raise UsageError(f"{folder} grades assignment {assignment!r} on {held}, not by --deadline "
                         f"{given.isoformat()}: a batch folder keeps its deadline (leave --deadline out to grade by "
                         f"it); grade another deadline in another --out folder, and give one student an extension "
                         f"in a deadline column of the roster")
    return recorded


def _in_course_order(course: Course, exercises: list[str]) -> list[str]:
    return [e for e in course.exercises() if e in exercises]
