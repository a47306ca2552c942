"""One student's latest graded result in a batch folder (`gpugrade feedback FOLDER STUDENT`), as an
instructor answering that student's email needs it: which commit was graded and when, the deadline
that chose it (an extension), days late and the penalty an export charges, the score of each test
with its message, and the feedback page the student was given. Read from the store only: nothing
is graded again."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import UsageError
from ..report import first_failure, render
from ..report.text import listed
from .export import LatePolicy, reason, with_unreached
from .store import NOT_RECORDED, Row, Store


class UnknownStudent(UsageError):
    """The student id is neither on the folder's roster nor in its store (a typo in an email's id)."""


@dataclass(frozen=True)
class StudentResult:
    folder: Path
    assignment: str
    row: Row                        # the stored row shown in grades.csv (a row "not graded yet" where none is)
    on_roster: bool                 # off the latest batch's roster: left out of grades.csv and every export
    chosen_by: datetime | None      # the deadline that chose the commit: their extension, else the folder's
    extension: datetime | None
    policy: LatePolicy              # the student's, as the export would apply it
    pages: tuple[Path, ...]         # their feedback pages in the folder

    @property
    def student_id(self) -> str:
        return self.row.key.student_id


def look_up(store: Store, folder: Path, assignment: str, student_id: str, policy: LatePolicy,
            pages_in: Path) -> StudentResult:
    """`student_id`'s latest row of `assignment`, with what decides their lateness; an unknown id is
    a usage error naming the ids close to it."""
    roster = store.roster(assignment)
    rows = store.latest(assignment, [student_id])
    if not rows and student_id not in (roster or ()):
        known = sorted({*(roster or ()), *(r.key.student_id for r in store.latest(assignment))})
        raise UnknownStudent(_unknown(folder, assignment, student_id, known))
    row = rows[0] if rows else with_unreached([], [student_id], assignment)[0][0]
    extension = store.extensions(assignment).get(student_id)
    pages = tuple(p for p in (pages_in / f"{student_id}.html", pages_in / f"{student_id}.md") if p.is_file())
    return StudentResult(folder, assignment, row, roster is None or student_id in roster,
                         extension or folder_deadline(store, assignment), extension, policy.of(student_id), pages)


def _unknown(folder: Path, assignment: str, student_id: str, known: list[str]) -> str:
    folded = {k.lower(): k for k in known}
    near = list(dict.fromkeys([*([folded[student_id.lower()]] if student_id.lower() in folded else []),
                               *difflib.get_close_matches(student_id, known, n=5, cutoff=0.6)]))
    hint = (f"did you mean {listed(near)}?" if near else
            f"none is close; it has {len(known)}: {listed(known, 10)}" if known else "it has no students yet")
    return f"{folder} has no student {student_id!r} in assignment {assignment!r} (its roster or store): {hint}"


def _when(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds") if moment is not None else "unknown"


def as_text(found: StudentResult) -> str:
    """What the command prints: the commit and when, lateness, then the score table of every test
    (`gpugrade grade -v`'s) and the first failure whole, then where the feedback page is."""
    row, policy = found.row, found.policy
    lines = [f"{found.student_id}: assignment {found.assignment!r} of {found.folder}"]
    if not found.on_roster:
        lines.append("NOT ON THE ROSTER of the latest batch: left out of grades.csv, the summary and every export")
    if row.key.commit:
        what = (f"commit {row.key.commit[:12]} of {_when(row.committed_at)}" if row.committed_at
                else f"folder {row.key.commit[:19]}")  # a folder's "sha256:<hex>" has no date
        lines.append(f"Graded: {what}, graded {_when(row.graded_at)} by grader {row.key.grader_version} "
                     f"(attempt {row.attempt})")
    lines.append(_deadline_line(found))
    if row.status == "graded":
        days, penalty = policy.days_late(row.committed_at), policy.penalty(row.committed_at)
        lines.append(f"Score: {row.score:g}/{row.max_score:g}; " + (
            f"{days} day(s) late: {penalty:.0%} off, final {policy.final(row.score, row.committed_at):g}" if penalty
            else f"{days} day(s) late, no penalty (export's --late-per-day charges one)" if days
            else "not late"))
    why = reason(row)
    if why:
        lines.append(f"{'Not graded' if row.status != 'graded' else 'Note'}: {why}")
    if row.results is not None and row.results.tests:
        lines += ["", render(row.results, "table", verbose=True).rstrip()]
        failure = first_failure(row.results)
        if failure:
            lines += ["", failure]
    lines += ["", "Feedback page: " + (", ".join(str(p) for p in found.pages) if found.pages else
                                       "none in the folder (written when the batch records their row)")]
    return "\n".join(lines) + "\n"


def _deadline_line(found: StudentResult) -> str:
    if found.extension is not None:
        chose = f"their extension {_when(found.extension)} (the roster's deadline column)"
    elif found.chosen_by is not None:
        chose = f"the folder's deadline {_when(found.chosen_by)}"
    else:
        chose = "no deadline: their latest commit"
    late = found.policy.deadline
    counted = f"; days late count from {_when(late)}" if late is not None and late != found.chosen_by else ""
    return f"Commit chosen by: {chose}{counted}"


def as_dict(found: StudentResult) -> dict:
    """The same as JSON: the row, its lateness as the export computes it, each test's score and message."""
    row, policy = found.row, found.policy
    score = row.score if row.status == "graded" else 0.0
    return {
        "student_id": found.student_id, "assignment": found.assignment, "folder": str(found.folder),
        "on_roster": found.on_roster, "status": row.status, "reason": reason(row),
        "score": score, "max_score": row.max_score, "commit": row.key.commit,
        "committed_at": row.committed_at.isoformat() if row.committed_at else None,
        "graded_at": row.graded_at.isoformat(), "attempt": row.attempt, "grader_version": row.key.grader_version,
        "chosen_by": found.chosen_by.isoformat() if found.chosen_by else None,
        "extension": found.extension.isoformat() if found.extension else None,
        "late": {"deadline": policy.deadline.isoformat() if policy.deadline else None,
                 "days": policy.days_late(row.committed_at), "penalty": policy.penalty(row.committed_at),
                 "final": policy.final(score, row.committed_at)},
        "tests": [{"name": t.name, "exercise": t.exercise, "stage": t.stage, "score": t.score,
                   "max_score": t.max_score, "status": str(t.status), "message": t.output}
                  for t in (row.results.tests if row.results is not None else ())],
        "feedback": [str(p) for p in found.pages],
    }


def folder_deadline(store: Store, assignment: str) -> datetime | None:
    """The deadline the folder chose commits by (None: none, or none recorded)."""
    recorded = store.deadline(assignment)
    return None if recorded is NOT_RECORDED else recorded


__all__ = ["StudentResult", "UnknownStudent", "as_dict", "as_text", "folder_deadline", "look_up"]
