"""`gpugrade validate` on a throwaway course: references full marks, stubs zero, known-wrong
submissions lose exactly the tests they list, and any deviation is a named problem."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.course import Course
from grader.course.validate import render, validate

SOLUTION = '''
def double(x):
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION


def triple(x):
    ### BEGIN SOLUTION
    return 3 * x
    ### END SOLUTION
'''

TESTS = '''
import pytest


@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("x", [1, 5])
def test_double(student, x):
    assert student.call("double", x).value == 2 * x


@pytest.mark.stage(2)
@pytest.mark.points(2)
def test_triple(student):
    assert student.call("triple", 4).value == 12
'''

MANIFEST = '''
[exercises.toy]
title = "Toy"
''' + "".join(f'''
[[exercises.toy.stages]]
title = "stage {n}"
function = "{f}"
hints = ["a", "b", "c"]
gpu = {{ baseline = "reference", max_time_ratio = 1.2 }}
''' for n, f in ((1, "double"), (2, "triple")))


def make_course(root: Path, wrong: dict[str, tuple[str, list[str]]]) -> Course:
    from grader.course.release import strip_solutions

    (root / "tests" / "exercises").mkdir(parents=True)
    (root / "tests" / "exercises" / "test_toy.py").write_text(TESTS)
    (root / "solutions").mkdir()
    (root / "solutions" / "toy.py").write_text(SOLUTION)
    (root / "exercises").mkdir()
    (root / "exercises" / "toy.py").write_text(strip_solutions(SOLUTION))
    (root / "course.toml").write_text(MANIFEST)
    for name, (source, failing) in wrong.items():
        folder = root / "tests" / "submissions" / name
        folder.mkdir(parents=True)
        (folder / "toy.py").write_text(textwrap.dedent(source))
        (folder / "expected.json").write_text(json.dumps({"why": name, "failing": failing}))
    return Course(root)


WRONG_TRIPLE = "def double(x):\n    return 2 * x\n\ndef triple(x):\n    return 4 * x\n"


def test_a_consistent_course_validates_and_prints_per_stage_scores(tmp_path):
    course = make_course(tmp_path, {"bad_triple": (WRONG_TRIPLE, ["toy::triple"])})
    v = validate(course, backend="gpu")
    assert v.ok and v.exit_code == 0, v.problems
    text = render(v)
    assert "toy 1" in text and "toy 2" in text and "bad_triple 0 / 0" in text and "validate: ok" in text


def test_an_honest_submission_must_keep_every_point_and_is_listed(tmp_path):
    """A submission expected to fail nothing (an honest way a grader once refused) is reported
    with its score; one that loses a point is a problem."""
    honest = "def double(x):\n    return x + x\n\ndef triple(x):\n    return x + x + x\n"
    v = validate(make_course(tmp_path / "a", {"sums": (honest, [])}), backend="gpu")
    assert v.ok, v.problems
    assert "honest, every point kept: sums 4 / 4" in render(v)
    v = validate(make_course(tmp_path / "b", {"sums": (WRONG_TRIPLE, [])}), backend="gpu")
    assert not v.ok and any("sums" in p for p in v.problems), v.problems


def test_every_deviation_is_a_named_problem(tmp_path):
    course = make_course(tmp_path, {
        "bad_triple": (WRONG_TRIPLE, ["toy::double[1]"]),      # fails other tests than it says
        "empty": ("", ["toy::nope"]),                           # names a test that does not exist
    })
    (tmp_path / "exercises" / "toy.py").write_text(SOLUTION)   # a stub that passes
    (tmp_path / "course.toml").write_text(MANIFEST.split("[[exercises.toy.stages]]")[0]
                                          + "[[exercises.toy.stages]]" + MANIFEST.split("[[exercises.toy.stages]]")[1])
    told = []
    v = validate(course, backend="gpu", progress=told.append)
    assert v.exit_code == 1
    # each grade as it ended (a run stopped at a time limit still says what it found)
    assert sorted(told) == sorted([
        "validate: reference solutions: 4/4", "validate: stubs: 4/4",
        "validate: bad_triple: 2/4 (expected to fail ['toy::double[1]'], failed ['toy::triple'])",
        "validate: empty: 0/4 (expected to fail ['toy::nope'], failed ['toy::double[1]', 'toy::double[5]', "
        "'toy::triple'])"]), told
    problems = "\n".join(v.problems)
    assert "stubs score 4, not 0" in problems
    assert "bad_triple: scored 2, expected 3 (also failed ['toy::triple']; did not fail ['toy::double[1]'])" in problems
    assert "empty: expected.json names tests that do not exist: ['toy::nope']" in problems
    # a test a known-wrong submission lost unexpectedly says why, in the test's words
    lost = next(p for p in v.problems if p.startswith("bad_triple: toy::triple earned 0% of its points, expected 100%"))
    assert lost.split("expected 100%", 1)[1].startswith(": ") and len(lost.split("expected 100%: ", 1)[1]) > 3, lost
    assert "the tests grade stages [1, 2], course.toml declares [1]" in problems


def test_a_known_wrong_submissions_feedback_must_say_what_its_expected_json_says(tmp_path):
    """`says`: phrases a failing test's feedback must hold (a note naming the bug), checked by the
    same grading; a phrase it does not say is a problem naming the test and what it said."""
    from grader.errors import CourseError

    course = make_course(tmp_path, {"bad_triple": (WRONG_TRIPLE, ["toy::triple"])})
    spec = tmp_path / "tests" / "submissions" / "bad_triple" / "expected.json"
    spec.write_text(json.dumps({"failing": ["toy::triple"], "says": {"toy::triple": ["16", "12"]}}))
    v = validate(course, backend="gpu")
    assert v.ok, v.problems
    spec.write_text(json.dumps({"failing": ["toy::triple"], "says": {"toy::triple": ["12", "times four"]}}))
    v = validate(course, backend="gpu")
    assert [p.split(": ", 2)[:2] for p in v.problems] == [["bad_triple", "toy::triple's feedback does not say "
                                                            "'times four'"]], v.problems
    for says in ({"toy::double[1]": ["x"]}, {"toy::triple": "12"}, {"toy::triple": []}):
        spec.write_text(json.dumps({"failing": ["toy::triple"], "says": says}))
        with pytest.raises(CourseError, match="'says'"):
            validate(course, backend="gpu")


def test_cli_validate_exits_non_zero_on_problems(tmp_path):
    course = make_course(tmp_path, {"bad_triple": (WRONG_TRIPLE, [])})
    done = subprocess.run([sys.executable, "-m", "grader", "validate", "--course", str(course.root), "--backend", "sim"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bad_triple: scored 2, expected 4" in done.stdout and "toy 2" in done.stdout
    assert "validate: bad_triple: 2/4 (expected to fail [], failed ['toy::triple'])" in done.stderr


def test_a_mutation_that_no_longer_matches_the_solution_is_a_named_course_error(tmp_path):
    from grader.errors import CourseError
    from grader.course.validate import KnownWrong

    (tmp_path / "tests" / "exercises").mkdir(parents=True)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "ex.py").write_text("def f():\n    return 1\n")
    course = Course(tmp_path)
    ok = KnownWrong("ok", "", set(), [{"file": "ex.py", "old": "return 1", "new": "return 2"}])
    assert (ok.materialize(course, tmp_path / "out") / "ex.py").read_text() == "def f():\n    return 2\n"
    stale = KnownWrong("stale", "", set(), [{"file": "ex.py", "old": "return 3", "new": "return 2"}])
    with pytest.raises(CourseError, match="stale: the mutation of ex.py must match exactly once"):
        stale.materialize(course, tmp_path / "out2")


def test_validate_grades_only_the_named_submissions_and_refuses_an_unknown_name(tmp_path):
    """`gpugrade validate NAME...`: the references, the stubs and those known-wrong submissions
    alone (the one just edited; on a GPU, the ones that matter in the time there is)."""
    from grader.errors import CourseError

    course = make_course(tmp_path, {"bad_triple": (WRONG_TRIPLE, ["toy::triple"]),
                                    "sums": ("def double(x):\n    return x + x\n\ndef triple(x):\n    return x + x + x\n",
                                             [])})
    v = validate(course, backend="sim", only=["sums"])
    assert v.ok, v.problems
    assert [kw.name for kw in v.known_wrong] == ["sums"] and "bad_triple" not in render(v)
    with pytest.raises(CourseError, match=r"no known-wrong submission 'nope' .*there are: bad_triple, sums"):
        validate(course, backend="sim", only=["nope"])
    done = subprocess.run([sys.executable, "-m", "grader", "validate", "bad_triple", "--course", str(course.root),
                           "--backend", "sim"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validate: bad_triple:" in done.stderr and "validate: sums" not in done.stderr
