"""A notebook's top-level scratch (grader.course.scratch): not run where it tries the notebook's own
functions, left out where the policy refuses it, guarded where it could fail, and every other line
of the cell where it was, so that the grade's messages still name the student's cell and line
(grader.course.cell_lines)."""

import ast

from grader.course.cell_lines import CellLines
from grader.course.scratch import INSERTED, PROLOGUE, Scratch
from grader.judge.policy import DEFAULT_ALLOWED_IMPORTS

CELL = '''import numpy as np
import time
TPB = (16, 16)

@cuda.jit
def k(a):
    a[0] = 1
a = np.ones(4)
t0 = np.float32("x"); print(t0)
NOTE = """two
lines"""
# a comment
display(a)
'''


def scratch(*cells: str) -> Scratch:
    return Scratch.of("ex.ipynb", list(enumerate(cells, start=1)), DEFAULT_ALLOWED_IMPORTS)


def guarded(source: str = CELL, *others: str) -> tuple[str, list[str], bool]:
    top = scratch(source, *others)
    text, notes = top.cell(source, 3)
    return text, notes, top.guarded


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
                     "top-level code the grader may not run): imports time"]


def test_defs_imports_and_constants_stay_at_the_top_level_each_statement_that_could_fail_runs_guarded():
    text, _, _ = guarded()
    lines = text.splitlines()
    for plain in ("import numpy as np", "TPB = (16, 16)", "@cuda.jit", "def k(a):", 'NOTE = """two', "lines\"\"\""):
        assert plain in lines, plain
    for inside in ("a = np.ones(4)", 't0 = np.float32("x"); print(t0)', "display(a)"):
        assert "    " + inside in lines, inside
    assert lines.count(f"try:  {INSERTED}") == 3  # one a statement: a failing display costs no later line


def test_the_lines_inside_a_string_of_several_lines_are_never_indented():
    text, _, any_guarded = guarded('print(f"""a {1}\nb""")\n')
    assert any_guarded and '    print(f"""a {1}\nb""")' in text
    assert ast.literal_eval(text.split("print(")[1].split(")")[0].replace("f", "", 1).replace("{1}", "1")) == "a 1\nb"


def test_a_try_of_the_notebooks_own_functions_is_not_run_nor_what_uses_its_result():
    """A benchmark of the student's kernel on 2^25 elements, or a try of a stage whose loop never
    ends, spent the exercise's time at import (0/25 after 720 s): such lines are not run."""
    kernel = "@cuda.jit\ndef add_kernel(a):\n    a[0] += 1\n\ndef vector_add(a, b):\n    return a + b\n"
    tries = ("x = np.ones(8)\nout = vector_add(x, x)\nprint(out[:4])\nfor _ in range(20):\n    vector_add(x, x)\n"
             "add_kernel[1, 32](x)\ny = x + 1\n")
    top = scratch(kernel, tries)
    text, notes = top.cell(tries, 9)
    assert [line for line in text.splitlines() if "(not run)" in line] == [
        "pass  # (not run)", "pass  # (not run)", "pass  # (not run)", "pass  # (not run)"]
    assert "    x = np.ones(8)" in text and "    y = x + 1" in text  # run, guarded
    assert notes == ["ex.ipynb, cell 9, lines 2, 3, 4, 6: not run as the notebook is graded: the tests call the "
                     "notebook's functions themselves (a try at import would spend the exercise's time before any "
                     "test); they call add_kernel, vector_add and they use out, which a line left out would have set"]


def test_a_constant_a_def_reads_runs_though_a_function_of_the_notebooks_makes_it():
    """`THREADS_PER_BLOCK = round_to_warp(250)` or `GRID = grid_blocks()` binds what the graded
    functions read: left out, a correct notebook scored 0/25 (NameError in every test), where the
    same code as a .py scored 25/25. It runs, guarded; a try whose result no def reads does not."""
    helpers = ("def round_to_warp(n):\n    return (n + 31) // 32 * 32\n\ndef grid_blocks():\n    return 8\n\n"
               "def vector_add(a, b):\n    return add_kernel[GRID, THREADS_PER_BLOCK](a, b)\n")
    top_level = "THREADS_PER_BLOCK = round_to_warp(250)\nGRID = grid_blocks()\nout = vector_add(1, 2)\n"
    text, notes = scratch(helpers, top_level).cell(top_level, 2)
    assert "    THREADS_PER_BLOCK = round_to_warp(250)" in text and "    GRID = grid_blocks()" in text, text
    assert [line for line in text.splitlines() if "(not run)" in line] == ["pass  # (not run)"]
    assert len(notes) == 1 and "line 3: not run" in notes[0] and "they call vector_add" in notes[0], notes
    namespace = {}
    exec(compile(PROLOGUE + "\n" + helpers + "\n" + text, "nb", "exec"), namespace)
    assert namespace["THREADS_PER_BLOCK"] == 256 and namespace["GRID"] == 8
    # a try binding a name a function only has as a local of its own is still a try: not run
    local = "def vector_add(a, b):\n    out = a + b\n    return out\n"
    tries = "out = vector_add(1, 2)\nprint(out)\n"
    text, _ = scratch(local, tries).cell(tries, 2)
    assert [line for line in text.splitlines() if "(not run)" in line] == ["pass  # (not run)"] * 2, text


