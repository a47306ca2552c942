"""Gradescope's `autograder.zip`: the course's judge, to grade on Gradescope itself (no GPU: the
simulator), written by `gpugrade release --gradescope ZIP`.

Gradescope unzips it at /autograder/source, runs `setup.sh` once as root when it builds the image,
then `run_autograder` per submission (the files at /autograder/submission) and reads
/autograder/results/results.json. The zip holds the two scripts (gradescope_scripts/), this
grader as a wheel (`dist/`), and under `course/` what the judge reads at grade time: course.toml,
the grading tests with the recorded reference counters and the record of released files, and the
stubs. Never `solutions/` (on the simulator the judge compares with the recorded counters; nothing
needs the reference's code) nor `tests/submissions/` (mutated solutions).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from ..errors import CourseError, UsageError
from .choice import RECORD as RELEASED
from .tree import GRADING_TESTS, Course

SCRIPTS = ("setup.sh", "run_autograder")
COURSE = "course"  # the course's folder inside the zip (/autograder/source/course)
EXERCISES = "exercises.txt"  # the exercises the zip grades, one a line (absent: all of the course's)


def course_files(course: Course) -> list[Path]:
    """The course's files the judge needs at grade time, relative to its root."""
    from ..judge.recorded_reference import RECORD as COUNTERS

    root = course.root
    for needed in (Path("course.toml"), COUNTERS, RELEASED):
        if not (root / needed).is_file():
            raise CourseError(f"{root / needed} is missing: the zip's judge needs it (run gpugrade release first)")
    tests = sorted(p.relative_to(root) for p in (root / GRADING_TESTS).iterdir() if p.is_file()
                   and p.suffix in (".py", ".json"))
    stubs = sorted(p.relative_to(root) for p in (root / "exercises").glob("*") if p.suffix in (".py", ".ipynb"))
    return [Path("course.toml"), *tests, *stubs]


def build_wheel(into: Path) -> Path:
    """This grader as a wheel in `into`, built (pip, PEP 517) from a clean copy of its source tree."""
    import grader

    source = Path(grader.__file__).resolve().parent.parent
    if not (source / "pyproject.toml").is_file():
        raise UsageError(f"no source tree of gpugrade here ({source} has no pyproject.toml) to build the zip's "
                         f"wheel from: install gpugrade from its repository (pip install -e .)")
    with tempfile.TemporaryDirectory(prefix="gpugrade-wheel-") as tmp:
        clean = Path(tmp) / "gpugrade"
        shutil.copytree(source / "grader", clean / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(source / name, clean / name)
        # the files' times fixed (SOURCE_DATE_EPOCH): the same sources make the same wheel, and the same zip
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(into), str(clean)],
                              capture_output=True, text=True, env=os.environ | {"SOURCE_DATE_EPOCH": "1577836800"})
        if done.returncode != 0:
            raise UsageError(f"building gpugrade's wheel failed: {done.stderr.strip()[-1500:]}")
    (wheel,) = into.glob("gpugrade-*.whl")
    return wheel


def write_zip(course: Course, target: Path, exercises: list[str] | None = None) -> list[str]:
    """Write Gradescope's autograder zip of `course` at `target`; returns the names it holds.
    `exercises`: the only ones it grades (EXERCISES, which run_autograder reads; None: all)."""
    scripts = resources.files(__package__) / "gradescope_scripts"
    with tempfile.TemporaryDirectory(prefix="gpugrade-zip-") as tmp:
        wheel = build_wheel(Path(tmp))
        entries = [(f"dist/{wheel.name}", wheel, 0o644)]
        entries += [(name, scripts / name, 0o755) for name in SCRIPTS]
        entries += [(f"{COURSE}/{path.as_posix()}", course.root / path, 0o644) for path in course_files(course)]
        if exercises:
            chosen = Path(tmp) / EXERCISES
            chosen.write_text("".join(f"{name}\n" for name in exercises))
            entries.append((EXERCISES, chosen, 0o644))
        partial = target.with_name(target.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, source, mode in entries:
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, source.read_bytes())
        os.replace(partial, target)
    return [name for name, _, _ in entries]
