"""`gpugrade bench`: the times of the performance tests' kernels, as a table and as JSON."""

from __future__ import annotations

from io import StringIO

from rich.console import Console
from rich.table import Table

from .results import Results, Status


def rows(results: Results) -> list[dict]:
    """One row per performance test that timed its kernels."""
    out = []
    for t in results.tests:
        if t.timing:
            out.append({"test": t.name, "exercise": t.exercise, "stage": t.stage, "status": str(t.status),
                        "score": t.score, "max_score": t.max_score, **t.timing})
    return out


def table(results: Results, width: int = 120) -> str:
    console = Console(file=StringIO(), width=width, record=True, force_terminal=False)
    found = rows(results)
    gpu = found[0]["gpu"] if found else "?"
    grid = Table(title=f"{results.submission}: kernel times ({found[0]['source'] if found else 'modelled'} "
                       f"on {gpu}, at full load)")
    for column, justify in (("test", "left"), ("time (us)", "right"), ("reference (us)", "right"),
                            ("x reference", "right"), ("bound", "left"), ("of bandwidth", "right"),
                            ("GB/s", "right"), ("GFLOP/s", "right"), ("points", "right")):
        grid.add_column(column, justify=justify, overflow="fold")
    libraries = any(r.get("library") for r in found)  # measured on a GPU: cuBLAS, CuPy's sum
    if libraries:
        grid.add_column("x library", justify="right")
    models = any(r.get("model") for r in found)  # measured on a GPU: the model's prediction beside
    if models:
        grid.add_column("model: x reference", justify="right")
    for r in found:
        gbs = r["global_bytes"] / r["seconds"] / 1e9 if r["seconds"] else 0.0
        cells = [r["test"], _micros(r["seconds"]), _micros(r["reference_seconds"]),
                 f"{r['ratio']:.2f}", r["bound"], f"{r['bandwidth_fraction']:.0%}", f"{gbs:,.0f}",
                 f"{r['flops'] / r['seconds'] / 1e9:,.0f}" if r.get("flops") and r["seconds"] else "",
                 f"{r['score']:g}/{r['max_score']:g}"]
        if libraries:
            lib = r.get("library") or {}
            cells.append(f"{lib['ratio']:.2f} ({lib['name']})" if "ratio" in lib else "n/a" if lib else "")
        if models:
            cells.append(f"{r['model']['ratio']:.2f} ({r['model']['gpu']})" if r.get("model") else "")
        grid.add_row(*cells)
    console.print(grid)
    untimed = [t for t in results.tests if not t.timing and t.status != Status.PASSED]
    for t in untimed:
        console.print(f"{t.name}: not timed: {(t.output.strip().splitlines() or [''])[0]}")
    return console.export_text()


def _micros(seconds: float) -> str:
    """Microseconds to about three digits, never in scientific notation (1,240, not 1.24e+03)."""
    us = seconds * 1e6
    if us >= 100:
        return f"{us:,.0f}"
    return f"{us:.1f}" if us >= 10 else f"{us:.3g}" if us >= 1e-3 else f"{us:.4f}"
