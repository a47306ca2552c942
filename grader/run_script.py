"""`gpugrade run SCRIPT [ARGS...]`: a student's own numba-cuda script on the simulator, with its
checkers, and what each kernel launch did.

For trying a kernel out at midnight on a laptop: `python script.py` needs a GPU, and numba's own
`NUMBA_ENABLE_CUDASIM=1` runs kernels a thread at a time in Python and finds no race. Here the
script runs as `__main__` in this process (it is the student's own code on the student's own
machine: no sandbox, exactly as `python script.py` would run it) with grader.sim installed: a race,
an out-of-bounds access, a barrier some threads miss, or a kernel that would not compile for a GPU
(each launch is compile-checked, as in grading) stop it with the finding and the source lines
around it; at the end a table of its launches (configuration, executor, coalescing, bank
conflicts, atomics, the modelled time on a GPU preset), the copies' modelled time beside the
kernels', and a note where the script times kernels with the host's clock. Not grading: nothing
here is a score.
"""

from __future__ import annotations

import ast
import linecache
import os
import runpy
import shutil
import sys
import tempfile
import threading
import traceback
import warnings
from pathlib import Path

from . import perf_model
from .report.text import duration

def launch_rows(launches: list[dict], gpu_key: str) -> list[dict]:
    """One row per launch: what the table prints. The ratios are grading's own (perf.totals); a
    launch without requests of a kind has none (None: a blank cell)."""
    from .judge.perf import totals

    g = perf_model.gpu(gpu_key)
    rows = []
    for launch in launches:
        c = totals([launch])
        modelled = perf_model.launch_time(launch, g)
        rows.append({
            "kernel": launch.get("kernel", "?"), "device": int(launch.get("device") or 0),
            "grid": tuple(launch.get("grid") or ()),
            "block": tuple(launch.get("block") or ()), "executor": launch.get("executor", ""),
            "fallback": launch.get("fallback_reason"),
            "sectors_per_request": c["sectors_per_request"] or None,  # 0 only without requests
            "wavefronts_per_shared_request": c["wavefronts_per_shared_request"] or None,
            "atomics": int(c.get("atomics", 0)), "seconds": modelled.seconds, "bound": modelled.bound,
        })
    return rows


def _dims(dims: tuple) -> str:
    """(256, 1, 1) as 256, (16, 16, 1) as 16x16."""
    kept = list(dims)
    while len(kept) > 1 and kept[-1] == 1:
        kept.pop()
    return "x".join(str(d) for d in kept)


MOST_ROWS = 60  # a longer table keeps its first and last rows: a loop of launches is read in a few


_SHAPE = ("kernel", "grid", "block", "executor", "fallback", "bound")  # what one row's launches share
_RANGED = ("sectors_per_request", "wavefronts_per_shared_request", "atomics", "seconds")  # (lowest, highest)


def grouped(rows: list[dict]) -> list[tuple[dict, int]]:
    """Consecutive launches of one kernel in one configuration (a kernel launched in a loop, on one
    GPU or on each in turn, on pieces that differ by an element) as one row and how many they
    were: the row holds their `devices` and each figure's (lowest, highest)."""
    out: list[tuple[dict, int]] = []
    for row in rows:
        if out and all(out[-1][0][k] == row[k] for k in _SHAPE):
            kept, count = out[-1]
            out[-1] = ({**kept, "devices": kept["devices"] | {row["device"]},
                        **{k: _widened(kept[k], row[k]) for k in _RANGED}}, count + 1)
        else:
            out.append(({**row, "devices": {row["device"]}, **{k: (row[k], row[k]) for k in _RANGED}}, 1))
    return out


def _widened(span: tuple, value):
    lo, hi = span
    if value is None:
        return span
    return (value if lo is None else min(lo, value), value if hi is None else max(hi, value))


def _span(span: tuple, unit: str = "", blank_zero: bool = False) -> str:
    """(4.0, 4.67) as 4-4.67; (None, None) blank."""
    lo, hi = span
    if lo is None or (blank_zero and not hi):
        return ""
    text = lambda v: f"{v:.3g}"  # noqa: E731
    return (text(lo) if text(lo) == text(hi) else f"{text(lo)}-{text(hi)}") + unit


