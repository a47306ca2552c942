"""The reference solutions' counters shared by the gradings of one run (validate, a batch): each
performance test's reference call runs once, then every grade that finds its record reads it and
starts no reference runner (grader.judge.recorded_reference.SharedReference)."""

import json
import shutil
from pathlib import Path

from grader.course import Course
from grader.grading import grade

ROOT = Path(__file__).resolve().parents[1]


def course_whose_reference_cannot_run(tmp_path: Path) -> Course:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    (course / "solutions" / "vector_add.py").write_text("raise RuntimeError('the reference was run')\n")
    return Course(course)


def perf_tests(results) -> dict:
    return {t.name: t for t in results.tests if t.name == "vector_add::keeps_up_with_the_reference"}


def test_a_grade_reads_the_reference_calls_another_grade_of_the_run_made(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    first = grade(ROOT / "solutions", ["vector_add"], backend="sim", stages=[1], shared_reference=shared)
    assert first.score == first.max_score > 0, [(t.name, t.output) for t in first.tests if t.score < t.max_score]
    records = sorted(shared.glob("*.json"))
    assert records, "the live reference's calls are recorded for the next grades"
    doc = json.loads(records[0].read_text())
    assert doc["key"].startswith("vector_add(") and doc["entry"][0]["counters"], doc

    # the same run's records answer: the broken reference is never started
    broken = course_whose_reference_cannot_run(tmp_path)
    second = grade(ROOT / "solutions", ["vector_add"], backend="sim", stages=[1], course=broken,
                   shared_reference=shared)
    assert second.score == first.score and perf_tests(second)

    # an unreadable record is no answer: the live reference runs (here: fails, and says so)
    for record in records:
        record.write_text("{not json")
    third = grade(ROOT / "solutions", ["vector_add"], backend="sim", stages=[1], course=broken,
                  shared_reference=shared)
    lost = [t for t in perf_tests(third).values() if t.score < t.max_score]
    assert lost and "the reference was run" in lost[0].output, [(t.name, t.output) for t in third.tests]
