"""`gpugrade check --hints`: one more hint of the first failing stage per run, remembered in
.gpugrade/hints.json in the student's course folder."""

import json

from grader.course import hints
from grader.course.manifest import GpuThreshold, Manifest, Exercise, Stage
from grader.report.results import Results
from grader.report.results import TestResult as Outcome


def stage(exercise, number):
    return Stage(exercise, number, f"stage {number}", f"f{number}", (f"{exercise}{number}a", f"{exercise}{number}b",
                 f"{exercise}{number}c"), (), GpuThreshold("reference", 1.2))


MANIFEST = Manifest("c", {e: Exercise(e, e, (stage(e, 1), stage(e, 2))) for e in ("ex", "other")})


def results(*failing):
    r = Results("s", "sim")
    for exercise in ("ex", "other"):
        for st in (1, 2):
            status = "failed" if (exercise, st) in failing else "passed"
            r.tests.append(Outcome(f"{exercise}::t{st}", exercise, st, 1, float(status == "passed"), status))
    return r


def test_first_failing_stage_in_exercise_then_stage_order():
    assert hints.first_failing_stage(results(("other", 1), ("ex", 2)), MANIFEST).key == "ex:2"
    assert hints.first_failing_stage(results(), MANIFEST) is None


def test_each_run_reveals_one_more_hint_and_remembers_it(tmp_path):
    s = MANIFEST.stage("ex", 2)
    shown = []
    for _ in range(4):
        state = hints.HintState.load(tmp_path)
        shown.append(hints.reveal(s, state))
        state.save()
    assert shown == [[(1, "ex2a")], [(2, "ex2b")], [(3, "ex2c")], [(3, "ex2c")]]
    assert json.loads((tmp_path / ".gpugrade" / "hints.json").read_text()) == {"seen": {"ex:2": [1, 2, 3]}}


def test_an_older_state_file_counting_hints_still_reads(tmp_path):
    (tmp_path / ".gpugrade").mkdir()
    (tmp_path / ".gpugrade" / "hints.json").write_text('{"seen": {"ex:2": 2}}')
    assert hints.reveal(MANIFEST.stage("ex", 2), hints.HintState.load(tmp_path)) == [(3, "ex2c")]


def test_the_hint_that_answers_the_current_failure_comes_first(tmp_path):
    from grader.course.manifest import parse as parse_data, tomllib

    def parse(text):
        return parse_data(tomllib.loads(text))
    from grader.report.results import Results, Status, TestResult
    from grader.wire import Finding

    course = parse('[exercises.ex]\ntitle = "Ex"\n[[exercises.ex.stages]]\ntitle = "S"\nfunction = "f"\n'
                   'hints = ["gentle", {text = "a barrier between the loads and the reads", kinds = ["races"]}, '
                   '{text = "guard with if i < n", kinds = ["bounds"]}]\n'
                   'gpu = { baseline = "reference", max_time_ratio = 1.2 }\n')
    stage = course.stage("ex", 1)
    race = Finding.parse({"check": "races", "type": "RaceError", "message": "data race on shared array 'sA'"})
    results = Results("s", "sim", tests=[
        TestResult("ex::a", "ex", 1, 1, 0, Status.FAILED, "data race on shared array 'sA'", finding=race)])
    kind = hints.failure_kind(results, stage)
    state = hints.HintState.load(tmp_path)
    assert kind == "races" and hints.reveal(stage, state, kind=kind) == [(2, "a barrier between the loads and the reads")]
    text = hints.render(stage, [(2, "a barrier between the loads and the reads")], state, kind)
    assert "about your failure: races" in text and "--hints for the next one" in text
    assert hints.reveal(stage, state, kind=kind) == [(1, "gentle")]  # then the others, in order
    oob = Results("s", "sim", tests=[TestResult("ex::a", "ex", 1, 1, 0, Status.FAILED, "out-of-bounds access to 'a'")])
    assert hints.failure_kind(oob, stage) == "bounds"


def test_all_shows_every_hint_and_a_damaged_state_file_is_ignored(tmp_path):
    (tmp_path / ".gpugrade").mkdir()
    (tmp_path / ".gpugrade" / "hints.json").write_text("{not json")
    state = hints.HintState.load(tmp_path)
    s = MANIFEST.stage("ex", 1)
    assert hints.reveal(s, state, everything=True) == [(1, "ex1a"), (2, "ex1b"), (3, "ex1c")]
    text = hints.render(s, [(1, "ex1a")])
    assert "hint 1/3: ex1a" in text and "--hints for the next one" in text


def _course_hint(tmp_path, exercise: str, number: int, test: str, message: str) -> tuple[str, str]:
    """(the failure kind, the hint shown first) for a failed test of the course's own stage."""
    from pathlib import Path

    from grader.course.manifest import load
    from grader.report.results import Status, TestResult

    stage = load(Path(__file__).parent.parent / "course.toml").stage(exercise, number)
    results = Results("s", "sim", tests=[TestResult(test, exercise, number, 2, 0, Status.FAILED, message)])
    kind = hints.failure_kind(results, stage)
    [(_, text)] = hints.reveal(stage, hints.HintState.load(tmp_path), kind=kind)
    return kind, text


def test_extra_coalesced_accesses_get_the_register_accumulator_hint_not_the_uncoalesced_one(tmp_path):
    """The course's naive matmul stage: a coalescing average missed through extra accesses (the
    judge's message, judge.hotspots) is kind extra_accesses, and its hint comes first."""
    kind, text = _course_hint(tmp_path, "matmul", 1, "matmul::naive_is_coalesced", (
        "global memory sectors per warp request (coalescing): 3.00312 against the reference's 2.01242 "
        "(at most 2.51553 allowed), not from uncoalesced access but from extra global memory accesses, each coalesced, "
        "at line 79 (load, store)"))
    assert kind == "extra_accesses" and "in a local variable (a register)" in text, (kind, text)


def test_float64_tiles_get_the_float32_hint_not_the_bank_conflict_one(tmp_path):
    """A float64 tile misses the shared-passes criterion (labelled "bank conflicts" in course.toml),
    but the feedback names 8-byte words: kind float64, and the course's float32 hint comes first."""
    kind, text = _course_hint(tmp_path, "matmul", 2, "matmul::tiled_reuses_shared_memory", (
        "shared memory passes per warp request (bank conflicts): 1.52941 against the reference's 1 (at most "
        "1.25 allowed), worst at line 124 (store)\n\nwhere:\n  - 8-byte words in shared memory at line 124 "
        "of kernel 'matmul_tiled_kernel' (store): 2.0 wavefronts per request, no bank conflict"))
    assert kind == "float64" and "not np.float64" in text, (kind, text)
