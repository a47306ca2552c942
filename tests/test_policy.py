"""The static policy check: escape hatches are refused by file and line, honest kernels pass."""

from pathlib import Path

import pytest

from grader.judge.policy import check_source

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.py")), ids=lambda p: p.name)
def test_reference_solutions_pass_the_policy(path):
    assert check_source(path.read_text(), path.name) == []


@pytest.mark.parametrize("source, what", [
    ("import ctypes", "imports ctypes"),
    ("import os.path", "imports os.path"),
    ("from subprocess import run", "imports subprocess"),
    ("import socket", "imports socket"),
    ("import importlib", "imports importlib"),
    ("import gc", "imports gc"),
    ("import inspect", "imports inspect"),
    ("import sys\nsys.modules['numpy'] = None", "imports sys"),
    ("from grader import plugin", "imports grader"),
    ("from . import solutions", "relative import"),
    ("m = __import__('os')", "calls __import__()"),
    ("g = globals()", "calls globals()"),
    ("f = open('/etc/passwd')", "calls open()"),
    ("exec('1')", "calls exec()"),
    ("x = getattr(object, 'x')", "calls getattr()"),
    ("def f():\n    pass\nf.__globals__['x'] = 1", "attribute __globals__"),
    ("object.__subclasses__()", "attribute __subclasses__"),
    ("b = __builtins__", "uses __builtins__"),
])
def test_escape_hatches_are_refused_with_file_and_line(source, what):
    found = check_source("import numpy as np\n" + source, "student.py")
    assert found, source
    assert what in str(found[0]) and f"student.py:{found[0].line}" in str(found[0])
    assert found[0].line >= 2


def test_a_course_can_allow_more_imports():
    assert check_source("import time", "s.py")
    assert not check_source("import time", "s.py", frozenset({"time"}))


def test_an_import_students_reach_for_says_what_to_do_instead():
    [found] = check_source("import numpy as np\nimport time\n", "s.py")
    assert str(found) == ("policy: imports time: the grader times your kernels itself; remove it (to time them "
                          "yourself, use CUDA events in a script of your own, run with `gpugrade run`) (s.py:2)")
    [found] = check_source("from timeit import timeit\n", "s.py")
    assert "the grader times your kernels itself" in str(found)
    [found] = check_source("import matplotlib.pyplot as plt\n", "s.py")
    assert str(found) == ("policy: imports matplotlib.pyplot: graded code may import only cmath, collections, "
                          "dataclasses, enum, functools, itertools, math, numba, numpy, operator, typing, warnings; "
                          "remove it (plots and other tries belong in a script of your own, which imports your "
                          "module: `gpugrade run try.py`) (s.py:1)")
