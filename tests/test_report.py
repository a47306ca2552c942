"""Reporters render one results model; student-facing formats never describe hidden tests."""

import json
import xml.etree.ElementTree as ET

import jsonschema

from gradescope_schema import RESULTS
from grader.report import render
from grader.report.gradescope import gradescope
from grader.report.html import html_page
from grader.report.markdown import markdown
from grader.report.prairielearn import prairielearn
from grader.report.results import Results, Status, TestResult


def sample() -> Results:
    r = Results(submission="alice", backend="sim")
    r.tests = [
        TestResult("vector_add::edge", "vector_add", 1, 2, 2, "passed"),
        TestResult("vector_add::large", "vector_add", 1, 3, 0, "failed", "out-of-bounds at line 7\ntrace"),
        TestResult("matmul::secret", "matmul", 2, 5, 0, "failed", "SECRET expected 1.0", visibility="after_due_date"),
    ]
    return r


def test_gradescope_keeps_visibility_for_gradescope_to_apply():
    doc = gradescope(sample())
    jsonschema.validate(doc, RESULTS)
    assert doc["score"] == 2 and [t["visibility"] for t in doc["tests"]][-1] == "after_due_date"


def test_gradescope_numbers_each_test_within_its_exercise_and_stage():
    """(audit) the last number counted across the whole submission: matmul's first test was matmul.2.3."""
    assert [t["number"] for t in gradescope(sample())["tests"]] == ["vector_add.1.1", "vector_add.1.2", "matmul.2.1"]


def test_prairielearn_score_is_a_fraction_and_tests_carry_points():
    doc = prairielearn(sample())
    assert doc["gradable"] is True and doc["score"] == 0.2
    assert doc["tests"][1] == {"name": "vector_add::large", "description": "vector_add, stage 1", "points": 0,
                               "max_points": 3, "message": "out-of-bounds at line 7",
                               "output": "out-of-bounds at line 7\ntrace"}
    assert len(json.dumps(doc)) < 1_000_000


def test_markdown_and_html_hide_after_due_date_tests():
    for text in (markdown(sample()), html_page(sample())):
        assert "vector_add::large" in text and "out-of-bounds at line 7" in text
        assert "SECRET" not in text and "matmul::secret" not in text
        assert "1 more test(s) are hidden" in text


def test_junit_is_well_formed():
    suite = ET.fromstring(render(sample(), "junit").split("?>", 1)[1])
    assert suite.get("failures") == "2" and len(suite.findall("testcase")) == 3


def test_the_html_page_draws_a_collectives_ring_and_timeline():
    from grader.report import pictures
    from grader.report.results import Status

    assert pictures.available(), "matplotlib (the pictures extra, in dev) is not installed"
    traffic = {"ranks": 4, "host_bytes": 0, "links": [[0, 1, 6024, 6], [1, 2, 6024, 6], [2, 3, 6024, 6],
                                                      [3, 0, 6024, 6], [0, 2, 4012, 1]]}
    timing = {"source": "modelled", "gpu": "H100", "seconds": 1e-3, "ratio": 1.0, "buffer_bytes": 64 << 20,
              "spans": [["copy", 1, 7, 0.0, 20.0], ["kernel", 1, 5, 20.0, 25.0], ["copy", 2, 8, 5.0, 30.0]]}
    results = Results("sub", "sim", tests=[
        TestResult("allreduce::ring_traffic[N=4]", "allreduce", 2, 2, 0, Status.FAILED, "not a ring's traffic",
                   traffic=traffic),
        TestResult("allreduce::pipelined_overlaps", "allreduce", 3, 3, 3, Status.PASSED, timing=timing)])
    page = html_page(results)
    svgs = [page[i:page.index("</svg>", i) + 6] for i in range(len(page)) if page.startswith("<svg", i)]
    assert len(svgs) == 2
    ring, timeline = (ET.fromstring(svg) for svg in svgs)  # well-formed, inline
    ring_text = " ".join(t.text or "" for t in ring.iter() if t.tag.endswith("text"))
    assert "rank 3" in ring_text and "6.02 KB" in ring_text and "1 msg" in ring_text
    timeline_text = " ".join(t.text or "" for t in timeline.iter() if t.tag.endswith("text"))
    assert "device 2, stream 8" in timeline_text and "hatched: copies" in timeline_text