def _gpus(devices: set[int]) -> str:
    ordered = sorted(devices)
    if len(ordered) == 1:
        return f"GPU {ordered[0]}"
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"GPUs {ordered[0]}-{ordered[-1]}"
    return "GPUs " + ", ".join(map(str, ordered))


def _table(rows: list[dict], gpu_key: str) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kernel launches (modelled on {gpu_key}, as launched: this size, launch overhead included; "
                        f"x N: N launches in a row of one kernel and configuration, each taking the time shown, "
                        f"lowest-highest where they differ)")
    for name in ("kernel", "blocks / threads", "executor", "sectors / request", "shared passes / request",
                 "atomics", "modelled time", "bound by"):
        table.add_column(name, overflow="fold", no_wrap=name == "kernel")
    several = any(r["device"] for r in rows)
    groups = grouped(rows)
    if len(groups) > MOST_ROWS:
        left_out = len(groups) - MOST_ROWS
        groups = groups[:MOST_ROWS - 10] + [(None, left_out)] + groups[-10:]
    for r, count in groups:
        if r is None:
            table.add_row(f"... {count} more rows", *[""] * 7)
            continue
        executor = r["executor"] + (f" ({r['fallback']})" if r["fallback"] else "")
        name = r["kernel"] + (f" ({_gpus(r['devices'])})" if several else "") + (f" x {count}" if count > 1 else "")
        table.add_row(name,
                      f"{_dims(r['grid'])} / {_dims(r['block'])}", executor, _span(r["sectors_per_request"]),
                      _span(r["wavefronts_per_shared_request"]), _span(r["atomics"], blank_zero=True),
                      _span(tuple(v * 1e6 for v in r["seconds"]), " us"), r["bound"])
    console = Console(file=sys.stdout, width=max(120, Console().width))
    with console.capture() as out:
        console.print(table)
    return out.get()


def time_line(ops: list[dict], truncated: bool, rows: list[dict], gpu_key: str) -> str:
    """Where the GPU's time goes, modelled on the preset: the kernels' (the table's) beside the
    copies' by direction, numba's implicit copies of host arrays included; "" without copies."""
    from .perf_model.timeline import HOST, copy_seconds

    g = perf_model.gpu(gpu_key)
    groups: dict[str, tuple[int, int, float]] = {}  # direction -> copies, bytes, seconds
    for op in ops:
        if op.get("kind") != "copy":
            continue
        src, dst, nbytes = int(op.get("src", HOST)), int(op.get("dst", HOST)), int(op.get("nbytes", 0))
        what = ("host -> GPU" if src == HOST else "GPU -> host" if dst == HOST
                else "GPU -> GPU" if src != dst else "within a GPU")
        copies, moved, seconds = groups.get(what, (0, 0, 0.0))
        groups[what] = (copies + 1, moved + nbytes, seconds + copy_seconds(nbytes, src, dst, g))
    if not groups:
        return ""

    def size(n: int) -> str:
        return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 1024:.3g} KiB" if n >= 1024 else f"{n} bytes"

    kernels = sum(r["seconds"] for r in rows)
    copies = "; ".join(f"{what} {duration(s)} ({n} cop{'y' if n == 1 else 'ies'}, {size(b)})"
                       for what, (n, b, s) in groups.items())
    cut = f" (of the first {len(ops):,} operations)" if truncated else ""
    return (f"time on the GPU, modelled on {gpu_key}{cut}: kernels {duration(kernels)} ({len(rows)} "
            f"launch{'' if len(rows) == 1 else 'es'}); {copies}\n")


_HOST_CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time"}


