"""Exercises as Jupyter notebooks: written from the stubs, read back from a student's submission.

Writing (`gpugrade release --notebooks`): the stub `exercises/<exercise>.py` stays the source of
truth; `exercises/<exercise>.ipynb` is made from it by jupytext, through the **py:percent** format:
the module docstring becomes the first Markdown cell (`# %% [markdown]`) and each top-level block a
code cell (`# %%`): a def or class with its decorators and the comments right above it, and the
statements between two of them (imports, constants). Percent rather than light because its cells
are explicit markers, so the cells we choose are the cells jupytext makes (light guesses them from
blank lines), and it is the cell syntax VS Code, Spyder and PyCharm run as cells too. The output is
a pure function of the stub (cell ids are numbered, not random), so releasing twice changes nothing.

Pairing: the notebook records no jupytext pairing of its own, on purpose. The script paired with a
percent notebook is a percent script (cell markers, the docstring as `#` comments), not the stub
that `release` writes, so a notebook paired with `exercises/<exercise>.py` would have
`jupytext --sync` rewrite the source of truth. An instructor who wants to edit in Jupyter pairs
the notebook with a script of its own, `jupytext --set-formats ipynb,.nb.py:percent
exercises/<exercise>.ipynb` then `jupytext --sync` (the `.nb.py` reads back to the same notebook);
the stub itself is regenerated from `solutions/` by `release`, as always.

Reading (a submission holding `<exercise>.ipynb`): the notebook is the student's, so untrusted: at
most `MAX_NOTEBOOK_BYTES`, parsed by `nbformat.reads` and validated against the notebook schema; the
module is the code cells in order, joined with blank lines, each under a `# %% (cell N)` line so
that a line of the module leads back to its cell; the student's self-check cell (`import grader`,
`grader.check(...)`) is left out. The grader never runs IPython: in a cell that is not Python
because of IPython syntax, each `%magic` or `!shell` line (`x = !ls` too) or help line
(`cuda.grid?`) becomes `pass` (the cell's other lines, and their numbers, unchanged); a `%%cell
magic` cell is left out whole, but for the magics that run the cell's Python (`%%time`,
`%%capture`), whose line alone is; `read` says each, naming the cell, and the results carry it as
a note. Leaving code out can only take from the submission: a `%timeit` a student left in costs
nothing, and a `%run` or `%load` that brought code in shows as what is missing. A cell still not
Python is refused, naming the cell, where it holds a def or class (as a `.py` would be); one that
holds none (a half-written try, `print(f(a, b)`) is left out, with a note: in Jupyter it ran
nothing. The module graded (not the digest that tells an untouched notebook) then has its
top-level scratch guarded, so that a cell trying the exercise (a `display`, a plot, `import time`,
a benchmark of the student's kernel) costs nothing: grader.course.scratch.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ..errors import CourseError, GpugradeError, UsageError
from . import scratch

MAX_NOTEBOOK_BYTES = 5 << 20  # a notebook of the student's, outputs included (5 MiB)
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
# the line above each cell's code in the module graded: a line of the module leads back to its cell
CELL_MARKER = re.compile(r"# %% \(cell (\d+)\)")


class NotebookRefused(GpugradeError):
    """A student's notebook that is not graded: malformed, too large, or not plain Python.
    The message is the student's reason, naming the notebook and, where it applies, the cell."""


class _NotPython(NotebookRefused):
    """A cell that is not Python, IPython's lines aside (refused where it holds a def or class)."""


# -- writing: stub -> notebook -------------------------------------------------------------------

