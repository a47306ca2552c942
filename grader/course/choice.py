"""Which file is graded when a submission holds both `<exercise>.py` and `<exercise>.ipynb`.

`gpugrade release --notebooks` writes the notebook beside the stub, so a student who works in the
notebook submits the untouched stub too, and one who works in the `.py` submits the untouched
notebook. `choose` is the one rule, for `gpugrade grade`, `check`, the batch and `grader.check`:

- the `.py` is a released stub, untouched, and the notebook is not the released notebook: the
  notebook is graded ("graded vector_add.ipynb (vector_add.py is the untouched stub)");
- otherwise the `.py` (README: it wins where both were changed), and when the notebook was changed
  too the note says it was ignored, so the student learns it from the feedback, not from the grade.

Untouched: a stub's text (line endings aside), or its code (comments, blank lines and spacing aside:
a `# TODO` added), is one the course released; a notebook's code cells,
in order, are the released notebook's (outputs, metadata and Markdown may differ: running a
notebook or saving it from another Jupyter is not changing it). What the course released is known
from `RECORD`, written by `release` beside the grading tests, so a student's copy of the course has
it (there the course's `exercises/` are the student's own files, so they cannot tell), and from the
course's own `exercises/<exercise>.py` and `.ipynb` where they are not the submission's files (the
batch and `gpugrade grade`: the instructor's course; a course released before the record existed).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .tree import GRADING_TESTS, copies, submission_files, submission_root

RECORD = GRADING_TESTS / "released_files.json"
EARLIER_KEPT = 20  # the digests of earlier releases kept, per exercise and kind


@dataclass(frozen=True)
class Choice:
    path: Path
    note: str = ""  # which file was graded and why, when the submission held both


@dataclass(frozen=True)
class Released:
    """Digests of what the course released for one exercise (`stub_digest`, `notebook_digest`,
    `code_digest`: the stubs' code, comments and spacing aside)."""
    stubs: frozenset[str] = frozenset()
    notebooks: frozenset[str] = frozenset()
    stub_codes: frozenset[str] = frozenset()


def graded_files(submission: str | os.PathLike, exercises: list[str],
                 course_root: Path | None = None) -> dict[str, Choice]:
    """The file graded for each exercise the submission has (missing ones are absent). Without a
    course, nothing is known to be released: a `.py` wins, the note saying so."""
    chosen = {}
    root = submission_root(submission)
    for name in submission_files(submission, exercises):
        modules, notebooks = copies(root, name, ".py"), copies(root, name, ".ipynb")
        known = released(course_root, name, (*modules, *notebooks)) if course_root else Released()
        # a copy at the top and one under exercises/: the one worked in, where the other is as released
        module, module_note = _worked_in(root, modules, known.stubs, stub_digest)
        notebook, notebook_note = _worked_in(root, notebooks, known.notebooks, notebook_digest)
        choice = choose(name, module, notebook, known)
        if choice is not None:
            chosen[name] = Choice(choice.path, "; ".join(n for n in (module_note, notebook_note, choice.note) if n))
    return chosen


def _worked_in(root: Path, found: list[Path], untouched: frozenset[str], digest) -> tuple[Path | None, str]:
    """Of a submission's copies of one file (`found`: at the top, under exercises/), the one worked
    in: the first (the top) unless it is as released and another is not; and a note where there
    were two."""
    if len(found) < 2:
        return (found[0] if found else None), ""
    top, other = found[0], found[1]
    rel = lambda p: p.relative_to(root).as_posix()  # noqa: E731
    if digest(top) in untouched and digest(other) not in untouched:
        return other, f"graded {rel(other)} ({rel(top)} is the untouched released file)"
    if digest(top) in untouched or digest(top) == digest(other):
        return top, ""
    return top, (f"graded {rel(top)}; {rel(other)} was changed too and was ignored (where both are, the one at "
                 f"the top is graded)")


def submission_modules(submission: str | os.PathLike, exercises: list[str],
                       course_root: Path | None = None) -> dict[str, Path]:
    """graded_files without the notes."""
    return {name: choice.path for name, choice in graded_files(submission, exercises, course_root).items()}


def choose(exercise: str, module: Path | None, notebook: Path | None, released: Released) -> Choice | None:
    """The file graded for `exercise` among the submission's `.py` and `.ipynb` (either may be None)."""
    if module is None or notebook is None:
        found = module or notebook
        return Choice(found) if found else None
    py, nb = module.name, notebook.name
    if not notebooks_readable():
        # (an unreadable notebook is no "changed" one: it would win over the .py and fail the exercise)
        return Choice(module, f"graded {py}; {nb} was not read: this machine has no nbformat "
                              f"(pip install 'gpugrade[notebooks]')")
    # a stub as released, or with its code as released (a `# TODO` added hid the notebook worked in: 0)
    as_released = stub_digest(module) in released.stubs
    stub = as_released or code_digest(module) in released.stub_codes
    pristine = notebook_digest(notebook) in released.notebooks
    if stub and not pristine:
        which = ("the untouched stub" if as_released
                 else "the stub, its code untouched: only comments or spacing changed")
        return Choice(notebook, f"graded {nb} ({py} is {which})")
    if stub:
        return Choice(module, f"graded {py}: it and {nb} are both as released, untouched")
    if pristine:
        return Choice(module, f"graded {py} ({nb} is the untouched released notebook)")
    return Choice(module, f"graded {py}; {nb} was changed too and was ignored: where both are changed the "
                          f".py is graded (keep your work in one of them, and the other as released)")


def stub_digest(path: Path) -> str:
    """A module's text, line endings aside (a Windows checkout is not a change)."""
    return "sha256:" + hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def code_digest(path: Path) -> str | None:
    """A module's code, comments, blank lines and trailing spaces aside (its lines without the
    comments tokenize finds: the same on every Python, where a syntax tree's dump is not); None
    when it does not tokenize."""
    import io
    import tokenize

    try:
        text = path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n")
        lines = text.split("\n")
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                row, column = token.start
                lines[row - 1] = lines[row - 1][:column]
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, OSError):
        return None
    code = "\n".join(line.rstrip() for line in lines if line.strip())
    return "code:" + hashlib.sha256(code.encode()).hexdigest()