def host_clock_reads(source: str) -> list[tuple[int, str]]:
    """(line, call) of each read of the host's clock in a script (`time.perf_counter()`,
    `perf_counter()` imported from time, `timeit.timeit(...)`): on the simulator those time the
    simulation, not a GPU."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    from_time = {alias.asname or alias.name: alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module in ("time", "timeit") for alias in node.names}  # local name -> its own
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (
                (f.value.id == "time" and f.attr in _HOST_CLOCKS) or f.value.id == "timeit"):
            found.append((node.lineno, f"{f.value.id}.{f.attr}()"))
        elif isinstance(f, ast.Name) and from_time.get(f.id) in _HOST_CLOCKS | {"timeit", "repeat", "default_timer"}:
            found.append((node.lineno, f"{f.id}()"))
    return sorted(set(found))


def _host_clock_note(script: Path) -> str:
    reads = host_clock_reads(script.read_text(errors="replace"))
    if not reads:
        return ""
    where = ", ".join(f"{script.name}:{line} ({call})" for line, call in reads[:3]) + (" ..." if len(reads) > 3 else "")
    return (f"note: {where} read the host's clock: here that times the simulator running your kernels in "
            f"Python, thousands of times slower than a GPU. Time them with events (start, end = cuda.event(), "
            f"cuda.event(); start.record(); ...; end.record(); end.synchronize(); "
            f"cuda.event_elapsed_time(start, end)): on the simulator they read the model the table shows, "
            f"on a GPU the GPU.\n")


def _around(filename: str | None, line: int | None, context: int = 2, cells=None) -> str:
    """The source lines around a finding, the line itself marked (a notebook's: numbered in their
    cell, `cells` its CellLines)."""
    if not filename or not line:
        return ""
    lines = []
    cell = (cells.where(line) or (None,))[0] if cells is not None else None
    for n in range(max(1, line - context), line + context + 1):
        text = linecache.getline(filename, n)
        where = cells.where(n) if cells is not None else None
        if cells is not None and (where is None or where[0] != cell):
            continue  # (the grader's marker lines, another cell's)
        if text:
            number = f"cell {where[0]}, {where[1]:3}" if where else f"{n:4}"
            lines.append(f"{'>' if n == line else ' '} {number} | {text.rstrip()}")
    return "\n".join(lines)


class _Notebook:
    """A notebook run as a script: the module of its code cells (IPython's lines left out, as
    grading reads it: grader.course.notebooks) in a folder of its own, and what the run prints
    told in the notebook's cells and lines."""

    def __init__(self, path: Path):
        from .course.cell_lines import CellLines
        from .course.notebooks import read

        source, self.notes = read(path)
        self.folder = Path(tempfile.mkdtemp(prefix="gpugrade-run-"))
        self.module = self.folder / f"{path.stem}.py"
        self.module.write_text(source)
        self.cells = CellLines.of(self.module.name, path.name, source)

    def tell(self, text: str) -> str:
        from .course.cell_lines import retell_text

        return retell_text(text.replace(str(self.folder) + os.sep, ""), {self.module.name: self.cells}, self.cells)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def run(script: str, args: list[str], devices: int = 1, seed: int | None = None, gpu_key: str = "",
        summary: bool = True) -> int:
    """Run `script` with `args` as `python script args` would, on the simulator; 0, the script's
    own exit status, or 1 on a finding or an uncaught exception. A notebook (.ipynb) runs its code
    cells in order, and what is said names its cells."""
    path = Path(script)
    if not path.is_file():
        print(f"gpugrade run: no such script: {script}", file=sys.stderr)
        return 2
    notebook = None
    if path.suffix == ".ipynb":  # its code cells, in order, as Jupyter's "Run All" would
        from .course.notebooks import NotebookRefused

        try:
            notebook = _Notebook(path)
        except NotebookRefused as exc:
            print(f"gpugrade run: {exc}", file=sys.stderr)
            return 1
        for note in notebook.notes:
            print(f"note: {note}", file=sys.stderr)
    try:
        return _run(path, notebook, args, devices, seed, gpu_key, summary)
    finally:
        if notebook is not None:
            notebook.close()


INTERRUPTED = 130  # the exit status of a script Ctrl-C stopped, as a shell gives it


def _under(folder: Path):
    """A test of a frame's file name: in `folder` (a script run by a relative path has its own
    frames, and its kernels', named relative to the current folder)."""
    inside = str(folder) + os.sep
    return lambda name: not name.startswith("<") and os.path.abspath(name).startswith(inside)


