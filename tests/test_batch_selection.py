"""The exercises a batch folder's assignment is graded on (grader/batch/selection.py), on a real
sqlite store: recorded by the first batch, kept by later ones, all of them for a store made before
selections were recorded."""

import sqlite3
from pathlib import Path

import pytest

from grader.batch.selection import for_batch, graded_on
from grader.batch.store import Key, Store
from grader.course import Course
from grader.errors import UsageError
from grader.report.results import Results, Status, TestResult

ROOT = Path(__file__).resolve().parents[1]
COURSE = Course(ROOT)  # the course's four exercises, in its order: vector_add, matmul, reduction, allreduce


def _graded(store: Store, student: str, assignment: str = "hw") -> None:
    results = Results(submission=student, backend="sim")
    results.tests = [TestResult("vector_add::t", "vector_add", 1, 2, 2, Status.PASSED)]
    store.put(Key(student, assignment, "c1", "g", "c"), results, status="graded")


def _dump(path: Path) -> list:
    with sqlite3.connect(path) as db:
        return [db.execute(f"select * from {table} order by 1").fetchall() for table in ("graded", "selections")]


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.sqlite") as s:
        yield s


def test_the_first_batch_records_its_exercises_and_later_ones_keep_them(store, tmp_path):
    assert graded_on(store, "hw", COURSE.exercises) is None  # a new assignment: nothing chosen yet
    assert for_batch(store, "hw", ["vector_add", "matmul", "vector_add"], COURSE, tmp_path) == ["vector_add", "matmul"]
    assert store.selection("hw") == ["vector_add", "matmul"]
    assert for_batch(store, "hw", [], COURSE, tmp_path) == ["vector_add", "matmul"]  # none named: the recorded
    assert for_batch(store, "hw", ["vector_add", "matmul"], COURSE, tmp_path) == ["vector_add", "matmul"]
    assert for_batch(store, "other", [], COURSE, tmp_path) == COURSE.exercises()  # none named, new: all
    assert graded_on(store, "hw", COURSE.exercises) == ["vector_add", "matmul"]


def test_another_selection_is_refused_saying_what_the_folder_holds_and_stores_nothing(store, tmp_path):
    for_batch(store, "hw", ["vector_add"], COURSE, tmp_path)
    _graded(store, "alice")
    before = _dump(tmp_path / "store.sqlite")
    with pytest.raises(UsageError, match=r"graded on vector_add, not on vector_add, matmul.*another folder"):
        for_batch(store, "hw", ["matmul", "vector_add"], COURSE, tmp_path)
    assert _dump(tmp_path / "store.sqlite") == before


def test_an_unknown_exercise_is_a_usage_error_naming_the_course_s(store, tmp_path):
    with pytest.raises(UsageError, match=r"unknown exercise 'matmull' \(this course has: vector_add, matmul, "
                                         r"reduction, allreduce\)"):
        for_batch(store, "hw", ["matmull"], COURSE, tmp_path)
    assert store.selection("hw") is None


def test_a_store_made_before_selections_were_recorded_is_graded_on_all_exercises(tmp_path):
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        _graded(store, "alice")
    with sqlite3.connect(path) as db:  # the store as the batch made it before this table existed
        db.execute("drop table selections")
    with Store(path) as store:  # opening it adds the table, its rows untouched
        assert [r.key.student_id for r in store.latest("hw")] == ["alice"]
        assert graded_on(store, "hw", COURSE.exercises) == COURSE.exercises()
        with pytest.raises(UsageError, match="graded on vector_add, matmul, reduction, allreduce, not on vector_add"):
            for_batch(store, "hw", ["vector_add"], COURSE, tmp_path)
        assert store.selection("hw") is None  # refused: nothing recorded
        assert for_batch(store, "hw", [], COURSE, tmp_path) == COURSE.exercises()
        assert store.selection("hw") == COURSE.exercises()


def test_a_recorded_exercise_the_course_no_longer_has_is_a_usage_error(store, tmp_path):
    store.record_selection("hw", ["vector_add", "gone"])
    assert store.record_selection("hw", ["matmul"]) == ["vector_add", "gone"]  # the first record stands
    with pytest.raises(UsageError, match=r"graded on vector_add, gone, but this course has no gone"):
        for_batch(store, "hw", [], COURSE, tmp_path)