def test_a_refused_import_a_function_uses_is_kept_for_the_policy_to_name():
    source = "import time\n"
    user = "def host():\n    return time.time()\n"
    text, notes = scratch(source, user).cell(source, 1)
    assert (text, notes) == ("import time", [])


def test_a_refused_statement_inside_a_def_is_graded_code_and_left_to_the_policy():
    source = "def host():\n    import time\n    return time.time()\n"
    assert guarded(source) == (source.rstrip("\n"), [], False)


def test_a_cell_of_definitions_is_unchanged():
    source = "from numba import cuda\nN = 1 << 10\n\n@cuda.jit\ndef k(a):\n    a[0] = N\n"
    text, notes, any_guarded = guarded(source)
    assert (text, notes) == (source.rstrip("\n"), [])
    assert not any_guarded


def test_future_imports_move_to_the_top():
    source = "from __future__ import annotations\nimport numpy as np\nprint(np.pi)\n"
    top = scratch(source)
    text, _ = top.cell(source, 1)
    assert text.splitlines()[0] == "pass  # (moved to the top)"
    assert top.head() == f"from __future__ import annotations  {INSERTED}\n{PROLOGUE}\n"
    ast.parse(top.head() + "\n# %% (cell 1)\n" + text)


def test_a_function_defined_in_two_cells_is_said_to_be_graded_as_the_last():
    cells = [(3, "def f():\n    pass\n"), (9, "def f():\n    return 1\n")]
    top = Scratch.of("ex.ipynb", cells, DEFAULT_ALLOWED_IMPORTS)
    assert top.redefined() == [
        "ex.ipynb: f is defined in cells 3 and 9: the last is graded, as when the notebook runs from top to bottom"]


def test_cell_lines_skip_the_lines_the_grader_wrote():
    text, _, _ = guarded()
    module = f"{PROLOGUE}\n\n# %% (cell 3)\n{text}\n\n# %% (cell 4)\nx = 1\n"
    cells = CellLines.of("ex.py", "ex.ipynb", module)
    lines = module.splitlines()
    display = lines.index("    display(a)") + 1
    assert cells.where(display) == (3, 13)
    assert cells.where(lines.index('    t0 = np.float32("x"); print(t0)') + 1) == (3, 9)
    assert cells.where(lines.index(f"try:  {INSERTED}") + 1) is None
    assert cells.where(lines.index("x = 1") + 1) == (4, 1)
    assert cells.where(1) is None  # the prologue


def test_the_judge_hears_what_a_notebooks_scratch_raised_and_nothing_from_a_py(tmp_path):
    """The runner reads the module's list of what its guarded scratch raised; the judge takes it
    only from a notebook's module (the grader's prologue at its top), never a `.py` that defines
    the list itself to put words of its own among the results' notes."""
    from grader.judge import Student
    from grader.sandbox import Limits, ProcessSandbox

    cell, _, _ = guarded("def f():\n    return 2\nprint(undefined_name)\ng = lambda: undefined_name\nprint(g())\n")
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
    told = "(as the notebook was imported for grading: that statement was skipped, the rest was graded)"
    assert notes == {"nb": [f"nb.py:7: NameError: name 'undefined_name' is not defined {told}",
                            f"nb.py:15 (in <lambda>, nb.py:11): NameError: name 'undefined_name' is not defined "
                            f"{told}"],
                     "forged": []}


def test_a_name_error_of_a_name_a_left_out_statement_sets_says_where():
    """`import os` left out (the policy), `TPB = int(os.environ[...])` not run: every test failed
    with a bare NameError of TPB, the cause two notes above it. The module names where each name
    left unset is set, and the runner's NameError says it."""
    from grader.runner.serve import _left_out_line

    cells = ["import os\nTPB = int(os.environ.get('TPB', 256))\n", "def blocks(n):\n    return n // TPB\n"]
    top = scratch(*cells)
    texts = [top.cell(source, number)[0] for number, source in enumerate(cells, start=1)]
    namespace = {}
    exec(compile(top.head() + "\n".join(texts), "nb", "exec"), namespace)
    assert namespace["_gpugrade_unset"] == {"TPB": "cell 1: `TPB = int(os.environ.get('TPB', 256))`",
                                            "os": "cell 1: `import os`"}
    try:
        namespace["blocks"](1024)
    except NameError as exc:
        said = _left_out_line(exc)
    assert said.startswith(" (the notebook sets it at cell 1: `TPB = int(os.environ.get('TPB', 256))`, a top-level "
                           "statement left out or not run"), said
    assert "line" not in said.split("`")[0]  # (no `line N` for the report to read as one of the module's)
