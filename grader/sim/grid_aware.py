"""Whether a kernel reads the size of its grid (`cuda.gridsize`, `cuda.gridDim`): a grid-stride
loop, whose grid is chosen for the machine and stays the same whatever the problem's size. The
performance model keeps such a grid's occupancy at full load (grader/perf_model), where it scales
a grid sized to the data: on an H200, grid-stride kernels on 16 and 32 blocks streamed at 125 and
228 GB/s, not the 4,800 GB/s of a full GPU. A device function that reads it is not looked into."""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import lru_cache

GRID_SIZE_NAMES = frozenset({"gridsize", "gridDim"})


def reads_grid_size(py_func) -> bool:
    return _reads(py_func.__code__)


@lru_cache(maxsize=256)  # (per code object: a kernel launched again is not parsed again)
def _reads(code) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):  # no source to read (a kernel made from a string)
        return False
    return any(isinstance(node, ast.Attribute) and node.attr in GRID_SIZE_NAMES
               or isinstance(node, ast.Name) and node.id in GRID_SIZE_NAMES for node in ast.walk(tree))
