"""Notebooks (issue 14): `release --notebooks`, a submission holding `<exercise>.ipynb`, and
`grader.check` from a notebook cell. Real files, real `gpugrade` processes, a real kernel run by
nbclient; every grading is of vector_add, the quickest exercise."""

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbformat = pytest.importorskip("nbformat")

from grader.course import make_workspace, submission_modules  # noqa: E402
from grader.course.notebooks import MAX_NOTEBOOK_BYTES, NotebookRefused, module_source, notebook_from_source  # noqa: E402
from grader.report.results import Results, Status, TestResult  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
GPUGRADE = [sys.executable, "-m", "grader"]


def gpugrade(*args, cwd=ROOT):
    return subprocess.run([*GPUGRADE, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def grade_folder(folder: Path, tmp_path: Path) -> Results:
    """`gpugrade grade <folder> vector_add --sandbox process` as an instructor runs it."""
    out = tmp_path / f"{folder.name}.json"
    done = gpugrade("grade", str(folder), "vector_add", "--backend", "sim", "--sandbox", "process",
                    "--format", "json", "--output", str(out))
    assert done.returncode in (0, 1), done.stderr + done.stdout
    return Results.load(str(out))


def submission(tmp_path: Path, name: str, notebook) -> Path:
    """A student's folder holding only exercises/vector_add.ipynb."""
    folder = tmp_path / name / "exercises"
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / "vector_add.ipynb")
    return folder.parent


def with_cell(source: str, at: int = 2):
    """The stub notebook with a code cell `source` inserted as cell number `at`."""
    notebook = notebook_from_source((ROOT / "exercises" / "vector_add.py").read_text(), "vector_add")
    notebook.cells.insert(at - 1, nbformat.v4.new_code_cell(source, id="inserted"))
    return notebook


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """`gpugrade release --notebooks` on a copy of the course."""
    course = tmp_path_factory.mktemp("course")
    for part in ("solutions", "exercises", "tests/exercises"):
        shutil.copytree(ROOT / part, course / part)
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    done = gpugrade("release", "--notebooks", "--no-counters", cwd=course)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "wrote exercises/vector_add.ipynb" in done.stdout
    return course


def test_release_writes_a_notebook_per_exercise_that_jupytext_reads_back(released):
    import ast

    for stub in sorted((released / "exercises").glob("*.py")):
        assert stub.read_text() == (ROOT / "exercises" / stub.name).read_text(), "the stub .py must not change"
        notebook = jupytext.read(stub.with_suffix(".ipynb"))
        nbformat.validate(notebook)
        first, *cells = notebook.cells
        module = ast.parse(stub.read_text())
        assert first.cell_type == "markdown"
        assert first.source.splitlines()[0] == "# " + ast.get_docstring(module).splitlines()[0]
        assert cells and all(c.cell_type == "code" for c in cells)
        # the code cells, in order, are the stub's code: same statements, nothing lost or added
        code = ast.parse("\n\n".join(c.source for c in cells))
        module.body = module.body[1:]
        assert ast.dump(code) == ast.dump(module), stub.name
        assert any(c.source.lstrip().startswith("# -- stage 1") for c in cells)  # comments go with their def
        assert notebook.metadata["kernelspec"]["name"] == "python3"


def test_release_notebooks_twice_changes_nothing(released):
    before = {p.name: p.read_bytes() for p in (released / "exercises").glob("*.ipynb")}
    done = gpugrade("release", "--notebooks", "--no-counters", cwd=released)
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_bytes() for p in (released / "exercises").glob("*.ipynb")} == before


def test_release_without_the_flag_writes_no_notebook(tmp_path):
    course = tmp_path / "course"
    for part in ("solutions", "tests/exercises"):
        shutil.copytree(ROOT / part, course / part)
    done = gpugrade("release", "--no-counters", cwd=course)
    assert done.returncode == 0, done.stderr
    assert not list((course / "exercises").glob("*.ipynb"))


def test_a_release_without_the_flag_keeps_the_notebooks_an_earlier_release_wrote_in_step(released, tmp_path):
    """(audit) after `release --notebooks`, a docstring fixed in a solution and `release` again
    without the flag left the old notebook in exercises/, so it went on to students (and into the
    Gradescope zip) with the old stub. A notebook a release wrote, untouched, is now rewritten with
    its stub; one worked in is left as it is."""
    course = tmp_path / "course"
    shutil.copytree(released, course)
    worked = course / "exercises" / "matmul.ipynb"
    notebook = nbformat.read(worked, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("x = 1  # my work"))
    nbformat.write(notebook, worked)
    solution = course / "solutions" / "vector_add.py"
    solution.write_text(solution.read_text().replace('"""Return a + b', '"""Return the sum a + b', 1))
    done = gpugrade("release", "--no-counters", cwd=course)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "wrote exercises/vector_add.ipynb" in done.stdout and "matmul.ipynb" not in done.stdout, done.stdout
    assert "Return the sum a + b" in (course / "exercises" / "vector_add.ipynb").read_text()
    assert "x = 1  # my work" in worked.read_text()


def test_released_stub_notebook_scores_zero_and_filled_with_the_reference_full_marks(released, tmp_path):
    stub = tmp_path / "stub" / "exercises"
    stub.mkdir(parents=True)
    shutil.copy(released / "exercises" / "vector_add.ipynb", stub)
    # the reference solution made a notebook the same way: the student who filled in every cell
    filled = submission(tmp_path, "filled", notebook_from_source((ROOT / "solutions" / "vector_add.py").read_text(),
                                                                 "vector_add"))
    stubs, reference = grade_folder(stub.parent, tmp_path), grade_folder(filled, tmp_path)
    assert reference.tests and all(t.status == Status.PASSED for t in reference.tests), reference.to_dict()
    assert reference.score == reference.max_score > 0
    assert stubs.score == 0 and stubs.max_score == reference.max_score
    assert any("not implemented yet" in t.output for t in stubs.tests)