def percent_script(source: str, filename: str = "<exercise>") -> str:
    """`source` (a plain exercise module) as a py:percent script: the docstring a Markdown cell,
    each top-level block a code cell. The code lines are the module's own, unchanged."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise CourseError(f"{filename}:{exc.lineno}: cannot be made a notebook: {exc.msg}") from None
    lines = source.splitlines()
    body = tree.body
    cells: list[str] = []
    docstring = ast.get_docstring(tree, clean=True)
    if docstring is not None:
        cells.append(_markdown_cell(docstring))
        code_start = body[0].end_lineno  # 1-based last line of the docstring
        body = body[1:]
    else:
        code_start = 0
    starts = []  # 0-based first line of each code cell
    for index, node in enumerate(body):
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1
        while first > code_start and lines[first - 1].lstrip().startswith("#"):
            first -= 1  # the comments right above a block belong to it
        starts_a_cell = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        after_a_def = index > 0 and isinstance(body[index - 1], (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                 ast.ClassDef))
        if not starts or starts_a_cell or after_a_def:
            starts.append(first)
    for begin, end in zip(starts, [*starts[1:], len(lines)]):
        text = "\n".join(lines[begin:end]).strip("\n")
        if text:
            cells.append("# %%\n" + text)
    return "\n\n".join(cells) + "\n"


def _markdown_cell(docstring: str) -> str:
    """The docstring as Markdown: its first line a heading; every line unindented (an indented
    paragraph of a docstring would otherwise render as a code block)."""
    first, *rest = docstring.splitlines()
    text = [f"# {first}", *(line.strip() for line in rest)]
    return "# %% [markdown]\n" + "\n".join(f"# {line}" if line else "#" for line in text)


def notebook_from_source(source: str, name: str, filename: str = "<exercise>"):
    """The notebook (an nbformat NotebookNode) of an exercise module's source."""
    import jupytext
    import nbformat

    notebook = jupytext.reads(percent_script(source, filename), fmt="py:percent")
    for number, cell in enumerate(notebook.cells, start=1):
        cell["id"] = f"{name}-{number}"  # deterministic; jupytext's are random
    notebook.metadata.pop("jupytext", None)  # no pairing of its own: see the module docstring
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    notebook.metadata["language_info"] = {"name": "python"}
    nbformat.validate(notebook)
    return notebook


def write_notebooks(exercises: Path, modules: list[Path], asked: bool = True) -> list[Path]:
    """`exercises/<name>.ipynb` for each stub module given; returns the files written. `asked`:
    by --notebooks (else: notebooks an earlier release wrote, kept in step with their stubs)."""
    try:
        import jupytext
    except ImportError:
        if asked:
            raise UsageError("release --notebooks needs jupytext: pip install 'gpugrade[notebooks]'") from None
        names = ", ".join(f"{m.stem}.ipynb" for m in modules)
        raise UsageError(f"exercises/ holds {names} from an earlier release: regenerating it with its stub needs "
                         f"jupytext (pip install 'gpugrade[notebooks]'); or delete it to release without "
                         f"notebooks") from None

    written = []
    for module in modules:
        target = exercises / f"{module.stem}.ipynb"
        notebook = notebook_from_source(module.read_text(), module.stem, str(module))
        jupytext.write(notebook, target, fmt="ipynb")
        written.append(target)
    return written


# -- reading: a student's notebook -> the module graded ------------------------------------------

def module_source(path: Path) -> str:
    """The Python module of a student's notebook, or NotebookRefused with the student's reason."""
    return read(path)[0]


