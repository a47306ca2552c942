"""`gpugrade grade` and `gpugrade check` driven as a user would: real processes, real files."""

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from gradescope_schema import RESULTS

ROOT = Path(__file__).resolve().parents[1]
GPUGRADE = [sys.executable, "-m", "grader"]


def known_wrong(name: str, dest: Path) -> Path:
    """A known-wrong submission of the course, written out as the folder a student would submit."""
    from grader.course import Course
    from grader.course.validate import load_known_wrong

    course = Course(ROOT)
    spec = next(kw for kw in load_known_wrong(course) if kw.name == name)
    return spec.materialize(course, dest / name)


def gpugrade(*args, cwd=ROOT, timeout=600):
    return subprocess.run([*GPUGRADE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def grade_json(submission, *extra, tmp_path):
    out = tmp_path / f"{Path(submission).name}.json"
    done = gpugrade("grade", str(submission), *extra, "--backend", "sim", "--format", "gradescope",
                    "--output", str(out))
    assert done.returncode in (0, 1), done.stderr + done.stdout
    return done.returncode, json.loads(out.read_text())


# Formats and messages are checked on vector_add; `gpugrade validate` (last test) grades every
# exercise: references, stubs and every known-wrong submission.
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return grade_json(ROOT / "solutions", "vector_add", tmp_path=tmp_path_factory.mktemp("ref"))


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return grade_json(ROOT / "exercises", "vector_add", tmp_path=tmp_path_factory.mktemp("stub"))


def test_reference_solutions_score_full_marks_in_valid_gradescope_json(reference):
    code, doc = reference
    jsonschema.validate(doc, RESULTS)
    assert code == 0
    assert doc["tests"] and all(t["status"] == "passed" for t in doc["tests"]), doc
    assert doc["score"] == sum(t["max_score"] for t in doc["tests"]) > 0


def test_every_test_name_starts_with_its_exercise(reference):
    assert all(t["name"].startswith(t["tags"][0] + "::") for t in reference[1]["tests"])


def test_stubs_score_zero_and_say_in_one_line_what_is_not_implemented(stubs):
    code, doc = stubs
    jsonschema.validate(doc, RESULTS)
    assert code == 1 and doc["score"] == 0
    for t in doc["tests"]:
        assert t["status"] == "failed"
        module = t["name"].split("::")[0] + ".py:"
        one_line = t["output"].startswith((f"not implemented yet ({module}", "needs correctness first"))
        assert one_line and "\n" not in t["output"], t


def test_no_bounds_guard_failure_names_the_out_of_bounds_line(tmp_path):
    _, doc = grade_json(known_wrong("vector_add_no_bounds_guard", tmp_path), "vector_add", tmp_path=tmp_path)
    edge = next(t for t in doc["tests"] if t["name"] == "vector_add::edge_sizes[n=33]")
    first = edge["output"].splitlines()[0]
    assert "out-of-bounds" in first and "vector_add.py:" in first and "thread (33, 0, 0)" in first, first
    assert "grader/" not in edge["output"], "the student sees their own frames, not the grader's"


def test_a_grid_sized_for_the_data_is_told_in_blocks_per_size_and_what_to_launch(tmp_path):
    """A learner who sized the grid-stride launch by n read "the grid must be the same for every
    n; launches used [((1, 1, 1), (256, 1, 1)), ((161, 1, 1), (256, 1, 1))]": what each size
    launched, in blocks and threads, and what to launch instead."""
    from grader.course import Course
    from grader.grading import grade

    (tmp_path / "sized").mkdir()
    source = (ROOT / "solutions" / "vector_add.py").read_text()
    fixed = "add_grid_stride_kernel[grid_blocks(), THREADS_PER_BLOCK]"
    assert source.count(fixed) == 1
    (tmp_path / "sized" / "vector_add.py").write_text(source.replace(
        fixed, "add_grid_stride_kernel[(a.size + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, THREADS_PER_BLOCK]"))
    results = grade(tmp_path / "sized", ["vector_add"], backend="sim", course=Course(ROOT), stages=[2])
    output = next(t.output for t in results.tests if t.name == "vector_add::grid_stride_uses_a_fixed_grid")
    assert output.splitlines()[0] == (
        "the grid must be the same for every n: launch grid_blocks() blocks of THREADS_PER_BLOCK threads whatever "
        "n is, and let each thread's loop cover the rest (n=100 launched 1 block of 256 threads; n=540,679 "
        "launched 2,113 blocks of 256 threads)"), output


def test_the_data_flow_names_an_input_by_the_exercises_parameter(tmp_path):
    """The audit's SAXPY student read "the answer is input array 2": the input is named as the
    course's reference solution declares it, whatever the student's module says."""
    from grader.course import Course
    from grader.grading import grade

    submission = known_wrong("vector_add_saxpy_result_not_in_y", tmp_path)
    source = submission / "vector_add.py"  # the student's own names are not the ones told
    old = "def saxpy_inplace(alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:\n"
    text = source.read_text()
    assert text.count(old) == 1
    source.write_text(text.replace(old, "def saxpy_inplace(a, xs, ys):\n    alpha, x, y = a, xs, ys\n"))
    results = grade(submission, ["vector_add"], backend="sim", course=Course(ROOT), stages=[3])
    output = next(t.output for t in results.tests if t.name == "vector_add::saxpy_sizes[n=33]")
    assert "the answer is `y` (float32[33]) as it was passed in" in output, output


def test_an_all_reduce_chunk_the_host_chose_wrong_is_told_at_the_hosts_call(tmp_path):
    """The audit's all-reduce student was pointed at the kernel's `dst[i] += src[i]` for a chunk
    the host code chose wrong: the finding says the host's call that launched it too, and how
    much of the chunk had been written."""
    from grader.course import Course
    from grader.grading import grade

    submission = known_wrong("allreduce_ring_adds_the_wrong_chunk", tmp_path)
    results = grade(submission, ["allreduce"], backend="sim", course=Course(ROOT), stages=[2])
    output = next(t.output for t in results.tests if t.name == "allreduce::ring[N=4,n=1003]")
    lines = (submission / "allreduce.py").read_text().splitlines()
    kernel, launch = lines.index("        dst[i] += src[i]") + 1, lines.index("        add_kernel[blocks_for(dst.size), "
                                                                          "THREADS_PER_BLOCK, rank.stream](dst, src)") + 1
    call = next(k for k, line in enumerate(lines, 1) if "add_on(r, bufs[r.id][lo:hi], scratch[r.id][:hi - lo])" in line)
    first, _, detail = output.partition("\n")
    assert first.startswith(f"kernel 'add_kernel' at allreduce.py:{kernel}, ") and first.endswith(
        f"read of uninitialised device array 'src' at index 250 (never written since allocation), launched at "
        f"allreduce.py:{launch} in add_on, called at allreduce.py:{call} in allreduce_ring"), first
    assert detail.startswith("'src' (251 elements): 250 had been written ([0, 250)), the rest never"), detail


def test_a_wrong_sum_says_which_part_of_the_input_it_is_the_sum_of(tmp_path):
    """A sum that is exactly that of a part of x names the part: the first block's partial sum only
    (one pass of the tree), or the first warp of each block (lane 0 tested as threadIdx.x == 0); or
    counts elements again as a grid-stride loop stepping by the block does."""
    from grader.course import Course
    from grader.grading import grade

    def outputs(name, stage, seed=""):
        results = grade(known_wrong(name, tmp_path), ["reduction"], backend="sim", course=Course(ROOT),
                        stages=[stage], seed=seed)
        return {t.name: t.output for t in results.tests}

    tree = outputs("reduction_tree_single_pass", 1)["reduction::tree[n=40000]"]
    assert "exactly the sum of the first 256 elements (x[0:256])" in tree, tree
    shuffle = outputs("reduction_shuffle_one_atomic_per_block", 2)["reduction::shuffle[n=1025]"]
    assert "the first 32 elements of every 256" in shuffle and "cuda.laneid == 0" in shuffle, shuffle
    # a grid-stride loop that steps by the block: each block adds everything from its start on
    # (this seed's first input at n=540679 fits a stray candidate closer than the true one: a loop
    # stepping by 32 over 811 blocks. The note is the one both calls' sums fit, not the first's.)
    strided = outputs("reduction_grid_stride_wrong_stride", 3, seed="00000000000001f8")
    for name, times in (("grid_stride_float32[n=1025]", "k // 256 + 1 times"),
                        ("grid_stride_float32[n=540679]", "min(k // 256 + 1, 1056) times"),
                        ("grid_stride_int32_exact[n=1000]", "k // 256 + 1 times")):
        output = strided[f"reduction::{name}"]
        assert f"element k counted {times}" in output and "cuda.gridsize(1)" in output, output
    assert "array(" not in strided["reduction::grid_stride_int32_exact[n=1000]"], "a number, not its repr"
    # int32 sums are matched exactly, modulo 2^32 as the GPU's int32 wraps (the large input's wrong sum
    # overflows); one off by float32's rounding names the float32 step
    assert "min(k // 256 + 1, 1056) times" in strided["reduction::grid_stride_int32_exact[n=540679]"]
    rounded = outputs("reduction_warp_sums_in_float32", 3)
    for n in (1000, 540679):
        output = rounded[f"reduction::grid_stride_int32_exact[n={n}]"]
        assert "the right sum rounded: some partial sum went through float32" in output, output


def test_a_grid_stride_loop_stepping_by_one_is_named_and_its_timeout_says_how_long_each_threads_loop_is(tmp_path):
    """A mistake a student makes at midnight: `range(cuda.grid(1), x.size, 1)`. On small inputs the
    wrong sum is named (element k counted k + 1 times); on the large one every thread loops up to
    540,679 times, more than the simulator finishes within the call's limit: the timeout says where
    the kernel's loop was and how long it is, not that it may never end."""
    from grader.course import Course
    from grader.grading import grade

    (tmp_path / "sub").mkdir()
    text = (ROOT / "solutions" / "reduction.py").read_text()
    assert text.count("x.size, cuda.gridsize(1)):") == 1
    (tmp_path / "sub" / "reduction.py").write_text(text.replace("x.size, cuda.gridsize(1)):", "x.size, 1):"))
    loop = next(i for i, line in enumerate(text.splitlines(), 1) if "x.size, cuda.gridsize(1)):" in line)
    results = grade(tmp_path / "sub", ["reduction"], backend="sim", course=Course(ROOT), stages=[3], timeout=10)
    outputs = {t.name: t.output for t in results.tests}
    for name in ("grid_stride_float32[n=33]", "grid_stride_int32_exact[n=1000]"):
        assert "element k counted k + 1 times: each thread adds every element from its own index on, stepping by 1" \
            in outputs[f"reduction::{name}"], outputs[f"reduction::{name}"]
    large = outputs["reduction::grid_stride_float32[n=540679]"]
    assert re.search(rf"timed out after 10 s: it was at reduction\.py:\d+ in reduce_grid_stride, waiting for a kernel "
                     rf"launched there, which was at reduction\.py:({loop}|{loop + 1}) in reduce_grid_stride_kernel, "
                     rf"blocks 0 to 127 of 1,056, in the loop of line {loop} at iteration [\d,]+ of up to 540,679 in a "
                     rf"thread \(does each thread need that many\?\)", large), large


def test_a_shuffle_missing_its_first_step_is_named_and_a_note_a_second_call_does_not_bear_out_is_dropped(tmp_path):
    """The audit's R3 (the shuffle's offsets start at 8): the sum of the first 16 of every 32 is
    named. A sum that fits a part on one call but not on a second call with other values (here: a
    kernel whose first offset alternates between calls) is told without a note: one input alone
    names a part by accident now and then."""
    from grader.course import Course
    from grader.grading import grade

    def outputs(submission):
        results = grade(submission, ["reduction"], backend="sim", course=Course(ROOT), stages=[2])
        return {t.name: t.output for t in results.tests if t.name.startswith("reduction::shuffle[")}

    submission = known_wrong("reduction_shuffle_missing_first_step", tmp_path)
    for name, output in outputs(submission).items():
        if name != "reduction::shuffle[n=1]":
            assert "exactly the sum of the first 16 elements of every 32" in output, output
    source = submission / "reduction.py"
    text = source.read_text()
    for old, new in (("def reduce_shuffle_kernel(x, out):", "def reduce_shuffle_kernel(x, out, first):"),
                     ("offset = WARP_SIZE // 4  # BUG", "offset = first  # BUG"),
                     ("reduce_shuffle_kernel[blocks, THREADS_PER_BLOCK](d_x, d_out)",
                      "_CALLS.append(0)\n    reduce_shuffle_kernel[blocks, THREADS_PER_BLOCK](d_x, d_out, "
                      "WARP_SIZE // 4 if len(_CALLS) % 2 else WARP_SIZE // 8)")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    source.write_text(text + "\n_CALLS = []\n")
    for name, output in outputs(submission).items():
        if name != "reduction::shuffle[n=1]":
            assert "expected" in output and "; that is" not in output, output


def test_table_and_junit_formats(tmp_path):
    done = gpugrade("grade", "solutions", "vector_add", "--backend", "sim")
    assert done.returncode == 0, done.stderr
    assert "vector_add stage 1" in done.stdout and "Total:" in done.stdout
    out = tmp_path / "junit.xml"
    done = gpugrade("grade", "exercises", "vector_add", "--backend", "sim", "--format", "junit", "--output", str(out))
    suite = ET.parse(out).getroot()
    assert done.returncode == 1 and int(suite.get("failures")) == int(suite.get("tests")) > 0
    assert all(case.get("name").startswith("vector_add::") for case in suite.iter("testcase"))


def test_a_syntax_error_costs_points_with_a_clear_message(tmp_path):
    (tmp_path / "vector_add.py").write_text("from numba import cuda\n\ndef vector_add(a, b:\n    pass\n")
    code, doc = grade_json(tmp_path, "vector_add", tmp_path=tmp_path)
    assert code == 1 and doc["score"] == 0
    import re

    for t in doc["tests"]:
        gated = t["output"].startswith("needs correctness first")
        assert gated or t["output"].startswith("could not import the submission (vector_add.py:3): SyntaxError"), t
        assert "<frozen" not in t["output"]
        # the failing tests are named: a structural test failing beside passing answers is findable
        assert not gated or re.fullmatch(r"needs correctness first: vector_add stage \d has failing tests "
                                         r"\([a-z_]+(, [a-z_]+)*( and \d+ more)?\)", t["output"]), t["output"]


def test_an_exercise_file_that_is_a_link_is_refused_not_followed(tmp_path):
    """A submission's vector_add.py linking to the course's own solution (in the production image,
    /opt/gpugrade/course/solutions/vector_add.py), or its exercises/ folder linking to solutions/,
    was copied through the link into the workspace: the reference graded as the student's, 25/25
    (the batch refuses links; `gpugrade grade`, Gradescope's entry point, followed them)."""
    submission = tmp_path / "linked"
    submission.mkdir()
    (submission / "vector_add.py").symlink_to(ROOT / "solutions" / "vector_add.py")
    (submission / "exercises").symlink_to(ROOT / "solutions")
    code, doc = grade_json(submission, "vector_add", "reduction", tmp_path=tmp_path)
    assert code == 1 and doc["score"] == 0
    for t in doc["tests"]:
        gated = t["output"].startswith("needs correctness first")
        assert gated or t["output"].startswith("not graded: ") and "is a link: submit the file itself" in t["output"], t


def test_usage_errors_exit_2():
    assert gpugrade("grade", "solutions", "no_such_exercise").returncode == 2
    assert gpugrade("grade", "/no/such/folder").returncode == 2


def test_the_docker_sandbox_without_bubblewrap_is_refused_not_run_in_the_students_process(tmp_path):
    """Its runners reach the simulated GPU's device process on this host, confined by bubblewrap;
    without bubblewrap the simulator would run inside the student's container, unsaid."""
    no_bwrap = dict(os.environ, PATH=str(tmp_path))  # a PATH with no bwrap on it
    done = subprocess.run([*GPUGRADE, "grade", "solutions", "vector_add", "--sandbox", "docker"], cwd=ROOT,
                          env=no_bwrap, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bubblewrap" in done.stderr and "--simulator inline" in done.stderr


def test_check_grades_the_students_own_exercises_folder(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copytree(ROOT / "solutions", course / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    done = gpugrade("check", "vector_add", "--backend", "sim", cwd=course / "exercises")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "your exercises/" in done.stdout and re.search(r"Total: (\d+)/\1 ", done.stdout)


def test_check_lists_the_exercises_in_the_courses_order_and_starts_with_the_first_one(tmp_path):
    """Regression (learner audit): the first failing test shown was allreduce's, the hardest, because
    exercises were taken by name; the course's order is course.toml's (vector_add first)."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copytree(ROOT / "exercises", course / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    done = gpugrade("check", "--backend", "sim", cwd=course)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = re.findall(r"^│ (\w+) stage 1 ", done.stdout, re.M)
    assert rows == ["vector_add", "matmul", "reduction", "allreduce"], done.stdout
    assert "First failing test: vector_add::" in done.stdout, done.stdout


def test_exercises_the_manifest_does_not_list_come_after_those_it_does_by_name(tmp_path):
    from grader.course import Course

    (tmp_path / "tests" / "exercises").mkdir(parents=True)
    for name in ("zeta", "alpha", "beta", "extra"):
        (tmp_path / "tests" / "exercises" / f"test_{name}.py").write_text("")
    assert Course(tmp_path).exercises() == ["alpha", "beta", "extra", "zeta"]  # no course.toml: by name
    stage = ('[[exercises.{0}.stages]]\ntitle = "s"\nfunction = "f"\nhints = ["a", "b", "c"]\n'
             '[exercises.{0}.stages.gpu]\nbaseline = "reference"\nmax_time_ratio = 1.2\n')
    (tmp_path / "course.toml").write_text("".join(f'[exercises.{n}]\ntitle = "{n}"\n' + stage.format(n)
                                                  for n in ("zeta", "beta", "gone")))
    assert Course(tmp_path).exercises() == ["zeta", "beta", "alpha", "extra"]


def test_a_grader_folder_in_the_course_does_not_shadow_the_installed_grader(tmp_path):
    """A course folder that holds a copy of the grader (a clone of this repository graded by
    gpugrade installed elsewhere): the judge runs in it, yet imports the grader its runners
    import. Before, it imported the copy, whose sandboxed runners could not import it: every test
    failed with "the simulated GPU (device process) did not start"."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    (course / "grader").mkdir()
    (course / "grader" / "__init__.py").write_text('raise ImportError("the course folder\'s copy was imported")\n')
    # the console script, as a user runs it (`python -m grader` in that folder would import the copy itself)
    script = Path(sys.executable).parent / "gpugrade"
    done = subprocess.run([str(script), "grade", "solutions", "vector_add", "--backend", "sim"], cwd=course,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and re.search(r"Total: (\d+)/\1 ", done.stdout), done.stdout + done.stderr


def test_a_stage_the_exercise_does_not_have_is_a_usage_error():
    """Before, `--stage 4` selected no test and read as a grader crash ("the judge exited with code 5")."""
    done = gpugrade("check", "matmul", "--stage", "4", "--backend", "sim")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "exercise 'matmul' has stages 1..3, not 4" in done.stderr and "judge exited" not in done.stdout


def test_doctor_says_which_backend_auto_picks():
    done = gpugrade("doctor")
    assert done.returncode == 0 and "backend auto picks" in done.stdout and "sim" in done.stdout


def test_grade_reports_its_progress_as_tests_finish():
    """What the progress bar of `gpugrade grade / check / bench` shows on a terminal: tests done
    of the total, rising to the total, named as the results name them."""
    from grader.grading import grade

    seen = []
    results = grade(ROOT / "solutions", ["vector_add"], backend="sim", stages=[1],
                    on_test=lambda done, total, name: seen.append((done, total, name)))
    total = len(results.tests)
    assert total > 1 and seen and seen[-1][:2] == (total, total)
    assert [d for d, _, _ in seen] == sorted({d for d, _, _ in seen}) and all(t == total for _, t, _ in seen)
    assert {name for *_, name in seen if name} <= {t.name for t in results.tests}


def test_bench_takes_the_gpu_preset_as_gpu_model_too():
    from grader.cli import _parser

    assert _parser().parse_args(["bench", "--gpu-model", "L4"]).model_gpu == "L4"
    assert _parser().parse_args(["bench", "--model-gpu", "T4"]).model_gpu == "T4"


def test_grading_refuses_a_python_whose_isolated_runners_would_not_import_this_grader(tmp_path):
    """The grader on PYTHONPATH of a Python that has none installed: runners start as `python -I`
    (PYTHONPATH ignored), so every test would fail with "No module named 'grader'". Said once,
    before any runner starts, with what to do."""
    import sysconfig
    import venv

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "-m", "grader", "grade", "solutions",
                           "vector_add", "--backend", "sim", "--sandbox", "none"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-1500:] + done.stderr[-1500:]
    assert "ignores PYTHONPATH" in done.stderr and "cannot import grader" in done.stderr
    assert "pip install -e ." in done.stderr and "Total:" not in done.stdout


@pytest.mark.slow
def test_validate_the_course_references_full_stubs_zero_known_wrong_exact():
    """What CI must hold for the whole course: every stage, every known-wrong submission."""
    # 55 gradings on the machine's cores: 4 to 11 minutes on CI's 2 (the limit only stops a hang)
    done = gpugrade("validate", "--backend", "sim", timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    known_wrong = sorted(p.parent.name for p in (ROOT / "tests" / "submissions").glob("*/expected.json"))
    assert known_wrong and all(name in done.stdout for name in known_wrong)


def test_check_names_the_race_and_its_line_when_a_syncthreads_is_missing(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    (course / "exercises").mkdir()
    wrong = known_wrong("matmul_missing_syncthreads", tmp_path) / "matmul.py"
    shutil.copy(wrong, course / "exercises" / "matmul.py")
    # the next tile's store races with this tile's loads: reported at the store
    race_line = next(i for i, line in enumerate(wrong.read_text().splitlines(), 1) if "sA[ty, tx] = A[" in line)
    done = gpugrade("check", "matmul", "--stage", "2", "--backend", "sim", cwd=course)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "data race on shared array" in done.stdout
    assert re.search(rf"matmul\.py:{race_line}\b", done.stdout), (race_line, done.stdout)


def test_a_students_copy_without_solutions_still_grades_performance_from_recorded_counters(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    (course / "exercises").mkdir()
    shutil.copy(known_wrong("matmul_uncoalesced", tmp_path) / "matmul.py", course / "exercises" / "matmul.py")
    done = gpugrade("check", "matmul", "--stage", "1", "--backend", "sim", cwd=course)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "matmul::naive_is_coalesced" in done.stdout and "uncoalesced access at line" in done.stdout, done.stdout
    shutil.copy(ROOT / "solutions" / "matmul.py", course / "exercises" / "matmul.py")
    done = gpugrade("check", "matmul", "--stage", "1", "--backend", "sim", cwd=course)
    assert done.returncode == 0 and re.search(r"Total: (\d+)/\1 ", done.stdout), done.stdout


def test_a_students_copy_grades_the_pipelined_all_reduce_against_the_recorded_timeline(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "tests" / "exercises", course / "tests" / "exercises")
    shutil.copy(ROOT / "course.toml", course / "course.toml")
    (course / "exercises").mkdir()
    shutil.copy(ROOT / "solutions" / "allreduce.py", course / "exercises" / "allreduce.py")
    done = gpugrade("check", "allreduce", "--stage", "3", "--backend", "sim", cwd=course)
    assert done.returncode == 0 and re.search(r"Total: (\d+)/\1 ", done.stdout), done.stdout
    assert "modelled" in done.stdout and "not gradable" not in done.stdout


def test_recorded_reference_counters_are_those_of_the_current_solutions(tmp_path):
    """`gpugrade release` records them; a changed solution or simulator must be re-released."""
    import json

    out = tmp_path / "counters.json"
    from grader.course import Course
    from grader.grading import grade

    grade(ROOT / "solutions", backend="sim", course=Course(ROOT), record_reference=out)
    committed = json.loads((ROOT / "tests" / "exercises" / "reference_counters.json").read_text())
    assert json.loads(out.read_text()) == committed, "run `gpugrade release` to re-record the counters"


def test_the_submission_time_limit_keeps_the_points_of_finished_tests(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    source = (ROOT / "solutions" / "vector_add.py").read_text()
    # stage 1 right and quick; stage 2 never returns (each call would only hit the per-call limit)
    source = source.replace('def vector_add_grid_stride(a: np.ndarray, b: np.ndarray) -> np.ndarray:\n',
                            'def vector_add_grid_stride(a: np.ndarray, b: np.ndarray) -> np.ndarray:\n'
                            '    while True:\n        pass\n', 1)
    (sub / "vector_add.py").write_text(source)
    out = tmp_path / "r.json"
    # 30 s: stage 1 takes 6 s alone, and its first test must be done before the limit with the
    # machine's cores busy (8 s was not, beside `gpugrade validate` on another pytest-xdist worker)
    done = gpugrade("grade", str(sub), "vector_add", "--backend", "sim", "--format", "json", "--output", str(out),
                    "--timeout", "60", "--submission-timeout", "30")
    assert done.returncode == 1, done.stdout + done.stderr
    tests = {t["name"]: t for t in json.loads(out.read_text())["tests"]}
    assert tests["vector_add::edge_sizes[n=1]"]["status"] == "passed"
    # whichever ends it first (machine load decides): the submission's wall-clock limit, or the
    # exercise's budget of student time (the submission's share for one exercise: the same 30 s)
    stopped = [t for t in tests.values() if "time limit of 30 s was reached" in t["output"]
               or "time budget of 30 s is spent" in t["output"]]
    assert stopped and all(t["score"] == 0 for t in stopped), [t["output"][:80] for t in tests.values()]
    assert len(tests) == 21, "every test is in the results, run or not"



def test_hostile_submissions_graded_beside_an_honest_one_leave_its_grade_unchanged(tmp_path):
    """A hang at import, an output flood and a crash, graded at the same time as the reference:
    each costs only its own points (and a module that hangs at import costs one timeout, not one
    per test)."""
    from concurrent.futures import ThreadPoolExecutor

    from grader.course import Course
    from grader.grading import grade

    hostile = {
        "hang": "while True:\n    pass\n",
        "flood": "def vector_add(a, b):\n    for _ in range(20000):\n        print('100/100 ' * 128)\n    return b\n",
        "crash": "import numpy as np\n\ndef vector_add(a, b):\n    return vector_add(a, b)\n",
    }
    folders = {}
    for name, source in hostile.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "vector_add.py").write_text(source)
        folders[name] = tmp_path / name
    folders["honest"] = ROOT / "solutions"
    # the hang's calls end at 3 s; the flood's and the crash's have 30 s (20 MB printed through the
    # runner's pipe took over 3 s beside two busy loops and other gradings); the honest one keeps
    # the default limit: its calls take more than 3 s with the machine's cores busy
    limits = {"hang": 3, "flood": 30, "crash": 30, "honest": None}
    with ThreadPoolExecutor(4) as pool:
        futures = {name: pool.submit(grade, folder, ["vector_add"], backend="sim", course=Course(ROOT),
                                     timeout=limits[name], stages=[1])
                   for name, folder in folders.items()}
        results = {name: f.result() for name, f in futures.items()}
    assert results["honest"].score == results["honest"].max_score > 0 and not results["honest"].errors
    for name in hostile:
        assert results[name].score == 0 and not results[name].errors, (name, results[name].tests[0].output)
    assert "timed out after 3 s" in results["hang"].tests[0].output
    assert "no kernel was launched" in results["flood"].tests[0].output
    assert "RecursionError" in results["crash"].tests[0].output


def test_a_submission_cannot_bloat_the_results_file(tmp_path):
    """Messages of any size from the student's process: the results file stays small."""
    from grader.course import Course
    from grader.grading import grade

    (tmp_path / "vector_add.py").write_text(
        "def vector_add(a, b):\n    raise ValueError('x' * (50 << 20))\n")
    results = grade(tmp_path, ["vector_add"], backend="sim", course=Course(ROOT), stages=[1])
    assert results.score == 0 and not results.errors
    out = tmp_path / "results.json"
    results.dump(str(out))
    assert out.stat().st_size < 200_000, "9 failed tests cannot make a results file of megabytes"
    assert all(len(t.output) <= 16_100 for t in results.tests)


def test_a_simulator_finding_reaches_the_results_as_a_record(tmp_path):
    """Findings cross as typed records from the device process to the results (issue 10), and the
    student's next step lists them from the records, not by matching message text."""
    import json as _json

    from grader.course import Course
    from grader.grading import grade
    from grader.report import first_failure

    spec = _json.loads((ROOT / "tests" / "submissions" / "vector_add_no_bounds_guard" / "expected.json").read_text())
    source = (ROOT / "solutions" / "vector_add.py").read_text()
    for m in spec["mutations"]:
        source = source.replace(m["old"], m["new"])
    (tmp_path / "vector_add.py").write_text(source)
    results = grade(tmp_path, ["vector_add"], backend="sim", course=Course(ROOT), stages=[1])
    found = [t.finding for t in results.tests if t.finding]
    assert found, [t.output[:100] for t in results.tests]
    finding = found[0]
    assert finding.check == "bounds" and finding.type == "OutOfBoundsError"
    assert finding.kernel == "add_kernel" and finding.file == "vector_add.py" and finding.line > 0
    assert finding.array in ("a", "b", "out") and len(finding.thread) == 3 and len(finding.block) == 3
    assert "Simulator findings:" in first_failure(results) and finding.message.splitlines()[0] in first_failure(results)
    again = type(results).from_dict(results.to_dict())
    assert [t.finding for t in again.tests] == [t.finding for t in results.tests], "the record round-trips"


def test_the_judges_settings_are_declared_once():
    """The plugin's options and the argv grade() builds come from one declaration (issue 10)."""
    import dataclasses

    from grader.judge.settings import JudgeSettings

    settings = JudgeSettings(workspace="/w", seed="ab", timeout=2.5, stages="1,3", simulator="inline",
                             exercise_budget=600.0)
    argv = settings.argv()
    assert argv == ["--gpugrade-workspace", "/w", "--gpugrade-seed", "ab", "--gpugrade-timeout", "2.5",
                    "--gpugrade-exercise-budget", "600", "--gpugrade-simulator", "inline", "--gpugrade-stages", "1,3"]
    import argparse

    parser = argparse.ArgumentParser()  # what the plugin registers (pytest's options are argparse's), parsed back

    class Group:
        def addoption(self, *flags, **kwargs):
            parser.add_argument(*flags, **kwargs)

    JudgeSettings.add_options(Group())
    parsed = parser.parse_args(argv)
    again = JudgeSettings(**{f.name: getattr(parsed, "gpugrade_" + f.name) for f in dataclasses.fields(JudgeSettings)})
    assert again == settings


def test_a_test_that_cannot_run_here_keeps_its_points_in_the_maximum(tmp_path):
    """No test silently leaves the maximum: a skip is 'not gradable on this machine', 0 of its points."""
    from grader.course import Course
    from grader.grading import grade
    from grader.report import render
    from grader.report.junit import junit

    course = tmp_path / "course"
    (course / "tests" / "exercises").mkdir(parents=True)
    (course / "tests" / "exercises" / "test_demo.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.points(2)\n"
        "def test_ring_timing_on_four_gpus(student):\n"
        "    pytest.skip('needs 4 GPUs, this machine has 1')\n\n"
        "@pytest.mark.points(1)\n"
        "def test_runs_anywhere(student):\n"
        "    assert student.call('answer').value == 42\n")
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "demo.py").write_text("def answer():\n    return 42\n")
    results = grade(submission, backend="sim", course=Course(course))
    assert (results.score, results.max_score) == (1, 3), [(t.name, t.status, t.output) for t in results.tests]
    skipped = next(t for t in results.tests if "ring" in t.name)
    assert skipped.status == "not_gradable" and skipped.max_score == 2 and skipped.score == 0
    assert skipped.output == "not gradable on this machine: needs 4 GPUs, this machine has 1"
    assert "<skipped" in junit(results) and "not gradable" in render(results, "table")


def test_the_registers_ptxas_reports_set_the_occupancy_the_model_times_on_both_sides():
    """The compile check's registers reach the model for the student and the reference alike: the
    coarsened matmul's (50 a thread with this toolchain) hold 4 blocks of 256, half the warps; the
    tiled one's 32 all 8."""
    from grader.course import Course
    from grader.grading import grade

    results = grade(ROOT / "solutions", ["matmul"], backend="sim", course=Course(ROOT), stages=[2, 3])
    timed = {t.name.split("::")[1]: t.timing for t in results.tests if t.timing}
    coarsened, tiled = timed["coarsened_reuses_registers_without_bank_conflicts"], timed["tiled_reuses_shared_memory"]
    assert coarsened["occupancy"] == coarsened["reference_occupancy"] < 1.0 and coarsened["ratio"] == 1.0, coarsened
    assert coarsened["registers"] > 32 >= tiled["registers"] and tiled["occupancy"] == 1.0, (coarsened, tiled)


def test_bench_times_the_performance_tests_kernels_on_a_chosen_gpu(tmp_path):
    rows_file = tmp_path / "bench.json"
    done = gpugrade("bench", "vector_add", "--reference", "--backend", "sim", "--model-gpu", "T4",
                    "--json", str(rows_file))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(rows_file.read_text())
    assert [r["stage"] for r in rows] == [1, 2, 3], "one row per performance test, nothing else run"
    assert all(r["source"] == "modelled" and r["gpu"] == "T4" and r["ratio"] == 1.0 for r in rows)
    assert all(r["bound"] == "memory" for r in rows), rows
    # grids sized to the data fill the GPU at full load; the grid-stride stage keeps its grid as
    # launched (docs/PERF_MODEL.md): 8 blocks for each of the simulator's 132 SMs more than fill a T4's 40
    assert [round(r["bandwidth_fraction"], 2) for r in rows] == [1.0, 1.0, 1.0], rows
    assert "kernel times (modelled on T4" in done.stdout
    assert gpugrade("bench", "--model-gpu", "GTX480").returncode == 2


def test_the_gpu_backends_code_path_over_numbas_stock_simulator(tmp_path, monkeypatch):
    """The gpu backend without a GPU (NUMBA_ENABLE_CUDASIM=1 stands in for one in the GPU's device
    process; no timing is proved): the same maximum as on the simulator, the timed calls made, a
    host-computed answer loses its points (the simulator beside the GPU is the proof), performance
    reported as not gradable."""
    from grader.course import Course
    from grader.course.validate import load_known_wrong
    from grader.grading import grade

    course = Course(ROOT)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    on_gpu = grade(ROOT / "solutions", ["vector_add"], backend="gpu", course=course, stages=[1])
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")
    on_sim = grade(ROOT / "solutions", ["vector_add"], backend="sim", course=course, stages=[1])
    assert on_gpu.max_score == on_sim.max_score == 11 and on_sim.score == 11
    assert "stock simulator" in on_gpu.backend_note and not on_sim.backend_note
    not_gradable = [t for t in on_gpu.tests if t.status == "not_gradable"]
    assert [t.name for t in not_gradable] == ["vector_add::keeps_up_with_the_reference"], \
        [(t.name, t.status, t.output[:300]) for t in on_gpu.tests if t.status != "passed"] + on_gpu.errors
    # the timed calls ran (reference and student, through the GPU's device process, every answer
    # checked), their times not graded
    assert "measured on numba's stock simulator" in not_gradable[0].output
    assert "median of" in not_gradable[0].output and "the reference:" in not_gradable[0].output
    assert on_gpu.score == 11 - not_gradable[0].max_score, [(t.name, t.output[:80]) for t in on_gpu.tests]
    assert on_gpu.exit_code == 0  # nothing lost: what could not run here is no loss of the submission's

    # a kernel launched, but the answer computed on the host and copied through it: the GPU's own
    # launch records would pass it; the simulator beside the GPU (the proof) does not
    host = next(k for k in load_known_wrong(course) if k.name == "vector_add_copy_kernel_over_host_answer")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    cheat = grade(host.materialize(course, tmp_path / "host"), ["vector_add"], backend="gpu", course=course,
                  stages=[1])
    assert cheat.score == 0 and cheat.max_score == 11, [(t.name, t.output[:100]) for t in cheat.tests]


def test_the_stock_simulator_path_grades_shuffles_on_the_simulator_beside_it_and_grid_strides_on_a_small_grid(
        tmp_path, monkeypatch):
    """numba's stock simulator has no shuffles: a reduction's answers there are the simulator's
    beside it, so a wrong one fails as on `--backend sim` and per-thread atomics fail the counter
    criteria (both were "not gradable", which lost nothing); only the time is not graded. It
    stands in for a GPU of 2 SMs: the grid-stride stage's reference took over 11 minutes on 1,056
    blocks of Python threads; its fixed grid is checked there too."""
    from grader.course import Course
    from grader.course.validate import load_known_wrong
    from grader.grading import grade

    course = Course(ROOT)
    wrong = {k.name: k for k in load_known_wrong(course)}
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    reference = grade(ROOT / "solutions", ["reduction", "vector_add"], backend="gpu", course=course, stages=[2])
    timed = [t for t in reference.tests if t.status == "not_gradable"]
    assert [t.name for t in timed] == ["reduction::shuffle_one_atomic_per_warp",
                                       "vector_add::grid_stride_is_coalesced"], \
        [(t.name, t.status, t.output[:200]) for t in reference.tests if t.status != "passed"] + reference.errors
    assert "has no cuda.shfl_down_sync" in timed[0].output and "times prove nothing" in timed[1].output
    assert reference.exit_code == 0 and any("answered by gpugrade's simulator" in n for n in reference.notes)
    assert "vector_add::grid_stride_uses_a_fixed_grid" in {t.name for t in reference.tests if t.status == "passed"}
    assert "e+" not in timed[1].output, timed[1].output  # "755 ms per call", not "7.55e+05 us"

    atomics = grade(wrong["reduction_per_thread_atomics"].materialize(course, tmp_path / "a"), ["reduction"],
                    backend="gpu", course=course, stages=[2])
    perf = next(t for t in atomics.tests if t.name == "reduction::shuffle_one_atomic_per_warp")
    assert perf.status == "failed" and "atomic operations per warp: 32" in perf.output, (perf.status, perf.output)
    maximum = grade(wrong["reduction_shuffle_atomic_max"].materialize(course, tmp_path / "m"), ["reduction"],
                    backend="gpu", course=course, stages=[2])
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")
    on_sim = grade(wrong["reduction_shuffle_atomic_max"].materialize(course, tmp_path / "s"), ["reduction"],
                   backend="sim", course=course, stages=[2])
    assert maximum.score == on_sim.score < on_sim.max_score == maximum.max_score, \
        [(t.name, t.status, t.output[:100]) for t in maximum.tests]
    failed = [{t.name for t in r.tests if t.status == "failed"} for r in (maximum, on_sim)]
    assert failed[0] == failed[1], failed


def test_a_block_of_256_threads_with_barriers_runs_on_numbas_stock_simulator(tmp_path):
    """The stock simulator runs a thread per CUDA thread of a block: under the runner's usual
    limit of 256 threads every reduction test failed ("can't start new thread")."""
    import numpy as np

    from grader.backends import Kind
    from grader.sandbox import Limits

    from sandbox_support import solution_student

    student = solution_student(tmp_path, "reduction", Kind.GPU, Limits.on_stock_simulator(call_timeout_s=300))
    try:
        x = np.arange(600, dtype=np.float32)
        assert student.call("reduce_tree", x).value == x.sum()  # 3 blocks of 256 threads, tree barriers
    finally:
        student.close()


def test_what_numbas_stock_simulator_lacks_is_answered_by_the_simulator_beside_it(tmp_path):
    """A warp shuffle on the gpu backend's path over numba's stock simulator (which has none):
    the answer checked is gpugrade's simulator's, from the same call beside it, and the results
    say so (it failed the reference solutions as the student's AttributeError, then was not
    gradable, so a wrong answer lost nothing there); the same code with a bug the simulator
    finds still fails."""
    import textwrap

    import numpy as np

    from grader.backends import Kind
    from grader.errors import StudentCodeError
    from grader.judge import RunnerConnection, Student
    from grader.judge.student import BesideTheSimulator
    from grader.sandbox import Limits, ProcessSandbox
    from grader.sandbox.bubblewrap import unavailable as bubblewrap_unavailable

    from sandbox_support import unavailable

    reason = bubblewrap_unavailable()
    if reason:
        unavailable(reason)
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    (work / "ex.py").write_text(textwrap.dedent("""
        import numpy as np
        from numba import cuda

        @cuda.jit
        def warp_sum(x, out, at):
            v = x[cuda.threadIdx.x]
            for offset in (16, 8, 4, 2, 1):
                v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            if cuda.threadIdx.x == 0:
                out[at] = v

        def total(x, at):
            d_out = cuda.device_array(1, np.float32)
            warp_sum[1, 32](cuda.to_device(x), d_out, at)
            return d_out.copy_to_host()[0]
    """))
    (work / "ex.py").chmod(0o644)
    made = []

    def student(backend, limits):
        sandbox = ProcessSandbox(limits)
        made.append(Student("ex", str(work), backend, sandbox, allowed_imports=None,
                            connection=RunnerConnection(str(work), backend, sandbox)))
        return made[-1]

    pair = BesideTheSimulator(student(Kind.GPU, Limits.on_stock_simulator()), student(Kind.SIM, Limits()))
    x = np.ones(32, np.float32)
    try:
        result = pair.call("total", x, 0)
        assert result.value == 32.0 and result.proof.launches, result
        x[5] = 3.0
        assert pair.call("total", x, 0).value == 34.0  # the answer follows the inputs: not a recorded one
        assert len(pair.notes) == 1 and "has no cuda.shfl_down_sync" in pair.notes[0], pair.notes
        assert pair.import_notes == pair.notes  # what the results' notes are read from
        with pytest.raises(StudentCodeError, match="out-of-bounds access"):
            pair.call("total", x, 1)  # out[1] of one element: the simulator's finding, not a skip
    finally:
        for s in made:
            s.close()