def test_a_py_beside_the_notebook_wins(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "vector_add.py").write_text("x = 1\n")
    (tmp_path / "vector_add.ipynb").write_text("{}")
    (tmp_path / "matmul.ipynb").write_text("{}")
    found = submission_modules(tmp_path, ["vector_add", "matmul", "reduction"])
    assert found == {"vector_add": tmp_path / "exercises" / "vector_add.py", "matmul": tmp_path / "matmul.ipynb"}


def test_the_workspace_module_is_the_code_cells_in_order(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("A = 1"),
        nbformat.v4.new_code_cell(""), nbformat.v4.new_code_cell("def f():\n    return A % 2  # not a magic")])
    nbformat.write(notebook, tmp_path / "vector_add.ipynb")
    make_workspace({"vector_add": tmp_path / "vector_add.ipynb"}, tmp_path / "ws")
    assert (tmp_path / "ws" / "vector_add.py").read_text() == (
        "# %% (cell 2)\nA = 1\n\n# %% (cell 4)\ndef f():\n    return A % 2  # not a magic\n")


SELF_CHECK = "import grader\nr = grader.check('vector_add', stage=1)\nprint(r.score, r.max_score)\nr"


def test_the_self_check_cell_is_not_part_of_the_module_graded(tmp_path):
    """Regression: a learner who self-checked from a cell of the notebook itself, as the README
    says, scored 0 on every test ("failed policy: imports grader (vector_add.py:53)"): the cell
    that calls `grader.check` is left out of the module; a cell that does more is graded."""
    work = notebook_from_source((ROOT / "solutions" / "vector_add.py").read_text(), "vector_add")
    work.cells.append(nbformat.v4.new_code_cell(SELF_CHECK, id="check"))
    work.cells.append(nbformat.v4.new_code_cell("from grader import check as gc\ngc('vector_add')", id="again"))
    nbformat.write(work, tmp_path / "vector_add.ipynb")
    module = module_source(tmp_path / "vector_add.ipynb")
    assert "grader" not in module and "THREADS_PER_BLOCK = 256" in module
    work.cells.append(nbformat.v4.new_code_cell("import grader\nTHREADS_PER_BLOCK = 128", id="mixed"))
    nbformat.write(work, tmp_path / "vector_add.ipynb")
    assert "import grader\nTHREADS_PER_BLOCK = 128" in module_source(tmp_path / "vector_add.ipynb")
    work.cells.pop()  # the mixed cell: the reference's block size again
    results = grade_folder(submission(tmp_path, "checked", work), tmp_path)
    assert results.score == results.max_score > 0, [t.output for t in results.tests if t.output][:1]


def test_ipython_lines_a_student_left_in_are_left_out_and_the_notebook_graded_with_a_note(tmp_path):
    """A midnight notebook: `!pip install`, `%load_ext` beside the imports, a `%timeit` and a
    `%%time` cell. The grader runs plain Python: those lines are `pass` (the cell's other lines and
    their numbers unchanged), the `%%time` line too (its cell's try of vector_add is not run: the
    notebook's scratch), each said in the results' notes; nothing else of the grade changes (the
    filled notebook keeps full marks)."""
    work = notebook_from_source((ROOT / "solutions" / "vector_add.py").read_text(), "vector_add")
    imports = next(i for i, c in enumerate(work.cells) if "import numpy" in c.source)
    work.cells[imports].source = "!pip install numba-cuda\n%load_ext autoreload\n" + work.cells[imports].source
    a = "a = np.ones(1 << 10, np.float32)"
    work.cells.append(nbformat.v4.new_code_cell(f"{a}\n%timeit vector_add(a, a)\nt = %timeit -o vector_add(a, a)",
                                                id="timing"))
    work.cells.append(nbformat.v4.new_code_cell(f"%%time\n{a}\nvector_add(a, a)", id="cell-magic"))
    folder = submission(tmp_path, "magics", work)
    module = module_source(folder / "exercises" / "vector_add.ipynb")
    assert "pass  # (IPython, left out)\npass  # (IPython, left out)\nimport numpy" in module
    assert "%%time" not in module and "%timeit" not in module and "!pip" not in module
    results = grade_folder(folder, tmp_path)
    assert results.score == results.max_score > 0, [t.output for t in results.tests if t.output][:1]
    cell = imports + 1
    assert results.notes == [
        f"vector_add.ipynb, cell {cell}: `!pip install numba-cuda` is a shell command: left out of the module "
        f"graded (the grader runs plain Python)",
        f"vector_add.ipynb, cell {cell}: `%load_ext autoreload` is an IPython magic: left out of the module "
        f"graded (the grader runs plain Python)",
        f"vector_add.ipynb, cell {len(work.cells) - 1}: `%timeit vector_add(a, a)` is an IPython magic: left out "
        f"of the module graded (the grader runs plain Python)",
        f"vector_add.ipynb, cell {len(work.cells) - 1}: `t = %timeit -o vector_add(a, a)` is an IPython magic: "
        f"left out of the module graded (the grader runs plain Python)",
        f"vector_add.ipynb, cell {len(work.cells)}: `%%time` is a cell magic that runs the cell's Python: its line "
        f"is left out of the module graded (the grader runs plain Python), the cell's code graded",
        f"vector_add.ipynb, cell {len(work.cells)}, line 3: not run as the notebook is graded: the tests call the "
        f"notebook's functions themselves (a try at import would spend the exercise's time before any test); they "
        f"call vector_add"], results.notes