def _where(frame, folder) -> str:
    """Where the script was, in words: a kernel's line and loop (sim.watch), else the script's own
    innermost line; "" when neither is found. `folder`: `_under`'s test."""
    from .sim.watch import where_running

    kernel = where_running(frame, folder)
    if kernel:
        return f"while a kernel ran, at {kernel}"
    while frame is not None and not folder(frame.f_code.co_filename):
        frame = frame.f_back
    return f"at {os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else ""


class _StillRunning:
    """A kernel still running after `first_s` seconds (an endless loop?) is said, with its line and
    loop, again every `every_s`: `gpugrade run` has no time limit (a script may run long), but a
    student should not stare at a silent terminal."""

    def __init__(self, folder, tell, first_s: float = 30.0, every_s: float = 60.0):
        self.folder, self.tell, self.first_s, self.every_s = folder, tell, first_s, every_s
        self.main = threading.get_ident()
        self.stop = threading.Event()

    def __enter__(self):
        threading.Thread(target=self._watch, name="gpugrade-still-running", daemon=True).start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop.set()
        return False

    def _watch(self) -> None:
        from .sim.watch import where_running

        waited = self.first_s
        while not self.stop.wait(waited):
            waited = self.every_s
            where = where_running(sys._current_frames().get(self.main), self.folder)
            if where:
                print(self.tell(f"gpugrade run: a kernel is still running, at {where} (Ctrl-C stops it)"),
                      file=sys.stderr, flush=True)


def _run(path: Path, notebook: "_Notebook | None", args: list[str], devices: int, seed: int | None, gpu_key: str,
         summary: bool) -> int:
    from . import sim
    from .sim import LaunchRecord
    from .sim.errors import SimError

    tell = notebook.tell if notebook is not None else (lambda text: text)
    script = notebook.module if notebook is not None else path
    gpu_key = gpu_key or perf_model.DEFAULT_GPU
    saved_argv, saved_path, saved_show = sys.argv[:], sys.path[:], warnings.showwarning
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    if notebook is not None:  # (numba's warnings name the module's lines too)
        def show(message, category, filename, lineno, file=None, line=None):
            (file or sys.stderr).write(tell(warnings.formatwarning(message, category, filename, lineno, line)))

        warnings.showwarning = show
    launches: list = []
    ops: list[dict] = []
    truncated = False
    status, found = 0, False
    folder = _under(Path(script).resolve().parent)  # the script's frames and its kernels' are in files there
    try:
        # (each launch's summary only: a loop of large launches must not hold their per-thread tables)
        with sim.installed(devices=devices, seed=seed, gpu_key=gpu_key, compile_check=True) as simulator, \
                sim.trace(keep=LaunchRecord.summary) as records, _StillRunning(folder, tell):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except KeyboardInterrupt as exc:  # Ctrl-C: where it was, not grader's frames
                frame = exc.__traceback__
                while frame is not None and frame.tb_next is not None:
                    frame = frame.tb_next
                where = _where(frame.tb_frame if frame is not None else None, folder)
                print(f"\ngpugrade run: interrupted{tell(f' {where}') if where else ''}", file=sys.stderr)
                status = INTERRUPTED
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except SimError as exc:
                print(f"\ngpugrade run: {tell(str(exc))}", file=sys.stderr)
                excerpt = _around(exc.filename, exc.line, cells=notebook.cells if notebook is not None else None)
                if excerpt:
                    print(excerpt, file=sys.stderr)
                status, found = 1, True
            except Exception:  # the script's own error: its traceback, as Python would print it
                print(tell(traceback.format_exc()), end="", file=sys.stderr)
                status = 1
            launches = list(records)
            ops = list(simulator.streams.log)
            truncated = simulator.streams.truncated
    finally:
        sys.argv, sys.path[:], warnings.showwarning = saved_argv, saved_path, saved_show
    if summary and launches:
        rows = launch_rows(launches, gpu_key)
        print(_table(rows, gpu_key) + time_line(ops, truncated, rows, gpu_key) + tell(_host_clock_note(script)),
              end="")
    elif summary and not found and status != INTERRUPTED:  # (one may have been, and never finished)
        print("no kernel was launched", file=sys.stderr)
    return status