def notebooks_readable() -> bool:
    """Whether this machine can read a notebook (nbformat, the notebooks extra, is installed)."""
    import importlib.util

    return importlib.util.find_spec("nbformat") is not None


def notebook_digest(path: Path) -> str | None:
    """A notebook's code cells, the module it grades as; None when it cannot be read as one."""
    from . import notebooks

    try:
        return "sha256:" + hashlib.sha256(notebooks.module_source(path).encode()).hexdigest()
    except (notebooks.NotebookRefused, UsageError, OSError):
        return None  # refused, or no nbformat here: not the released notebook, as far as we can tell


def released(course_root: Path, exercise: str, own: tuple[Path | None, ...] = ()) -> Released:
    """What the course released for `exercise`: the record's digests, and those of the course's
    `exercises/` files that are not among `own` (the submission's files)."""
    stubs, notebooks, codes = set(), set(), set()
    entry = _record(course_root).get(exercise, {})
    if isinstance(entry, dict):
        for kind, digests in (("stub", stubs), ("notebook", notebooks), ("stub_code", codes)):
            earlier = entry.get(f"earlier_{kind}s")
            digests.update(d for d in (entry.get(kind), *(earlier if isinstance(earlier, list) else ()))
                           if isinstance(d, str))
    stub = course_root / "exercises" / f"{exercise}.py"
    for path, digests, digest in ((stub, stubs, stub_digest), (stub, codes, code_digest),
                                  (course_root / "exercises" / f"{exercise}.ipynb", notebooks, notebook_digest)):
        if path.is_file() and not any(mine and _same(path, mine) for mine in own):
            digests.add(digest(path))
    return Released(frozenset(stubs), frozenset(d for d in notebooks if d), frozenset(d for d in codes if d))


def write_record(course_root: Path, stubs: list[Path], notebooks: list[Path]) -> Path:
    """`RECORD`: the digests of the stubs and notebooks `release` just wrote."""
    exercises: dict[str, dict] = {}
    for path in stubs:
        exercises.setdefault(path.stem, {}).update(stub=stub_digest(path), stub_code=code_digest(path))
    for path in notebooks:
        digest = notebook_digest(path)
        if digest:
            exercises.setdefault(path.stem, {})["notebook"] = digest
    # what earlier releases wrote stays untouched too: a student's copy released before an edit of
    # the solution (a docstring's word) still holds that release's stub beside the notebook worked in
    for name, before in _record(course_root).items():
        if not isinstance(before, dict) or name not in exercises:
            continue
        entry = exercises[name]
        for kind in ("stub", "notebook", "stub_code"):
            earlier = [d for d in (*before.get(f"earlier_{kind}s", []), before.get(kind))
                       if isinstance(d, str) and d != entry.get(kind)]
            if earlier:
                entry[f"earlier_{kind}s"] = list(dict.fromkeys(earlier))[-EARLIER_KEPT:]
    target = course_root / RECORD
    target.write_text(json.dumps({"about": "written by gpugrade release: which stubs and notebooks are untouched "
                                           "(grader/course/choice.py)", "exercises": exercises},
                                 indent=1, sort_keys=True) + "\n")
    return target


def _record(course_root: Path) -> dict:
    try:
        data = json.loads((course_root / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    exercises = data.get("exercises") if isinstance(data, dict) else None
    return exercises if isinstance(exercises, dict) else {}


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