def test_the_table_tells_each_failure_once_per_stage_and_every_test_with_verbose():
    from grader.report.results import Status

    results = Results("sub", "sim", tests=[
        TestResult("ex::a[n=1]", "ex", 1, 1, 0, Status.FAILED, "out-of-bounds access at index 33\ndetail"),
        TestResult("ex::a[n=33]", "ex", 1, 1, 0, Status.FAILED, "out-of-bounds access at index 33"),
        TestResult("ex::b", "ex", 1, 1, 1, Status.PASSED),
        TestResult("ex::fast", "ex", 1, 2, 0, Status.FAILED, "needs correctness first: ex stage 1 has failing tests"),
        TestResult("ex::c", "ex", 2, 1, 1, Status.PASSED),
        TestResult("ex::timed", "ex", 2, 2, 0, Status.NOT_GRADABLE, "not gradable on this machine: needs 4 GPUs"),
        TestResult("ex::d", "ex", 3, 1, 0, Status.NOT_GRADABLE, "not gradable on this machine: no shuffles"),
    ])
    compact = render(results, "table")
    assert compact.count("out-of-bounds access at index 33") == 1
    assert "fails 2 tests: a[n=1], a[n=33]" in compact and "1 performance test not run" in compact
    assert "1 not gradable here: needs 4 GPUs" in compact and "ok (1 test)" in compact
    assert "ok (0 tests)" not in compact, "a stage with nothing run here is not 'ok'"
    assert "1 not gradable here: no shuffles" in compact
    assert "ex::b" not in compact and "-v for every test" in compact
    verbose = render(results, "table", verbose=True)
    assert "ex::b" in verbose and verbose.count("out-of-bounds access at index 33") == 2


def test_one_bug_at_several_sizes_is_one_failure_and_other_lines_stay_apart():
    from grader.report.results import Status

    results = Results("sub", "sim", tests=[
        TestResult("ex::a[n=1000]", "ex", 1, 1, 0, Status.FAILED,
                   "f(a) with n=1000: 744 of 1000 elements wrong; first at index 256: expected 2.5, got nan"),
        TestResult("ex::a[n=1025]", "ex", 1, 1, 0, Status.FAILED,
                   "f(a) with n=1025: 769 of 1025 elements wrong; first at index 256: expected -1.25, got nan"),
        TestResult("ex::b", "ex", 1, 1, 0, Status.FAILED, "ValueError (ex.py:70 in f): bad"),
        TestResult("ex::c", "ex", 1, 1, 0, Status.FAILED, "ValueError (ex.py:71 in f): bad"),
    ])
    compact = render(results, "table")
    assert "fails 2 tests: a[n=1000], a[n=1025]" in compact and "769 of 1025" not in compact
    assert "ex.py:70" in compact and "ex.py:71" in compact  # two places: two failures


def test_markdown_tells_each_failure_once_with_its_tests_and_folds_every_test():
    from grader.report.results import Status

    detail = "out-of-bounds access at index 33\n  at vector_add.py:17\n  hint: guard with if i < out.size"
    results = Results("sub", "sim", tests=[
        TestResult("ex::a[n=1]", "ex", 1, 1, 0, Status.FAILED, detail),
        TestResult("ex::a[n=33]", "ex", 1, 1, 0, Status.FAILED, detail),
        TestResult("ex::b", "ex", 1, 1, 1, Status.PASSED)])
    page = markdown(results)
    assert page.count("### out-of-bounds access at index 33") == 1 and page.count("hint: guard") == 1
    assert "Fails: `ex::a[n=1]`, `ex::a[n=33]`" in page
    assert "| ex stage 1 | 1/3 |" in page and "<details><summary>Every test</summary>" in page