def read(path: Path, allowed_imports: frozenset[str] | None = None) -> tuple[str, list[str]]:
    """(the Python module of a student's notebook, what of its IPython syntax was left out), or
    NotebookRefused with the student's reason. With `allowed_imports` (the module to grade, not the
    notebook's digest), its top-level scratch is guarded too (grader.course.scratch)."""
    name = path.name
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookRefused(f"{name} is {size / 2**20:.1f} MiB, more than the {MAX_NOTEBOOK_BYTES >> 20} MiB a "
                              f"notebook may be (clear its outputs: Edit > Clear Outputs of All Cells)")
    with open(path, "rb") as file:
        data = file.read(MAX_NOTEBOOK_BYTES + 1)  # the file may have grown since stat()
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotebookRefused(f"{name} is more than the {MAX_NOTEBOOK_BYTES >> 20} MiB a notebook may be")
    try:
        import nbformat
    except ImportError:  # the grader's machine, not the student's: say what to install
        raise UsageError("grading a notebook needs nbformat: pip install 'gpugrade[notebooks]'") from None
    try:
        text = data.decode("utf-8")
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise NotebookRefused(f"{name} is not a valid notebook: it is JSON but not an object")
        if raw.get("nbformat") == 4 and raw.get("nbformat_minor", 0) >= 5 and isinstance(raw.get("cells"), list):
            # cell ids where a Jupyter left them out (nbformat 4.5 needs them), rather than nbformat's
            # MissingIDFieldWarning once per notebook between a batch's progress lines
            # (and a copied cell's id made unique, rather than a DuplicateCellId warning for each)
            seen: set = set()
            renamed = 0
            for cell in (c for c in raw["cells"] if isinstance(c, dict)):
                if "id" not in cell or cell["id"] in seen:
                    cell["id"] = f"gpugrade-{renamed}"
                    renamed += 1
                seen.add(cell["id"])
            if renamed:
                text = json.dumps(raw)
        notebook = nbformat.reads(text, as_version=4)
        nbformat.validate(notebook)
    except NotebookRefused:
        raise
    except UnicodeDecodeError:
        raise NotebookRefused(f"{name} is not a notebook: it is not UTF-8 text") from None
    except (json.JSONDecodeError, nbformat.reader.NotJSONError, RecursionError):
        raise NotebookRefused(f"{name} is not a notebook: it is not JSON (save it from Jupyter again)") from None
    except nbformat.ValidationError as exc:
        raise NotebookRefused(f"{name} is not a valid notebook: {_first_line(exc.message)}") from None
    except Exception as exc:  # noqa: BLE001 - nbformat raises more kinds for malformed input; all mean "refused"
        raise NotebookRefused(f"{name} is not a valid notebook: {type(exc).__name__}: {_first_line(str(exc))}"
                              ) from None
    cells, left_out = [], []
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        try:
            source, said = _plain(cell.source, name, number)
        except _NotPython as refused:
            if _DEFINES.search(cell.source):  # a def or class that is not Python: refused, as a .py would be
                raise
            # a leftover half-written line (`print(f(a, b)`): in Jupyter it ran nothing, and here neither
            left_out.append(f"{refused}: the cell is left out of the module graded (it holds no def or class)")
            continue
        left_out += said
        if source is not None and not _self_check(source):
            cells.append((number, source))
    if not cells:
        raise NotebookRefused(f"{name} has no code cell")
    head = ""
    if allowed_imports is not None:  # the module to grade: its top-level scratch guarded
        top = scratch.Scratch.of(name, cells, allowed_imports)
        guarded = []
        for number, source in cells:
            text, said = top.cell(source, number)
            guarded.append((number, text))
            left_out += said
        cells, head = guarded, top.head()
        left_out += top.redefined()
    return head + "\n\n".join(f"# %% (cell {number})\n{source.rstrip()}" for number, source in cells) + "\n", \
        _in_cell_order(left_out)  # (CELL_MARKER above each cell)


# a line that starts a def or class (a cell that is not Python and holds one is refused, not left out)
_DEFINES = re.compile(r"^\s*(?:@|def\s|async\s+def\s|class\s)", re.MULTILINE)
# cell magics that run the cell's own Python (the magic's line is left out, the code graded)
_PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun")


# a line of IPython syntax: a line magic or shell command, alone or assigned (`x = !ls`, `t = %timeit -o f()`)
_IPYTHON_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\s*(?:,\s*[A-Za-z_][\w.]*\s*)*=\s*)?[!%]")
# IPython's help on an object: `cuda.grid?`, `cuda.grid??`, `?cuda.grid`
_HELP_LINE = re.compile(r"^\s*(?:\?{1,2}\s*[A-Za-z_][\w.]*|[A-Za-z_][\w.]*\s*\?{1,2})\s*$")
LEFT_OUT = "left out of the module graded (the grader runs plain Python)"


