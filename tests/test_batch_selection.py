"""The exercises and the deadline a batch folder's assignment is graded on, and which assignment a
batch means (grader/batch/selection.py), on a real sqlite store: recorded by the first batch, kept
by later ones, all exercises for a store made before selections were recorded."""

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from grader.batch.selection import assignment_name, deadline_for_batch, for_batch, graded_on
from grader.batch.store import NOT_RECORDED, Key, Store
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


def test_exercises_a_first_batch_graded_nobody_on_are_replaced_by_the_next_batch_s(store, tmp_path):
    """(audit F5) A first batch that forgot `vector_add`, killed before its first grade (or whose
    fetches all failed): the folder was 'all exercises' for good, the corrected batch refused."""
    assert for_batch(store, "hw", [], COURSE, tmp_path) == COURSE.exercises()
    store.put(Key("bob", "hw", "", "g", "c"), None, status="error", reason="repository not found")  # no grade
    said = []
    assert for_batch(store, "hw", ["vector_add"], COURSE, tmp_path, said.append) == ["vector_add"]
    assert store.selection("hw") == ["vector_add"] and said == [
        f"{tmp_path} is graded on vector_add now, not on vector_add, matmul, reduction, allreduce as its first batch "
        f"chose: that batch stored no grade"]
    _graded(store, "alice")  # now the folder's exercises are fixed
    with pytest.raises(UsageError, match=r"graded on vector_add, not on matmul"):
        for_batch(store, "hw", ["matmul"], COURSE, tmp_path, said.append)
    assert store.selection("hw") == ["vector_add"] and len(said) == 1


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


DEADLINE = datetime(2026, 1, 15, 23, 59, tzinfo=timezone.utc)


def test_the_first_batch_records_its_deadline_and_later_ones_choose_by_it(store, tmp_path):
    assert store.deadline("hw") is NOT_RECORDED
    assert deadline_for_batch(store, "hw", DEADLINE, tmp_path, new=True) == DEADLINE
    # a regrade without --deadline chooses as the first batch did, never the latest (late) commit
    assert deadline_for_batch(store, "hw", None, tmp_path, new=False) == DEADLINE
    same_instant = DEADLINE.astimezone(timezone(timedelta(hours=1)))  # 2026-01-16T00:59+01:00
    assert deadline_for_batch(store, "hw", same_instant, tmp_path, new=False) == DEADLINE
    _graded(store, "alice")  # (a grade stored on it fixes it)
    with pytest.raises(UsageError, match=r"on the last commits at or before 2026-01-15T23:59:00\+00:00 .*not by "
                                         r"--deadline 2026-01-20.*extension in a deadline column of the roster"):
        deadline_for_batch(store, "hw", DEADLINE + timedelta(days=5), tmp_path, new=False)
    assert store.deadline("hw") == DEADLINE  # refused: the record stands


def test_a_folder_graded_on_the_latest_commits_refuses_a_deadline_later(store, tmp_path):
    assert deadline_for_batch(store, "hw", None, tmp_path, new=True) is None
    assert store.deadline("hw") is None  # recorded: no deadline
    assert deadline_for_batch(store, "hw", None, tmp_path, new=False) is None
    _graded(store, "alice")
    with pytest.raises(UsageError, match=r"on each student's latest commit \(its first batch had no --deadline\)"):
        deadline_for_batch(store, "hw", DEADLINE, tmp_path, new=False)


def test_a_deadline_a_first_batch_graded_nobody_by_is_replaced_by_the_next_batch_s(store, tmp_path):
    """(audit F5, as for the exercises) A first batch with a typo'd --deadline, killed before its first
    grade, fixed the folder's deadline: the corrected one was refused."""
    typo, said = DEADLINE + timedelta(days=365), []
    assert deadline_for_batch(store, "hw", typo, tmp_path, new=True, on_notice=said.append) == typo
    assert deadline_for_batch(store, "hw", DEADLINE, tmp_path, new=False, on_notice=said.append) == DEADLINE
    assert store.deadline("hw") == DEADLINE and said == [
        f"{tmp_path} chooses commits by the deadline 2026-01-15T23:59:00+00:00 now, not by 2027-01-15T23:59:00+00:00 "
        f"as its first batch chose: that batch stored no grade"]
    _graded(store, "alice")
    with pytest.raises(UsageError, match="keeps its deadline"):
        deadline_for_batch(store, "hw", typo, tmp_path, new=False, on_notice=said.append)
    assert store.deadline("hw") == DEADLINE and len(said) == 1


def test_an_assignment_graded_before_deadlines_were_recorded_takes_the_one_given(store, tmp_path):
    _graded(store, "alice")
    assert deadline_for_batch(store, "hw", None, tmp_path, new=False) is None
    assert store.deadline("hw") is NOT_RECORDED  # nothing says it had none: not recorded
    assert deadline_for_batch(store, "hw", DEADLINE, tmp_path, new=False) == DEADLINE
    assert store.deadline("hw") == DEADLINE


def test_the_assignment_a_batch_means_without_assignment(store, tmp_path):
    assert assignment_name(store, "hw3", "roster", tmp_path) == "hw3"  # a new folder: its name
    _graded(store, "alice", "roster")  # a folder batched before, named after its roster
    assert assignment_name(store, "hw3", "other-roster", tmp_path) == "roster"  # the only one it holds
    _graded(store, "alice", "hw3")
    assert assignment_name(store, "hw3", "roster", tmp_path) == "hw3"
    assert assignment_name(store, "hw4", "roster", tmp_path) == "roster"
    with pytest.raises(UsageError, match=r"holds 2 assignments \(hw3, roster\): name one with --assignment"):
        assignment_name(store, "hw4", "class", tmp_path)