def test_a_results_files_source_round_trips_and_the_judge_reads_it_only_inside_the_workspace(tmp_path):
    import os

    from grader.judge.plugin import source_around
    from grader.report.results import Status
    from grader.wire.messages import Finding

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "vector_add.py").write_text("".join(f"line {n}\n" for n in range(1, 21)) + "x" * 500 + "\n")
    (tmp_path / "secret.py").write_text("password = 1\n" * 10)
    os.symlink(tmp_path / "secret.py", workspace / "link.py")
    assert source_around(str(workspace), "vector_add.py", 10) == [7, [f"line {n}" for n in range(7, 14)]]
    assert source_around(str(workspace), "vector_add.py", 2) == [1, [f"line {n}" for n in range(1, 6)]]
    first, lines = source_around(str(workspace), "vector_add.py", 21)
    assert first == 18 and len(lines[-1]) < 200 and lines[-1].endswith(" ...")
    for outside in ("../secret.py", str(tmp_path / "secret.py"), "link.py", ".", "missing.py"):
        assert source_around(str(workspace), outside, 3) is None, outside
    assert source_around(str(workspace), "vector_add.py", None) is None
    assert source_around(str(workspace), "vector_add.py", 99) is None

    finding = Finding("bounds", "OutOfBoundsError", "out-of-bounds access", "k", "vector_add.py", 10)
    results = Results("sub", "sim", tests=[TestResult("ex::a", "ex", 1, 1, 0, Status.FAILED, "out-of-bounds access",
                                                      finding=finding, source=source_around(str(workspace),
                                                                                            "vector_add.py", 10))])
    again = Results.from_dict(json.loads(json.dumps(results.to_dict())))
    assert again.tests[0].source == [7, [f"line {n}" for n in range(7, 14)]] and again.tests[0].finding == finding


def test_the_html_page_is_cards_with_the_source_marked_and_the_finding_explained():
    import re

    from grader.report.results import Status
    from grader.wire.messages import Finding

    race = Finding("races", "RaceError", "data race on shared array 'sA' at index (3, 4): write conflicts with a "
                   "read by thread (4, 3, 0) of block (0, 0, 0) with no syncthreads() in between", "mm",
                   "matmul.py", 12, (0, 0, 0), (3, 4, 0), "sA", (3, 4))
    source = [9, ["    for k in range(n // T):", "        sA[ty, tx] = A[row, k * T + tx]",
                  "        sB[ty, tx] = B[k * T + ty, col]", "        acc += sA[ty, 0] * sB[0, tx]", "", "", ""]]
    counter = "shared memory wavefronts per request (bank conflicts): 8 against the reference's 1 (at most 1 allowed)"
    timing = {"source": "modelled", "gpu": "H100", "seconds": 4e-5, "reference_seconds": 1e-5, "ratio": 4.0,
              "max_time_ratio": 1.5}
    results = Results("bob", "sim", tests=[
        TestResult("matmul::small", "matmul", 1, 1, 1, Status.PASSED),
        TestResult("matmul::tiled[n=64]", "matmul", 2, 2, 0, Status.FAILED, race.message + "\ntrace line",
                   finding=race, source=source),
        TestResult("matmul::tiled[n=65]", "matmul", 2, 2, 0, Status.FAILED, race.message, finding=race, source=source),
        TestResult("matmul::fast", "matmul", 2, 3, 0, Status.FAILED, "needs correctness first: matmul stage 2 ..."),
        TestResult("matmul::conflicts", "matmul", 3, 3, 0, Status.FAILED, counter, timing=timing),
        TestResult("matmul::secret", "matmul", 3, 4, 0, Status.FAILED, "SECRET", visibility="hidden"),
    ])
    page = html_page(results)
    assert page.startswith("<!doctype html>") and "<script" not in page and "<link" not in page
    assert page.count("<section class='card") == 3 and "id='card-matmul-2'" in page
    import html

    cards = page[:page.index("<details class='every'>")]
    assert cards.count(html.escape(race.message)) == 1  # each failure told once, with the tests it fails
    assert "fails 2 tests: <code>tiled[n=64]</code>, <code>tiled[n=65]</code>" in page
    assert "1 performance test not run: correctness first" in page and "ok (1 test)" in page
    here = re.search(r"<span class='here'><b>▶ (\d+) │ ([^<]*)</b></span>", page)
    assert here and here.groups() == ("12", "        acc += sA[ty, 0] * sB[0, tx]")
    assert page.count("▶") == 1 and "   9 │     for k in range(n // T):" in page
    assert "cuda.syncthreads()" in page and "thread (4, 3, 0)" in page and "array <code>sA</code>" in page
    assert "SECRET" not in page and "matmul::secret" not in page and "1 more test(s) are hidden" in page
    assert "<details class='every'><summary>Every test</summary>" in page and "matmul::small" in page
    svg = page[page.index("<svg"):page.index("</svg>") + 6]
    text = " ".join(t.text or "" for t in ET.fromstring(svg).iter() if t.tag.endswith("text"))
    assert "yours" in text and "reference" in text and "full credit" in text and "bank conflicts" in text
    assert "(at most 1 allowed)" not in text and "allowed" in text