@pytest.mark.parametrize("source, message", [
    ("def f():\n    x = (1,\n", "cell 2, line 2: SyntaxError: "),
    ("%timeit 1 +\n@cuda.jit\ndef k(x:\n", "cell 2, line 3: SyntaxError: "),  # still not Python without the magic
])
def test_a_cell_holding_a_def_that_is_not_python_is_refused_naming_the_cell(tmp_path, source, message):
    nbformat.write(with_cell(source), tmp_path / "vector_add.ipynb")
    with pytest.raises(NotebookRefused, match=re.escape(message)):
        module_source(tmp_path / "vector_add.ipynb")


def test_a_half_written_cell_holding_no_def_is_left_out_with_a_note(tmp_path):
    """(audit) a leftover `print(vector_add(a, a)` zeroed the notebook; in Jupyter it ran nothing."""
    from grader.course.notebooks import read

    nbformat.write(with_cell("a = 1\nprint(vector_add(a, a)\n"), tmp_path / "vector_add.ipynb")
    module, notes = read(tmp_path / "vector_add.ipynb")
    assert "print(vector_add(a, a)" not in module
    assert notes == ["vector_add.ipynb, cell 2, line 2: SyntaxError: '(' was never closed: the cell is left out of "
                     "the module graded (it holds no def or class)"]


def test_a_time_cell_magic_grades_the_cells_code(tmp_path):
    """(audit) a `%%time` cell defining vector_add was left out whole: 'has no function vector_add()'."""
    from grader.course.notebooks import read

    nbformat.write(with_cell("%%time\ndef f(a):\n    return a\n"), tmp_path / "vector_add.ipynb")
    module, notes = read(tmp_path / "vector_add.ipynb")
    assert "# %% (cell 2)\npass  # (IPython, left out)\ndef f(a):\n    return a\n" in module
    assert notes == ["vector_add.ipynb, cell 2: `%%time` is a cell magic that runs the cell's Python: its line is "
                     "left out of the module graded (the grader runs plain Python), the cell's code graded"]


def test_a_refused_notebook_fails_every_test_of_the_exercise_with_the_cell_named(tmp_path):
    folder = submission(tmp_path, "broken-cell", with_cell("import numpy\ndef f(x,\n", at=3))
    results = grade_folder(folder, tmp_path)
    assert results.tests and results.score == 0
    reason = "vector_add.ipynb, cell 3, line 2: SyntaxError: "
    assert all(t.status == Status.FAILED for t in results.tests)
    told = [t for t in results.tests if not t.output.startswith("needs correctness first")]  # perf: not run
    # (audit) not "could not import the submission ... NotebookRefused:" then a made-up traceback
    # of the stand-in module's `raise`, the reason said three times: the reason, once
    assert told and all(t.output.startswith(f"not graded: {reason}") and "Traceback" not in t.output
                        and t.output.count(reason) == 1 for t in told), results.to_dict()


def test_a_malformed_notebook_is_refused_with_a_clear_reason(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "vector_add.ipynb").write_text('{"cells": [{"cell_type": "code", "source": 3}], "nbformat": 4}')
    results = grade_folder(folder, tmp_path)
    assert results.tests and results.score == 0
    told = [t for t in results.tests if not t.output.startswith("needs correctness first")]
    assert told and all(t.output.startswith("not graded: vector_add.ipynb is not a valid notebook: ") for t in told), \
        results.to_dict()


def _code_cell(source: bytes) -> bytes:
    """A notebook of one code cell, `source` as its JSON string's text (escapes as written)."""
    return (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "id": "c1", '
            b'"metadata": {}, "outputs": [], "execution_count": null, "source": "' + source + b'"}]}')


@pytest.mark.parametrize("content, reason", [
    (b"this is not json", "vector_add.ipynb is not a notebook: it is not JSON"),
    (b"\xff\xfe{}", "vector_add.ipynb is not a notebook: it is not UTF-8 text"),
    (b"[1, 2]", "vector_add.ipynb is not a valid notebook: it is JSON but not an object"),
    (b"[" * 100000, "vector_add.ipynb is not a notebook: it is not JSON"),
    (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}', "vector_add.ipynb has no code cell"),
    (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "script"}]}',
     "vector_add.ipynb is not a valid notebook"),
    # a lone surrogate in a cell (a JSON escape) made ast.parse raise UnicodeEncodeError, not
    # SyntaxError: the grade stopped with an internal error, 0/0, not the student's refusal
    (_code_cell(b"x = '\\ud800'"), "vector_add.ipynb, cell 1: it is not text Python reads"),
], ids=["not-json", "not-utf8", "a-list", "deep", "no-code-cell", "bad-cell-type", "surrogate"])
def test_what_is_not_a_notebook_is_refused(tmp_path, content, reason):
    (tmp_path / "vector_add.ipynb").write_bytes(content)
    with pytest.raises(NotebookRefused, match=reason):
        module_source(tmp_path / "vector_add.ipynb")


def test_an_oversize_notebook_is_refused_unread(tmp_path):
    notebook = with_cell("A = 1")
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", text="x" * MAX_NOTEBOOK_BYTES)]
    nbformat.write(notebook, tmp_path / "vector_add.ipynb")
    with pytest.raises(NotebookRefused, match=r"vector_add.ipynb is 5.0 MiB, more than the 5 MiB a notebook may be"):
        module_source(tmp_path / "vector_add.ipynb")
    make_workspace({"vector_add": tmp_path / "vector_add.ipynb"}, tmp_path / "ws")
    stand_in = (tmp_path / "ws" / "vector_add.py").read_text()
    assert "raise NotebookRefused(" in stand_in and "more than the 5 MiB" in stand_in and "xxxx" not in stand_in


@pytest.fixture(scope="module")
def venv_kernel(tmp_path_factory):
    """A kernelspec that runs this interpreter (the venv's), in a JUPYTER_PATH of its own."""
    pytest.importorskip("ipykernel")
    pytest.importorskip("nbclient")
    path = tmp_path_factory.mktemp("jupyter")
    spec = path / "kernels" / "gpugrade-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gpugrade test (venv)", "language": "python"}))
    return path


