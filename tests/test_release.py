"""`gpugrade release`: stubs from solutions with nbgrader's region syntax."""

from pathlib import Path

import pytest

from grader.errors import CourseError
from grader.course.release import release, strip_solutions

ROOT = Path(__file__).resolve().parents[1]


def test_solution_region_becomes_a_stub_at_its_indentation():
    src = "def f():\n    x = 1\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert strip_solutions(src) == "def f():\n    x = 1\n    raise NotImplementedError()\n"


def test_hidden_tests_are_dropped():
    src = "a = 1\n### BEGIN HIDDEN TESTS\nassert a\n### END HIDDEN TESTS\nb = 2\n"
    assert strip_solutions(src) == "a = 1\nb = 2\n"


@pytest.mark.parametrize("src, where", [
    ("x\n### BEGIN SOLUTION\ny\n", "f.py:2"),
    ("x\n### END SOLUTION\n", "f.py:2"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "f.py:2"),
    ("### BEGIN SOLUTION\n### END HIDDEN TESTS\n", "f.py:2"),
])
def test_unbalanced_markers_name_file_and_line(src, where):
    with pytest.raises(CourseError, match=where):
        strip_solutions(src, "f.py")


def test_committed_exercises_are_exactly_the_release_of_the_solutions(tmp_path):
    written = release(ROOT / "solutions", tmp_path)
    assert written, "no solutions found"
    for path in written:
        assert path.read_text() == (ROOT / "exercises" / path.name).read_text(), f"run `gpugrade release`: {path.name}"


def test_the_committed_record_of_what_was_released_is_that_of_the_stubs(tmp_path):
    """tests/exercises/released_files.json tells a student's untouched stub from their work
    (grader.course.choice); a stub changed without `gpugrade release` would go unrecognised."""
    from grader.course.choice import RECORD, write_record

    (tmp_path / RECORD).parent.mkdir(parents=True)
    fresh = write_record(tmp_path, release(ROOT / "solutions", tmp_path / "exercises"), [])
    assert fresh.read_text() == (ROOT / RECORD).read_text(), "run `gpugrade release`"


def test_release_is_deterministic(tmp_path):
    first = {p.name: p.read_text() for p in release(ROOT / "solutions", tmp_path / "a")}
    second = {p.name: p.read_text() for p in release(ROOT / "solutions", tmp_path / "b")}
    assert first == second


def test_release_keeps_the_recorded_counters_when_a_reference_loses_points(tmp_path):
    """Students' copies grade performance against tests/exercises/reference_counters.json: a
    release whose reference solutions lose points (a slip in solutions/, a broken machine) leaves
    the committed counters as they were and says which test failed, with a failing exit code."""
    import shutil
    import subprocess
    import sys

    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    solution = course / "solutions" / "vector_add.py"
    solution.write_text(solution.read_text().replace("        out[i] = a[i] + b[i]", "        out[i] = a[i] - b[i]"))
    counters = course / "tests" / "exercises" / "reference_counters.json"
    before = counters.read_text()
    done = subprocess.run([sys.executable, "-m", "grader", "release"], cwd=course, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "reference_counters.json left as it was" in done.stderr and "vector_add::" in done.stderr, done.stderr
    assert counters.read_text() == before
    assert sorted(p.name for p in counters.parent.glob("reference_counters*")) == ["reference_counters.json"]


def _course_copy(tmp_path):
    import shutil

    course = tmp_path / "course"
    for folder in ("solutions", "exercises", "tests/exercises"):
        shutil.copytree(ROOT / folder, course / folder)
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    return course


def _release(course, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "grader", "release", "--no-counters", *args], cwd=course,
                          capture_output=True, text=True, timeout=300)


def test_release_never_overwrites_a_students_work_without_force(tmp_path):
    """Regression: a learner in a clone of the course followed the README's "Working in a
    notebook" (`gpugrade release --notebooks`) and lost an hour of work: their three edited
    exercise files were silently rewritten as stubs. Files the record says were released
    untouched are still replaced; changed ones only with --force."""
    course = _course_copy(tmp_path)
    mine = course / "exercises" / "vector_add.py"
    work = mine.read_text().replace("raise NotImplementedError()", "i = cuda.grid(1)  # my work", 1)
    mine.write_text(work)
    (course / "exercises" / "matmul.ipynb").write_text("{}")  # a notebook of the student's own

    refused = _release(course, "--notebooks")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("would overwrite exercises/matmul.ipynb, exercises/vector_add.py: changed since the course released "
            "them" in refused.stderr), refused.stderr
    assert "--force" in refused.stderr
    assert mine.read_text() == work and not (course / "exercises" / "vector_add.ipynb").exists()

    untouched = _release(course)  # the untouched stubs alone: only the .py files are rewritten
    assert untouched.returncode == 2 and "exercises/matmul.ipynb" not in untouched.stderr, untouched.stderr

    forced = _release(course, "--notebooks", "--force")
    assert forced.returncode == 0, forced.stderr
    assert mine.read_text() == (ROOT / "exercises" / "vector_add.py").read_text()
    again = _release(course, "--notebooks")  # what release wrote is its own: replaced without --force
    assert again.returncode == 0, again.stderr
