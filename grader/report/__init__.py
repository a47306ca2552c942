"""Results and how they are shown: the model (`results`), then one module per format: the terminal
(`table`), Gradescope, PrairieLearn, JUnit XML, Markdown and HTML feedback; JSON is the model's own."""

from __future__ import annotations

import json

from . import gradescope, html, junit, markdown, prairielearn, table
from .results import NOT_RUN, ExitCode, Results, Status, TestResult
from .table import first_failure

FORMATS = ("table", "gradescope", "prairielearn", "junit", "markdown", "html", "json")

_RENDER = {
    "table": table.table,
    "gradescope": lambda r: json.dumps(gradescope.gradescope(r), indent=1),
    "prairielearn": lambda r: json.dumps(prairielearn.prairielearn(r), indent=1),
    "junit": junit.junit,
    "markdown": markdown.markdown,
    "html": html.html_page,
    "json": lambda r: json.dumps(r.to_dict(), indent=1),
}


def render(results: Results, fmt: str, verbose: bool = False) -> str:
    """`verbose`: the table with one row per test (the others show every test anyway)."""
    if fmt not in _RENDER:
        raise ValueError(f"unknown format {fmt!r}")
    if fmt == "table":
        return table.table(results, verbose=verbose)
    return _RENDER[fmt](results)


__all__ = ["FORMATS", "NOT_RUN", "ExitCode", "Results", "Status", "TestResult", "first_failure", "render"]