def test_grader_check_in_a_real_notebook_shows_the_html_feedback_inline(venv_kernel, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", str(venv_kernel))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    # the student's notebook, stage 1 done (the reference's cells), the rest still stubs
    work = notebook_from_source((ROOT / "exercises" / "vector_add.py").read_text(), "vector_add")
    solved = notebook_from_source((ROOT / "solutions" / "vector_add.py").read_text(), "vector_add")
    work.cells[2:4] = solved.cells[2:4]  # add_kernel and vector_add
    student = tmp_path / "my_vector_add.ipynb"
    nbformat.write(work, student)
    # the instructor's copy of the student's session: a notebook whose last cell self-checks stage 1
    session = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f"import grader\nr = grader.check('vector_add', stage=1, notebook={str(student)!r})\n"
                                  "r"),
        nbformat.v4.new_code_cell("print('score', r.score, r.max_score, len(r.results.tests))")])
    client = NotebookClient(session, kernel_name="gpugrade-test", timeout=300,
                            resources={"metadata": {"path": str(ROOT)}})  # the kernel starts in the course
    client.execute()
    shown = session.cells[0].outputs[0]
    assert shown.output_type == "execute_result", shown
    page = shown.data["text/html"]
    assert "<iframe srcdoc=" in page
    printed = session.cells[1].outputs[0].text.split()
    score, max_score = float(printed[1]), float(printed[2])
    assert score == max_score > 0 and int(printed[3]) > 0
    assert f"vector_add: {score:g}/{max_score:g} on the sim backend" in page
    inner = html.unescape(page.split('srcdoc="', 1)[1].split('"', 1)[0])
    assert inner.startswith("<!doctype html>") and f"{score:g}/{max_score:g}" in inner
    assert "add_kernel" in inner or "vector_add" in inner
    assert "text/plain" in shown.data and "vector_add:" in shown.data["text/plain"]


def test_grader_check_says_what_is_wrong_with_its_arguments(tmp_path, monkeypatch):
    import grader
    from grader.errors import UsageError

    monkeypatch.chdir(ROOT)
    with pytest.raises(UsageError, match="unknown exercise 'nope'"):
        grader.check("nope")
    with pytest.raises(UsageError, match="no notebook"):
        grader.check("vector_add", notebook=tmp_path / "missing.ipynb")


# -- a submission holding both <exercise>.py and <exercise>.ipynb: the file the student worked in --

STUB = (ROOT / "exercises" / "vector_add.py").read_text()
SOLVED = (ROOT / "solutions" / "vector_add.py").read_text()
WORKED_NOTE = "graded vector_add.ipynb (vector_add.py is the untouched stub)"


def both(folder: Path, module: str, notebook) -> Path:
    """A student's folder holding exercises/vector_add.py and exercises/vector_add.ipynb."""
    (folder / "exercises").mkdir(parents=True)
    (folder / "exercises" / "vector_add.py").write_bytes(module.encode())
    nbformat.write(notebook, folder / "exercises" / "vector_add.ipynb")
    return folder


def run_through(notebook):
    """The notebook as Jupyter saves it once run: outputs, counts and metadata of its own, same code."""
    ran = nbformat.from_dict(json.loads(nbformat.writes(notebook)))
    for count, cell in enumerate((c for c in ran.cells if c.cell_type == "code"), start=1):
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    ran.metadata["language_info"] = {"name": "python", "version": "3.12.1"}
    return ran


@pytest.mark.parametrize("module, notebook, graded, note", [
    (STUB, "solved", "vector_add.ipynb", WORKED_NOTE),
    (STUB.replace("\n", "\r\n"), "solved", "vector_add.ipynb", WORKED_NOTE),  # a Windows checkout: still the stub
    # (audit) a comment, a blank line, no final newline: the stub's code untouched, the notebook worked in graded
    (STUB + "\n# TODO\n\n", "solved", "vector_add.ipynb", "graded vector_add.ipynb (vector_add.py is the stub, its "
     "code untouched: only comments or spacing changed)"),
    (STUB.rstrip("\n").replace("import numpy as np", "import numpy as np   # the arrays"), "solved",
     "vector_add.ipynb", "graded vector_add.ipynb (vector_add.py is the stub, its code untouched: only comments or "
     "spacing changed)"),
    (STUB.replace("THREADS_PER_BLOCK = 256", "THREADS_PER_BLOCK = 128"), "solved", "vector_add.py",
     "graded vector_add.py; vector_add.ipynb was changed too and was ignored"),
    (SOLVED, "stub", "vector_add.py", "graded vector_add.py (vector_add.ipynb is the untouched released notebook)"),
    (SOLVED, "stub run", "vector_add.py", "graded vector_add.py (vector_add.ipynb is the untouched released notebook)"),
    (SOLVED, "solved", "vector_add.py", "graded vector_add.py; vector_add.ipynb was changed too and was ignored"),
    (STUB, "stub", "vector_add.py", "graded vector_add.py: it and vector_add.ipynb are both as released, untouched"),
])
def test_the_file_graded_where_both_are_is_the_one_worked_in(released, tmp_path, module, notebook, graded, note):
    from grader.course import graded_files

    notebooks = {"solved": notebook_from_source(SOLVED, "vector_add"),
                 "stub": nbformat.read(released / "exercises" / "vector_add.ipynb", as_version=4)}
    notebooks["stub run"] = run_through(notebooks["stub"])
    folder = both(tmp_path / "student", module, notebooks[notebook])
    choice = graded_files(folder, ["vector_add"], released)["vector_add"]
    assert choice.path == folder / "exercises" / graded
    assert choice.note.startswith(note)
    assert submission_modules(folder, ["vector_add"], released) == {"vector_add": choice.path}


