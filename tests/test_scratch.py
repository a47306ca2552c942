"""A notebook's top-level scratch (grader.course.scratch): left out where the policy refuses it,
guarded where it could fail, and every other line of the cell where it was, so that the grade's
messages still name the student's cell and line (grader.course.cell_lines)."""

import ast

from grader.course.cell_lines import CellLines
from grader.course.scratch import INSERTED, PROLOGUE, guard
from grader.judge.policy import DEFAULT_ALLOWED_IMPORTS

CELL = '''import numpy as np
import time
TPB = (16, 16)

@cuda.jit
def k(a):
    a[0] = 1
a = np.ones(4)
t0 = time.perf_counter(); print(t0)
NOTE = """two
lines"""
# a comment
display(a)
'''


def guarded(source: str = CELL) -> tuple[str, list[str], bool]:
    return guard(source, "ex.ipynb", 3, DEFAULT_ALLOWED_IMPORTS)


def student_lines(text: str) -> list[str]:
    """The module's lines but the grader's, stripped: the cell's own, in order."""
    return [line.strip() for line in text.splitlines() if not line.endswith(INSERTED)]


def test_every_line_of_the_cell_keeps_its_place_among_the_cells_own():
    text, notes, any_guarded = guarded()
    ast.parse(PROLOGUE + "\n" + text)
    assert any_guarded
    kept = student_lines(text)
    expected = [line.strip() for line in CELL.splitlines()]
    expected[1] = "pass  # (left out)"  # import time
    assert kept == expected
    assert notes == ["ex.ipynb, cell 3, line 2: `import time` is left out of the module graded (a notebook's "
                     "top-level code the grader may not run): imports time: the grader times your kernels itself; "
                     "remove it (to time them yourself, use CUDA events in a script of your own, run with "
                     "`gpugrade run`)"]


def test_defs_imports_and_constants_stay_at_the_top_level_what_could_fail_runs_guarded():
    text, _, _ = guarded()
    lines = text.splitlines()
    for plain in ("import numpy as np", "TPB = (16, 16)", "@cuda.jit", "def k(a):", 'NOTE = """two', "lines\"\"\""):
        assert plain in lines, plain
    for inside in ("a = np.ones(4)", "t0 = time.perf_counter(); print(t0)", "display(a)"):
        assert "    " + inside in lines, inside
    assert lines.count(f"try:  {INSERTED}") == 2  # the string of two lines is not indented: it splits the run


def test_a_string_of_several_lines_is_never_indented():
    text, _, any_guarded = guarded('print("""a\nb""")\n')
    assert text == 'print("""a\nb""")' and not any_guarded


def test_a_refused_statement_inside_a_def_is_graded_code_and_left_to_the_policy():
    source = "def host():\n    import time\n    return time.time()\n"
    assert guarded(source) == (source.rstrip("\n"), [], False)


def test_a_cell_of_definitions_is_unchanged():
    source = "from numba import cuda\nN = 1 << 10\n\n@cuda.jit\ndef k(a):\n    a[0] = N\n"
    text, notes, any_guarded = guarded(source)
    assert (text, notes) == (source.rstrip("\n"), [])
    assert not any_guarded


def test_cell_lines_skip_the_lines_the_grader_wrote():
    text, _, _ = guarded()
    module = f"{PROLOGUE}\n\n# %% (cell 3)\n{text}\n\n# %% (cell 4)\nx = 1\n"
    cells = CellLines.of("ex.py", "ex.ipynb", module)
    lines = module.splitlines()
    display = lines.index("    display(a)") + 1
    assert cells.where(display) == (3, 13)
    assert cells.where(lines.index("    t0 = time.perf_counter(); print(t0)") + 1) == (3, 9)
    assert cells.where(lines.index(f"try:  {INSERTED}") + 1) is None
    assert cells.where(lines.index("x = 1") + 1) == (4, 1)
    assert cells.where(1) is None  # the prologue


def test_the_judge_hears_what_a_notebooks_scratch_raised_and_nothing_from_a_py(tmp_path):
    """The runner reads the module's list of what its guarded scratch raised; the judge takes it
    only from a notebook's module (its first line the grader's), never a `.py` that defines the
    list itself to put words of its own among the results' notes."""
    from grader.judge import Student
    from grader.sandbox import Limits, ProcessSandbox

    cell, _, _ = guarded("def f():\n    return 2\nprint(undefined_name)\n")
    (tmp_path / "nb.py").write_text(f"{PROLOGUE}\n\n# %% (cell 1)\n{cell}\n")
    (tmp_path / "forged.py").write_text("_gpugrade_failed = [ValueError('full marks, said the instructor')]\n"
                                        "def f():\n    return 2\n")
    notes = {}
    for name in ("nb", "forged"):
        student = Student(name, str(tmp_path), "gpu", ProcessSandbox(Limits(call_timeout_s=60)))
        try:
            assert student.call("f").value == 2
            notes[name] = student.import_notes
        finally:
            student.close()
    assert notes == {"nb": ["nb.py:7: NameError: name 'undefined_name' is not defined (as the notebook was imported "
                            "for grading: the cell's lines after it were skipped, the rest was graded)"],
                     "forged": []}