def test_an_out_of_bounds_finding_names_the_missing_guard():
    from grader.report.results import Status
    from grader.wire.messages import Finding

    oob = Finding("bounds", "OutOfBoundsError", "out-of-bounds access to global array 'out' at index (1000,)",
                  "add", "../../etc/passwd", 7)
    page = html_page(Results("c", "sim", tests=[TestResult("v::odd", "v", 1, 1, 0, Status.FAILED, oob.message,
                                                           finding=oob)]))
    assert "<code>if i &lt; n:</code>" in page and "<figure class='source'>" not in page  # no source: none shown


def test_bench_rows_show_gflops_where_the_test_gave_its_operations():
    from grader.judge.perf import timing_sentence
    from grader.report import bench

    timing = {"source": "modelled", "gpu": "H100", "seconds": 1e-4, "bound": "shared memory",
              "bandwidth_fraction": 0.4, "global_bytes": 1e6, "reference_seconds": 1e-4, "ratio": 1.0,
              "max_time_ratio": 1.2, "credit": 1.0, "flops": 2.0 * 512 ** 3}
    results = Results("s", "sim", tests=[TestResult("matmul::tiled_perf", "matmul", 2, 3, 3, Status.PASSED,
                                                    timing=timing)])
    assert "2,684" in bench.table(results, width=200)  # 268 MFLOP in 100 us
    slow = Results("s", "sim", tests=[TestResult("matmul::tiled_perf", "matmul", 2, 3, 3, Status.PASSED,
                                                 timing=dict(timing, seconds=1.24e-3, reference_seconds=7.43e-4))])
    table = bench.table(slow, width=200)
    assert "1,240" in table and " 743 " in table and "e+0" not in table, table  # never 1.24e+03
    assert "2,684 GFLOP/s" in timing_sentence(timing)
    assert "GFLOP/s" not in timing_sentence({k: v for k, v in timing.items() if k != "flops"})


def test_a_students_message_with_any_characters_renders_in_every_format(tmp_path):
    """A student's exception message is any text the runner's JSON can carry: a lone surrogate
    made every format but Gradescope's crash on writing (UnicodeEncodeError, an empty report),
    control characters made the JUnit XML not well-formed and reached the terminal as escape
    sequences, and HTML or a code fence in it was Markdown's own."""
    message = ("ValueError: \ud800 <img src=x onerror=alert(1)> \x1b[2J\r25/25 \x01\n"
               "```\n# Forged heading\n```")
    r = Results(submission="alice", backend="sim")
    r.tests = [TestResult("vector_add::large", "vector_add", 1, 3, 0, "failed", message)]
    r.errors = ["could not collect: \udfff\x00"]
    r.dump(str(tmp_path / "results.json"))
    loaded = Results.load(str(tmp_path / "results.json"))
    for form in ("table", "junit", "markdown", "html", "gradescope", "prairielearn", "json"):
        text = render(loaded, form, verbose=True)
        text.encode("utf-8")
        assert not any(c in text for c in "\x1b\r\x01\x00"), form
    ET.fromstring(render(loaded, "junit").split("?>", 1)[1])
    md = markdown(loaded)
    assert "<img" not in md and "&lt;img" in md
    assert "\n````\n```\n# Forged heading\n```\n````\n" in md, "a fence the message's own cannot close"


def test_the_exit_code_counts_what_was_lost_not_what_could_not_run_here():
    """0 full marks of every test that could run on this machine; a not-gradable test keeps its
    points in the maximum (the score is not full) but is no loss of the submission's."""
    from grader.report.results import ExitCode

    passed = TestResult("ex::a", "ex", 1, 2, 2, Status.PASSED)
    timed = TestResult("ex::timed", "ex", 2, 2, 0, Status.NOT_GRADABLE, "not gradable on this machine: needs 4 GPUs")
    partial = TestResult("ex::fast", "ex", 2, 2, 1.5, Status.FAILED, "slower than the reference")
    assert Results("s", "gpu", tests=[passed, timed]).exit_code == ExitCode.FULL_MARKS
    assert Results("s", "gpu", tests=[passed, timed]).score < Results("s", "gpu", tests=[passed, timed]).max_score
    assert Results("s", "gpu", tests=[passed, timed, partial]).exit_code == ExitCode.POINTS_LOST
    assert Results("s", "gpu", tests=[passed], errors=["the judge crashed"]).exit_code == ExitCode.INTERNAL
