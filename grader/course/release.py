"""Student stubs from reference solutions, with nbgrader's region syntax.

`### BEGIN SOLUTION` ... `### END SOLUTION` becomes `raise NotImplementedError()` at the marker's
indentation; `### BEGIN HIDDEN TESTS` ... `### END HIDDEN TESTS` is dropped. Output is a pure
function of the input text, so releasing twice changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CourseError, WouldOverwriteWork

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = "raise NotImplementedError()"


def strip_solutions(text: str, filename: str = "<solution>") -> str:
    out: list[str] = []
    open_region: tuple[str, int] | None = None  # (kind, line number of its BEGIN)
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        marker = line.strip()
        if marker in (BEGIN, BEGIN_HIDDEN):
            if open_region:
                raise CourseError(f"{filename}:{number}: {marker} inside the region opened at line {open_region[1]}")
            open_region = (marker, number)
            if marker == BEGIN:
                out.append(line[: len(line) - len(line.lstrip())] + STUB + "\n")
            continue
        if marker in (END, END_HIDDEN):
            expected = BEGIN if marker == END else BEGIN_HIDDEN
            if not open_region or open_region[0] != expected:
                raise CourseError(f"{filename}:{number}: {marker} without a matching {expected}")
            open_region = None
            continue
        if open_region is None:
            out.append(line)
    if open_region:
        raise CourseError(f"{filename}:{open_region[1]}: {open_region[0]} is never closed")
    return "".join(out)


def release(solutions: Path, exercises: Path) -> list[Path]:
    """Regenerate every exercises/<name>.py from solutions/<name>.py; returns the files written."""
    exercises.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(solutions.glob("*.py")):
        target = exercises / source.name
        target.write_text(strip_solutions(source.read_text(), str(source)))
        written.append(target)
    return written


def refuse_to_overwrite_work(course_root: Path, notebooks: bool) -> None:
    """WouldOverwriteWork naming the files of exercises/ that `release` (`notebooks`: with
    --notebooks) would replace though they are not as the course last released them (its record,
    grader/course/choice.py): in a student's copy of the course, their work. Without a record
    (a course released before it existed) nothing can be told, and nothing is refused."""
    from .choice import RECORD, notebook_digest, released, stub_digest

    if not (course_root / RECORD).is_file():
        return
    exercises, changed = course_root / "exercises", []
    for source in sorted((course_root / "solutions").glob("*.py")):
        stub, notebook = exercises / source.name, exercises / f"{source.stem}.ipynb"
        known = released(course_root, source.stem, own=(stub, notebook))  # the record's digests only
        fresh = strip_solutions(source.read_text(), str(source)).encode()
        if (stub.is_file() and stub_digest(stub) not in known.stubs
                and stub.read_bytes().replace(b"\r\n", b"\n") != fresh):
            changed.append(stub)
        if notebooks and notebook.is_file() and notebook_digest(notebook) not in known.notebooks:
            changed.append(notebook)
    if changed:
        names = ", ".join(str(path.relative_to(course_root)) for path in changed)
        raise WouldOverwriteWork(
            f"release would overwrite {names}: changed since the course released them. `release` regenerates "
            f"exercises/ from solutions/ (the instructor's command); keep a copy of your work first (git commit, "
            f"or copy the files), or pass --force to overwrite them")


def released_notebooks(course_root: Path, stubs: list[Path]) -> list[Path]:
    """The stubs whose notebook beside them is one a release wrote, untouched since (this stub's
    or an earlier one's): `release` without --notebooks keeps it in step with its stub, as left it
    would go on to students (and into the Gradescope zip) with the old stub. A notebook worked in,
    or of the student's own, is never one."""
    from .choice import notebook_digest, released

    found = []
    for stub in stubs:
        notebook = stub.with_suffix(".ipynb")
        if notebook.is_file() and notebook_digest(notebook) in released(course_root, stub.stem,
                                                                        own=(stub, notebook)).notebooks:
            found.append(stub)
    return found