@pytest.mark.parametrize("top, nested, graded, note", [
    (STUB, SOLVED, "exercises/vector_add.py", "graded exercises/vector_add.py (vector_add.py is the untouched released"),
    (SOLVED, STUB, "vector_add.py", ""),
    (SOLVED, SOLVED.replace("cuda.grid(1)", "cuda.grid(1)  # mine", 1), "vector_add.py",
     "graded vector_add.py; exercises/vector_add.py was changed too and was ignored"),
])
def test_a_stub_at_the_top_never_hides_the_work_under_exercises(released, tmp_path, top, nested, graded, note):
    """The audit: a student committed the released stub at the top and did the work under
    exercises/; the top file was graded, 0/25, and the feedback never named the other."""
    from grader.course import graded_files

    folder = tmp_path / "student"
    (folder / "exercises").mkdir(parents=True)
    (folder / "vector_add.py").write_text(top)
    (folder / "exercises" / "vector_add.py").write_text(nested)
    choice = graded_files(folder, ["vector_add"], released)["vector_add"]
    assert choice.path == folder / graded and choice.note.startswith(note), choice


def test_the_record_release_writes_and_the_course_files_each_tell_what_is_released(released, tmp_path):
    from grader.course import graded_files
    from grader.course.choice import RECORD

    record = json.loads((released / RECORD).read_text())["exercises"]
    assert set(record) == {"vector_add", "matmul", "reduction", "allreduce"}
    assert all(set(entry) == {"stub", "stub_code", "notebook"} for entry in record.values())
    folder = both(tmp_path / "student", STUB, notebook_from_source(SOLVED, "vector_add"))
    # a course released before the record existed: its own exercises/ files tell
    old = tmp_path / "old"
    shutil.copytree(released, old)
    (old / RECORD).unlink()
    assert graded_files(folder, ["vector_add"], old)["vector_add"].note == WORKED_NOTE
    # the record alone (the course's stub since edited by hand): it tells, the stub's code too
    (released / "exercises" / "vector_add.py").rename(tmp_path / "aside.py")
    try:
        assert graded_files(folder, ["vector_add"], released)["vector_add"].note == WORKED_NOTE
        (folder / "exercises" / "vector_add.py").write_text(STUB + "# TODO\n")
        assert "its code untouched" in graded_files(folder, ["vector_add"], released)["vector_add"].note
    finally:
        (tmp_path / "aside.py").rename(released / "exercises" / "vector_add.py")


def students_copy(released: Path, where: Path) -> Path:
    """A student's clone of the released course: no solutions/, exercises/ theirs to edit."""
    for part in ("exercises", "tests/exercises"):
        shutil.copytree(released / part, where / part)
    shutil.copy(released / "course.toml", where / "course.toml")
    return where


def test_a_students_copy_tells_their_edited_py_from_the_stub(released, tmp_path):
    """In a student's copy the course's exercises/ are the student's own files: they cannot say
    what is untouched (their .py would be its own stub); the record release wrote does."""
    from grader.course import graded_files

    copy = students_copy(released, tmp_path / "copy")
    (copy / "exercises" / "vector_add.py").write_text(SOLVED)  # worked in the .py, the notebook as released
    choice = graded_files(copy / "exercises", ["vector_add"], copy)["vector_add"]
    assert choice.path.name == "vector_add.py" and "untouched released notebook" in choice.note


