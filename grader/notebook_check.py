"""`grader.check(exercise)`: the student's self-check from a notebook cell, its feedback inline.

It runs in the notebook's kernel, the student's own environment, as `gpugrade check` runs in their
shell: the course is found from the kernel's current folder (a notebook's kernel starts in the
notebook's folder), the notebook is graded as a submission holding `<exercise>.ipynb` would be
(its code cells are the module; magics and shell lines left out, said in notes), always on the simulator. The
course's own `exercises/<exercise>.ipynb` is graded with the `.py` beside it, as `gpugrade check`
and the batch grade it: the notebook unless the student changed the `.py` (grader.course.choice).
The student's code never imports the grader (the static policy refuses it); this call only reads
the saved files, so save the notebook first (Ctrl-S): the running kernel's cells are not graded.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from .backends import Kind
from .course import Course
from .errors import UsageError
from .grading import grade
from .report.html import html_page
from .report.results import Results, Status
from .report.text import first_line, num

SUMMARY_FAILURES = 5  # failing tests the text summary names (the HTML page has them all)


@dataclass
class Feedback:
    """What `check` returns: the Results, and the HTML feedback page shown when it is displayed.

    The page (grader.report.html) is a whole document with its own styles, so it is embedded as an
    iframe's `srcdoc`: its styles cannot restyle the notebook around it, and the notebook's cannot
    restyle it, whatever the page holds. The one-line score above the frame is plain HTML, so it
    still shows where a front end strips frames (an untrusted notebook reopened in JupyterLab)."""

    exercise: str
    results: Results

    @property
    def score(self) -> float:
        return self.results.score

    @property
    def max_score(self) -> float:
        return self.results.max_score

    def summary(self) -> str:
        """The score, the notes, and each failing test's first line (the page says more, where the
        front end shows HTML; a console shows this alone)."""
        line = f"{self.exercise}: {num(self.score)}/{num(self.max_score)} on the {self.results.backend} backend"
        line += "".join(f"\nNote: {note}" for note in self.results.notes)
        failed = [t for t in self.results.tests if t.status == Status.FAILED]
        line += "".join(f"\n{t.name}: {first_line(t.output) or 'failed'}" for t in failed[:SUMMARY_FAILURES])
        if len(failed) > SUMMARY_FAILURES:
            line += f"\n... and {len(failed) - SUMMARY_FAILURES} more failing"
        return line + "".join(f"\n{error.strip().splitlines()[0]}" for error in self.results.errors if error.strip())

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        page = html_page(self.results)
        summary = "<br>".join(html.escape(line) for line in self.summary().splitlines())
        # the frame grows to its page once loaded (where the front end runs the handler)
        fit = "this.style.height=(this.contentWindow.document.documentElement.scrollHeight+24)+'px'"
        return (f"<div class='gpugrade-feedback'><p><b>{summary}</b></p>"
                f"<iframe srcdoc=\"{html.escape(page, quote=True)}\" onload=\"{fit}\" "
                f"style='width:100%;height:480px;border:1px solid #ccc' title='gpugrade feedback'></iframe></div>")


def check(exercise: str, stage: int | None = None, notebook: str | os.PathLike | None = None) -> Feedback:
    """Grade `exercise` from a notebook and return its feedback, shown inline when displayed.

    `notebook`: the notebook to grade (default: `exercises/<exercise>.ipynb` of the course; the
    running notebook's own path is not known reliably to its kernel, so pass it when it is
    elsewhere). `stage`: grade only that stage."""
    course = Course.find()
    course.test_file(exercise)  # an unknown exercise: UsageError naming the course's exercises
    exercises = course.root / "exercises"
    path = Path(notebook) if notebook is not None else exercises / f"{exercise}.ipynb"
    if not path.is_file():
        raise UsageError(f"no notebook {path} (save the notebook first, or pass notebook='path/to/it.ipynb')")
    if path.suffix != ".ipynb":
        raise UsageError(f"{path} is not a notebook (.ipynb); `gpugrade check {exercise}` grades a .py")
    stages = [stage] if stage else None
    if notebook is None:
        # the course's own exercise: graded as `gpugrade check` and the batch grade it, the .py
        # beside it included (grader.course.choice), so this says what the instructor will see
        results = grade(exercises, [exercise], backend=Kind.SIM, course=course, name="your exercises/",
                        stages=stages)
        return Feedback(exercise, results)
    with tempfile.TemporaryDirectory(prefix="gpugrade-notebook-") as folder:
        # the notebook asked for, alone: beside it, a `.py` of that name could be graded instead
        shutil.copyfile(path, Path(folder) / f"{exercise}.ipynb")
        results = grade(folder, [exercise], backend=Kind.SIM, course=course, name=path.name, stages=stages)
    return Feedback(exercise, _named(results, f"{exercise}.ipynb", path.name))


def _named(results: Results, graded_as: str, name: str) -> Results:
    """The results of a notebook graded as `graded_as`, naming it as the student does (`name`):
    my_matmul.ipynb's failures said matmul.ipynb, the untouched stub beside it."""
    if graded_as == name:
        return results

    def say(text):
        return text.replace(graded_as, name) if isinstance(text, str) else text

    tests = [replace(t, output=say(t.output), finding=replace(t.finding, file=say(t.finding.file),
                                                              message=say(t.finding.message))
                     if t.finding is not None else None) for t in results.tests]
    return replace(results, tests=tests, notes=[say(n) for n in results.notes], errors=[say(e) for e in results.errors])