def _plain(source: str, name: str, number: int) -> tuple[str | None, list[str]]:
    """A cell as plain Python: (its source, or None for a cell magic's cell, left out whole; what was
    left out). Only a cell that is not Python is looked at, so `%` or `!` at the start of a
    continued line or inside a string is never mistaken for a magic; a cell magic that runs the
    cell's Python (`%%time`) has only its line left out; a cell still not Python once its IPython
    lines are `pass` is NotebookRefused with its syntax error."""
    try:
        ast.parse(source)
        return source, []
    except SyntaxError as exc:
        error = exc
    except UnicodeEncodeError:  # a lone surrogate, from a JSON escape: no file can hold it
        raise NotebookRefused(f"{name}, cell {number}: it is not text Python reads (a lone surrogate "
                              f"character)") from None
    lines = source.splitlines()
    at, first = next((k, line.strip()) for k, line in enumerate(lines) if line.strip())
    plain, said = [], []
    if first.startswith("%%"):
        if first.split()[0] not in _PYTHON_CELL_MAGICS:
            return None, [f"{name}, cell {number}: `{_short(first)}` is a cell magic: the cell is {LEFT_OUT}"]
        said.append(f"{name}, cell {number}: `{_short(first)}` is a cell magic that runs the cell's Python: its line "
                    f"is {LEFT_OUT}, the cell's code graded")
        plain, lines = lines[:at] + ["pass  # (IPython, left out)"], lines[at + 1:]
    for line in lines:
        if _IPYTHON_LINE.match(line) or _HELP_LINE.match(line):
            text = line.strip()
            kind = ("IPython's help" if _HELP_LINE.match(line) else
                    "a shell command" if "!" in text.split("%")[0] else "an IPython magic")
            said.append(f"{name}, cell {number}: `{_short(text)}` is {kind}: {LEFT_OUT}")
            line = line[:len(line) - len(line.lstrip())] + "pass  # (IPython, left out)"
        plain.append(line)
    text = "\n".join(plain)
    if said:
        try:
            ast.parse(text)
            return text, said
        except SyntaxError as exc:
            error = exc
    raise _NotPython(f"{name}, cell {number}, line {error.lineno}: SyntaxError: {error.msg}")


def _self_check(source: str) -> bool:
    """The cell is the student's self-check (README: `import grader`, then `grader.check(...)` from
    a cell): it imports the grader, and does nothing else than show or assign what a call through
    that import returns. It is no part of the module graded (the grader never runs inside the
    student's code); a cell that does more (a constant set beside the import) is graded as it is,
    and its import refused by the policy. Leaving code out can only take from the submission."""
    body = ast.parse(source).body
    bound = {alias.asname or alias.name.split(".")[0] for node in body if _imports_grader(node)
             for alias in node.names}
    if not bound:
        return False
    for node in body:
        if _imports_grader(node) or isinstance(node, ast.Expr):
            continue
        if not (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
                and any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(node.value))):
            return False
        bound.update(t.id for t in node.targets)
    return True


def _imports_grader(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(alias.name.split(".")[0] == "grader" for alias in node.names)
    return isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "grader"


def _in_cell_order(notes: list[str]) -> list[str]:
    """Notes in the order of the cells they name (IPython's lines were said for every cell before the
    top-level scratch's: cell 12, 12, 11, 14 ...); a note naming no cell after them, as it came."""
    def cell(note: str) -> int:
        found = _NOTE_CELL.search(note)
        return int(found.group(1)) if found else 1 << 30

    return sorted(notes, key=cell)  # (stable: one cell's notes stay in their order)


_NOTE_CELL = re.compile(r"^[^:]*?, cell (\d+)")


def refusal_module(reason: str, kind: str = "NotebookRefused") -> str:
    """The workspace module that stands for a refused notebook (or file: `kind`, the exception's
    name): importing it raises with the reason, so every test of the exercise fails with it, as
    for a module that does not import."""
    return ("# gpugrade: the submission's file was refused before any of it ran; this module only says why.\n"
            f"class {kind}(Exception):\n    gpugrade_refusal = True  # (no traceback: none of it is the student's)"
            "\n\n\n"
            f"raise {kind}({reason!r})\n")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]