def test_gpugrade_check_and_grader_check_in_a_students_copy_grade_the_worked_notebook(released, tmp_path,
                                                                                         monkeypatch):
    import grader

    copy = students_copy(released, tmp_path / "copy")
    nbformat.write(notebook_from_source(SOLVED, "vector_add"), copy / "exercises" / "vector_add.ipynb")
    done = gpugrade("check", "vector_add", "--backend", "sim", "--sandbox", "process", cwd=copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Total: 25/25" in done.stdout and f"Note: {WORKED_NOTE}" in done.stdout
    monkeypatch.chdir(copy)
    feedback = grader.check("vector_add")
    assert feedback.score == feedback.max_score == 25
    assert f"Note: {WORKED_NOTE}" in feedback.summary() and WORKED_NOTE in feedback._repr_html_()


def test_the_audit_a_notebook_worked_in_beside_the_stub_earns_its_points_and_the_feedback_says_which(tmp_path):
    """The instructor's `gpugrade grade` of a student who worked in the notebook, as README tells
    them to, and pushed the untouched stub beside it: the notebook is graded, the feedback says so."""
    from grader.report.html import html_page
    from grader.report.markdown import markdown

    folder = both(tmp_path / "student", STUB, notebook_from_source(SOLVED, "vector_add"))
    results = grade_folder(folder, tmp_path)
    assert results.score == results.max_score == 25, results.to_dict()
    assert results.notes == [WORKED_NOTE]
    assert f"Note: {WORKED_NOTE}" in markdown(results)
    assert f"Note: {html.escape(WORKED_NOTE)}" in html_page(results)


def test_the_batch_grades_the_notebook_pushed_beside_the_untouched_stub(tmp_path):
    """The audit's class: a real repository pushed with the stub and the worked notebook."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "S", "GIT_AUTHOR_EMAIL": "s@u", "GIT_COMMITTER_NAME": "S", "GIT_COMMITTER_EMAIL": "s@u"}
    work = both(tmp_path / "work", STUB, notebook_from_source(SOLVED, "vector_add"))
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "worked in the notebook"]):
        subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True)
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student_id,repo\nnbstu,{work}\n")
    done = gpugrade("batch", str(roster), "--out", str(tmp_path / "grades"), "--backend", "sim")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    row, = csv.DictReader((tmp_path / "grades" / "grades.csv").open())
    assert (row["student_id"], row["vector_add"], row["status"]) == ("nbstu", "25", "graded"), row
    assert f"Note: {WORKED_NOTE}" in (tmp_path / "grades" / "feedback" / "nbstu.md").read_text()


def _solved_with(*changes: tuple[str, str]) -> str:
    source = SOLVED
    for old, new in changes:
        assert old in source, old
        source = source.replace(old, new, 1)
    return source


def test_a_notebooks_messages_name_its_cells_and_their_lines_not_the_module_graded(tmp_path):
    """Regression (learner audit): a notebook's findings, tracebacks, hotspots and policy refusals
    named `vector_add.py:53`, a line of the module generated from its cells that the student never
    sees. Cell 3 is add_kernel, its line 7 the store; cell 4 vector_add; cell 7 the grid-stride
    host function; cell 8 saxpy_kernel; cell 2 the imports."""
    from grader.report.html import html_page

    bugs = _solved_with(
        ("    if i < out.size:\n        out[i] = a[i] + b[i]", "    out[i] = a[i] + b[i]"),  # out of bounds
        ("(d_a, d_b, d_out)\n    return d_out.copy_to_host()\n    ### END SOLUTION\n\n\n# -- stage 3",  # host code raises
         "(d_a, d_b, d_out)\n    x = [1][a.size]\n    return d_out.copy_to_host()\n    ### END SOLUTION\n\n\n# -- stage 3"),
        ("        y[i] = alpha * x[i] + y[i]",  # a warp over 8 segments of 32 elements: uncoalesced
         "        base = cuda.blockIdx.x * 256\n        t = cuda.threadIdx.x\n"
         "        j = base + (t % 8) * 32 + t // 8 if base + 256 <= y.size else i\n        y[j] = alpha * x[j] + y[j]"))
    results = grade_folder(submission(tmp_path, "bugs", notebook_from_source(bugs, "vector_add")), tmp_path)
    by_name = {t.name: t for t in results.tests}
    oob = by_name["vector_add::edge_sizes[n=33]"]
    assert oob.output.startswith("kernel 'add_kernel' at vector_add.ipynb, cell 3, line 7, block (0, 0, 0), "
                                 "thread (33, 0, 0): out-of-bounds access"), oob.output
    assert oob.output.endswith("launched at vector_add.ipynb, cell 4, line 8 in vector_add"), oob.output
    assert (oob.finding.file, oob.finding.line) == ("vector_add.ipynb, cell 3", 7)
    # the excerpt: the cell's own lines, numbered as in the cell, no marker of the module graded
    assert oob.source == [4, ['    """out[i] = a[i] + b[i] for every i, one thread per element."""',
                              "    ### BEGIN SOLUTION", "    i = cuda.grid(1)", "    out[i] = a[i] + b[i]",
                              "    ### END SOLUTION"]], oob.source
    assert "<code>vector_add.ipynb, cell 3</code>, line 7" in html_page(results)
    raised = by_name["vector_add::grid_stride_sizes[n=33]"].output
    assert raised.startswith("IndexError (vector_add.ipynb, cell 7, line 8 in vector_add_grid_stride)"), raised
    assert '  File "vector_add.ipynb", cell 7, line 8, in vector_add_grid_stride\n    x = [1][a.size]' in raised
    slow = by_name["vector_add::saxpy_moves_the_fewest_bytes"]
    assert slow.output.splitlines()[0].endswith("worst at cell 8, line 11 (load)"), slow.output
    assert "uncoalesced access at cell 8, line 11 of kernel 'saxpy_kernel' (store)" in slow.output
    assert (slow.request["cell"], slow.request["line"]) == (8, 11)
    assert not any(re.search(r"vector_add\.py|\bline (?:[2-9]\d|1[2-9])\b", t.output) for t in results.tests)

    # (at a notebook's top level a refused import is left out, with a note: grader.course.scratch;
    # in a function it is graded code, refused)
    policy = _solved_with(("    d_a = cuda.to_device(a)\n", "    import os\n    d_a = cuda.to_device(a)\n"))
    refused = grade_folder(submission(tmp_path, "policy", notebook_from_source(policy, "vector_add")), tmp_path)
    told = [t.output for t in refused.tests if not t.output.startswith("needs correctness first")]
    assert told and all(o == "policy: imports os: a graded module may not reach the system; remove it "
                                  "(vector_add.ipynb, cell 4, line 4)" for o in told), told


def test_only_the_notebooks_module_lines_are_retold():
    """Other files' lines (numpy's, a .py module's) stay as they are; two lines of one cell are told
    as that cell's; a line in no cell is the notebook alone."""
    from grader.course.cell_lines import CellLines, retell_text

    cells = CellLines.of("vector_add.py", "vector_add.ipynb", "# %% (cell 2)\nA = 1\nB = 2\n\n# %% (cell 5)\nC = 3\n")
    text = ('File "/usr/lib/numpy/core.py", line 12, in f; matmul.py:3; numpy.py:2; vector_add.py:6; '
            'with no barrier between lines 2 and 3; line 6 does both; lines 3 and 6; vector_add.py:4')
    assert retell_text(text, {"vector_add.py": cells}, cells) == (
        'File "/usr/lib/numpy/core.py", line 12, in f; matmul.py:3; numpy.py:2; vector_add.ipynb, cell 5, line 1; '
        'with no barrier between lines 1 and 2 of cell 2; cell 5, line 1 does both; cell 2, line 2 and cell 5, '
        'line 1; vector_add.ipynb')
    # (the audit: "importing vector_add.py timed out", "invalid syntax (vector_add.py, line 6)")
    bare = "importing vector_add.py timed out; invalid syntax (vector_add.py, line 6); matmul.py has no f; x/vector_add.py"
    assert retell_text(bare, {"vector_add.py": cells}, cells) == (
        "importing vector_add.ipynb timed out; invalid syntax (vector_add.ipynb, cell 5, line 1); matmul.py has no f; "
        "x/vector_add.py")
    printed = "failed at vector_add.py:6\n\nwhat your kernels printed:\n  kernel> vector_add.py:6 line 6"
    assert retell_text(printed, {"vector_add.py": cells}, cells) == (
        "failed at vector_add.ipynb, cell 5, line 1\n\nwhat your kernels printed:\n  kernel> vector_add.py:6 line 6")


def test_failures_at_two_lines_of_a_cell_are_two_failures_and_one_at_two_sizes_is_one():
    from grader.report.text import grouped

    def failed(n, line):
        return TestResult(f"vector_add::t[n={n}]", "vector_add", 1, 1, 0, Status.FAILED,
                          f"IndexError (vector_add.ipynb, cell 6, line {line} in f): index {n} is out of bounds")

    assert [len(g) for g in grouped([failed(33, 8), failed(1025, 8), failed(33, 9)]).values()] == [2, 1]


def test_a_notebook_without_cell_ids_reads_without_a_warning(tmp_path):
    """An older Jupyter's notebook (nbformat 4.5 without cell ids): nbformat's MissingIDFieldWarning
    came once per such submission, between a batch's progress lines."""
    import warnings

    from grader.course.notebooks import module_source

    doc = json.loads(nbformat.writes(notebook_from_source(SOLVED, "vector_add")))
    for cell in doc["cells"]:
        cell.pop("id", None)
    path = tmp_path / "vector_add.ipynb"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "def vector_add(" in module_source(path)
        doc["cells"][1]["id"] = doc["cells"][2]["id"] = "copied"  # a cell copied in Jupyter, its id with it
        doc["nbformat_minor"] = 5
        path.write_text(json.dumps(doc))
        assert "def vector_add(" in module_source(path)
        for cell in doc["cells"]:
            cell.pop("id", None)
        doc["nbformat_minor"] = 4  # before ids: none added (4.4's schema has none)
        path.write_text(json.dumps(doc))
        assert "def vector_add(" in module_source(path)


def test_without_nbformat_the_py_is_graded_and_a_notebook_alone_fails_its_exercise_only(released, tmp_path,
                                                                                        monkeypatch):
    """The audit: on Gradescope (setup.sh installed no notebooks extra) the untouched released
    notebook beside the solved .py counted as changed, was chosen, and the whole run exited 2."""
    from grader.course import choice, graded_files, make_workspace
    from grader.course import notebooks as nb
    from grader.errors import UsageError

    monkeypatch.setattr(choice, "notebooks_readable", lambda: False)
    folder = both(tmp_path / "student", SOLVED, nbformat.read(released / "exercises" / "vector_add.ipynb",
                                                                  as_version=4))
    chosen = graded_files(folder, ["vector_add"], released)["vector_add"]
    assert chosen.path.suffix == ".py" and "vector_add.ipynb was not read: this machine has no nbformat" in chosen.note

    def no_nbformat(path, *_):
        raise UsageError("grading a notebook needs nbformat: pip install 'gpugrade[notebooks]'")

    monkeypatch.setattr(nb, "read", no_nbformat)
    make_workspace({"vector_add": folder / "exercises" / "vector_add.ipynb"}, tmp_path / "ws")
    module = (tmp_path / "ws" / "vector_add.py").read_text()
    assert "vector_add.ipynb cannot be graded here: grading a notebook needs nbformat" in module


def test_the_gradescope_setup_installs_the_notebooks_extra_for_a_course_with_notebooks():
    setup = (ROOT / "grader" / "course" / "gradescope_scripts" / "setup.sh").read_text()
    assert 'compgen -G "$SOURCE/course/exercises/*.ipynb"' in setup and 'wheel="$wheel[notebooks]"' in setup


def test_a_stub_of_an_earlier_release_is_still_untouched(released, tmp_path):
    """The audit: the instructor fixed a word in a solution's docstring and released again; a
    student's old stub beside the notebook they worked in now counted as changed, and the stub
    was graded (0/25)."""
    from grader.course import graded_files
    from grader.course.choice import RECORD

    course = tmp_path / "course"
    shutil.copytree(released, course)
    old_stub = (course / "exercises" / "vector_add.py").read_text()
    solution = course / "solutions" / "vector_add.py"
    solution.write_text(solution.read_text().replace("Exercise", "The exercise", 1))
    done = gpugrade("release", "--notebooks", "--no-counters", "--force", cwd=course)
    assert done.returncode == 0, done.stderr + done.stdout
    assert (course / "exercises" / "vector_add.py").read_text() != old_stub
    entry = json.loads((course / RECORD).read_text())["exercises"]["vector_add"]
    assert len(entry["earlier_stubs"]) == 1 and entry["earlier_stubs"][0] != entry["stub"]
    folder = both(tmp_path / "student", old_stub, notebook_from_source(SOLVED, "vector_add"))
    assert graded_files(folder, ["vector_add"], course)["vector_add"].note == WORKED_NOTE


def test_ipython_help_lines_are_left_out_with_a_note(tmp_path):
    """The audit: a cell `cuda.grid?` refused a finished notebook as a SyntaxError, naming no IPython."""
    from grader.course.notebooks import read

    notebook = with_cell("from numba import cuda\ncuda.grid?\n??cuda.syncthreads\nx = 1")
    nbformat.write(notebook, tmp_path / "vector_add.ipynb")
    module, said = read(tmp_path / "vector_add.ipynb")
    assert "pass  # (IPython, left out)\npass  # (IPython, left out)\nx = 1" in module
    assert [s.split(": ", 1)[1] for s in said] == [
        "`cuda.grid?` is IPython's help: left out of the module graded (the grader runs plain Python)",
        "`??cuda.syncthreads` is IPython's help: left out of the module graded (the grader runs plain Python)"]


def test_a_submission_of_one_folder_holding_the_repository_is_graded_from_it(tmp_path):
    """The audit: a Gradescope upload of the repository's zip (gpu-course-main/exercises/...) read
    "vector_add.py is not in the submission", 0/111."""
    from grader.course import graded_files

    inner = tmp_path / "upload" / "gpu-course-main" / "exercises"
    inner.mkdir(parents=True)
    (inner / "vector_add.py").write_text(SOLVED)
    (tmp_path / "upload" / "__MACOSX").mkdir()  # what a Mac's zip adds beside it
    chosen = graded_files(tmp_path / "upload", ["vector_add"], ROOT)
    assert chosen["vector_add"].path == inner / "vector_add.py"
    (tmp_path / "upload" / "notes.txt").write_text("a file beside it: the folder is the submission")
    assert graded_files(tmp_path / "upload", ["vector_add"], ROOT) == {}


def test_scratch_a_student_left_at_a_notebooks_top_level_costs_nothing_and_is_told_in_the_notes(tmp_path):
    """A notebook tried out as notebooks are: a plotting import and `import time` beside the others,
    a cell printing a `%timeit -o` result (its magic left out, so `t` is never bound), IPython's
    `display`, a plot, and a try of the kernel after its def in the same cell. Importing the module
    graded used to stop at the first of them (a policy refusal, then a NameError): 0 points for a
    correct exercise. Now the refused imports are left out and the failing statements run guarded,
    each told in the notes at its cell and line; the filled notebook keeps full marks."""
    work = notebook_from_source((ROOT / "solutions" / "vector_add.py").read_text(), "vector_add")
    imports = next(i for i, c in enumerate(work.cells) if "import numpy" in c.source)
    work.cells[imports].source += "\nimport matplotlib.pyplot as plt\nimport time"
    kernel = next(i for i, c in enumerate(work.cells) if "def vector_add(" in c.source)
    work.cells[kernel].source += "\n\nprint(vector_add(np.ones(4, np.float32), np.ones(4, np.float32)))\nplt.plot([1])"
    work.cells.append(nbformat.v4.new_code_cell(
        "a = np.ones(1 << 10, np.float32)\nt = %timeit -o vector_add(a, a)\nprint(t.best)\ndisplay(a)", id="timing"))
    work.cells.append(nbformat.v4.new_code_cell("start = time.perf_counter()\nplt.plot(vector_add(a, a))",
                                                id="plot"))
    folder = submission(tmp_path, "scratch", work)
    results = grade_folder(folder, tmp_path)
    assert results.score == results.max_score > 0, [t.output for t in results.tests if t.output][:1]
    kernel_lines = len(work.cells[kernel].source.splitlines())
    cell = imports + 1
    told = "(as the notebook was imported for grading: that statement was skipped, the rest was graded)"
    not_run = ("not run as the notebook is graded: the tests call the notebook's functions themselves (a try at "
               "import would spend the exercise's time before any test)")
    assert [n for n in results.notes if "IPython" not in n] == [
        f"vector_add.ipynb, cell {cell}, line {len(work.cells[imports].source.splitlines()) - 1}: "
        "`import matplotlib.pyplot as plt` is left out of the module graded (a notebook's top-level code the "
        "grader may not run): imports matplotlib.pyplot",
        f"vector_add.ipynb, cell {cell}, line {len(work.cells[imports].source.splitlines())}: `import time` is left "
        "out of the module graded (a notebook's top-level code the grader may not run): imports time",
        f"vector_add.ipynb, cell {kernel + 1}, lines {kernel_lines - 1}, {kernel_lines}: {not_run}; they call "
        "vector_add and they use plt, which a line left out would have set",
        f"vector_add.ipynb, cell {len(work.cells)}, lines 1, 2: {not_run}; they call vector_add and they use plt, "
        "time, which a line left out would have set",
        f"vector_add.ipynb, cell {len(work.cells) - 1}, line 3: NameError: name 't' is not defined {told}",
        f"vector_add.ipynb, cell {len(work.cells) - 1}, line 4: NameError: name 'display' is not defined {told}",
    ], results.notes


def test_grader_check_of_a_notebook_of_another_name_names_it_and_its_text_says_what_failed(tmp_path, monkeypatch):
    """(audit) grader.check("vector_add", notebook="my_try.ipynb") graded it as vector_add.ipynb and
    said so in every location (the untouched stub's name, beside it); its text form said the score
    alone, with no reason, where a front end shows no HTML."""
    import grader

    unguarded = _solved_with(("    if i < out.size:\n        out[i] = a[i] + b[i]", "    out[i] = a[i] + b[i]"))
    nbformat.write(notebook_from_source(unguarded, "vector_add"), tmp_path / "my_try.ipynb")
    monkeypatch.chdir(ROOT)
    feedback = grader.check("vector_add", stage=1, notebook=tmp_path / "my_try.ipynb")
    failed = [t for t in feedback.results.tests if t.status == "failed"]
    assert failed and all("vector_add.ipynb" not in t.output for t in feedback.results.tests), failed[0].output
    assert "kernel 'add_kernel' at my_try.ipynb, cell 3, line 7" in failed[0].output, failed[0].output
    assert failed[0].finding.file == "my_try.ipynb, cell 3"
    text = repr(feedback)
    assert text.startswith("vector_add: ") and f"{failed[0].name}: kernel 'add_kernel' at my_try.ipynb" in text, text


def test_a_notebooks_notes_come_in_the_order_of_its_cells(tmp_path):
    """(audit) IPython's lines were said for every cell before the top-level scratch's: the notes
    read cell 12, 12, 11, 14, 14, 15, 12."""
    from grader.course.notebooks import read

    cells = ["import numpy as np\n%load_ext autoreload", "def f(n):\n    return n", "x = f(3)\n!ls",
             "%timeit f(2)\ny = f(4)"]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), tmp_path / "ex.ipynb")
    _, notes = read(tmp_path / "ex.ipynb", allowed_imports=frozenset({"numpy"}))
    numbers = [int(re.search(r", cell (\d+)", note).group(1)) for note in notes]
    assert numbers == sorted(numbers) and set(numbers) == {1, 3, 4}, notes
