"""A course tree and a submission: which exercises exist, where the student's modules are.

The course is the folder with `tests/exercises/test_<exercise>.py` (found from the current
directory upwards). A submission is a folder holding the exercise modules directly or under
`exercises/`, each a `<exercise>.py` or a notebook `<exercise>.ipynb` (grader.course.notebooks;
grader.course.choice says which is graded where both are). Only the student's own exercise
modules are copied into a grading workspace.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import CourseError, UsageError
from ..judge.policy import DEFAULT_ALLOWED_IMPORTS
from . import manifest, notebooks

GRADING_TESTS = Path("tests") / "exercises"


@dataclass(frozen=True)
class Course:
    root: Path

    @classmethod
    def find(cls, start: str | os.PathLike | None = None) -> "Course":
        here = Path(start or os.getcwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / GRADING_TESTS).is_dir():
                return cls(folder)
        raise CourseError(f"no course found: no {GRADING_TESTS}/ in {here} or any folder above it")

    @property
    def tests_dir(self) -> Path:
        return self.root / GRADING_TESTS

    def exercises(self) -> list[str]:
        """The exercises with grading tests, in the course's order: as course.toml lists them (the
        easiest first: results, "the first failing test" and hints follow it), then any it does not
        list, by name. Without a readable manifest, by name."""
        found = sorted(p.stem[len("test_"):] for p in self.tests_dir.glob("test_*.py"))
        try:
            listed = list(manifest.find(self.root).exercises)
        except CourseError:  # no course.toml, or a broken one: said where the manifest is needed
            listed = []
        return [e for e in listed if e in found] + [e for e in found if e not in listed]

    def allowed_imports(self) -> frozenset[str]:
        """The static policy's import allowlist, widened by course.toml's `[course] allow_imports`
        (a course without a readable manifest: the defaults)."""
        try:
            return manifest.find(self.root).imports_allowed()
        except CourseError:
            return DEFAULT_ALLOWED_IMPORTS

    def test_file(self, exercise: str) -> Path:
        path = self.tests_dir / f"test_{exercise}.py"
        if not path.is_file():
            known = ", ".join(self.exercises()) or "none"
            raise UsageError(f"unknown exercise {exercise!r} (this course has: {known})")
        return path

    def select(self, exercises: list[str] | tuple[str, ...] | None) -> list[str]:
        """The exercises named on a command line, each checked (an unknown one is a usage error
        naming the course's), duplicates dropped; none named means all of them."""
        if not exercises:
            return self.exercises()
        for exercise in exercises:
            self.test_file(exercise)
        return list(dict.fromkeys(exercises))


def candidates(exercise: str) -> dict[str, tuple[str, str]]:
    """Where an exercise's files may be in a submission, per kind, the first that is a file taken:
    at the top, then under `exercises/`."""
    return {kind: (f"{exercise}{kind}", f"exercises/{exercise}{kind}") for kind in (".py", ".ipynb")}


def copies(root: Path, exercise: str, kind: str | None = None) -> list[Path]:
    """Every file of `exercise` in the submission folder `root`, of `kind` (".py", ".ipynb") or of
    both, in `candidates`' order: the one at the top first."""
    places = candidates(exercise)
    return [root / c for k in ((kind,) if kind else places) for c in places[k] if (root / c).is_file()]


def submission_root(submission: str | os.PathLike) -> Path:
    """The folder a submission's exercise files are in: the submission itself, or where it holds no
    exercise file and no `exercises/` but one folder and nothing else (a repository uploaded as a
    zip to Gradescope: `gpu-course-main/exercises/...`), that folder."""
    root = Path(submission)
    if not root.is_dir():
        raise UsageError(f"submission {root} is not a folder")
    entries = [p for p in root.iterdir() if not p.name.startswith(".") and p.name != "__MACOSX"]
    if (len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink()
            and entries[0].name != "exercises"):
        return entries[0]
    return root


def submission_files(submission: str | os.PathLike, exercises: list[str]) -> dict[str, tuple[Path | None, Path | None]]:
    """The student's `.py` and `.ipynb` of each exercise, either None (exercises with neither are
    absent). Which one is graded is grader.course.choice's to say."""
    root = submission_root(submission)
    found = {}
    for name in exercises:
        module, notebook = (next(iter(copies(root, name, kind)), None) for kind in (".py", ".ipynb"))
        if module or notebook:
            found[name] = (module, notebook)
    return found


def make_workspace(modules: dict[str, Path], workspace: Path,
                   allowed_imports: frozenset[str] = DEFAULT_ALLOWED_IMPORTS) -> list[str]:
    """Copy the student's exercise modules, and nothing else, into a fresh workspace; returns what
    of the notebooks' IPython syntax and top-level scratch was left out (`notebooks.read`, with the
    course's `allowed_imports`), for the results' notes.

    The workspace is world-readable and its parent traversable (not listable), because a docker
    runner (an unprivileged uid of its own) mounts it; the process sandbox shows its runner a copy.
    Whatever else sits beside it stays private.
    """
    workspace.mkdir(parents=True, exist_ok=True)
    left_out: list[str] = []
    for name, path in modules.items():
        target = workspace / f"{name}.py"
        if linked(path):
            target.write_text(notebooks.refusal_module(f"{path.name} is a link: submit the file itself",
                                                       "SubmissionRefused"))
        elif path.suffix == ".ipynb":
            text, said = _notebook_module(path, allowed_imports)
            target.write_text(text)
            left_out += said
        else:
            shutil.copyfile(path, target)
        os.chmod(target, 0o644)
    os.chmod(workspace, 0o755)
    os.chmod(workspace.parent, workspace.parent.stat().st_mode | 0o111)
    return left_out


def linked(path: Path) -> bool:
    """Whether an exercise's file is a link or in an `exercises/` folder that is one: followed, a
    link to the course's solution (on the grading machine, beside the course's tests) was graded as
    the student's (the batch refuses links as it fetches; this is `gpugrade grade`'s refusal)."""
    return path.is_symlink() or path.parent.name == "exercises" and path.parent.is_symlink()


def _notebook_module(path: Path, allowed_imports: frozenset[str]) -> tuple[str, list[str]]:
    """The workspace module of a notebook: its code cells, or, for a refused notebook, a module
    whose import raises the reason. The workspace is the one channel from here to the judge (a
    missing module is told by its absence), so the reason travels as that module: the judge reports
    it as it reports any module that does not import, every test of the exercise failing with it,
    and nothing of the refused notebook is run. The stand-in is the grader's text, not the student's,
    checked by the same static policy and run in the same sandbox as any submission."""
    try:
        return notebooks.read(path, allowed_imports)
    except notebooks.NotebookRefused as refused:
        return notebooks.refusal_module(str(refused)), []
    except UsageError as missing:  # no nbformat on this machine: this exercise fails saying so, not the run
        return notebooks.refusal_module(f"{path.name} cannot be graded here: {missing}"), []
