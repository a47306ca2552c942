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
from grader.report.results import Results, TestResult


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
    ])
    compact = render(results, "table")
    assert compact.count("out-of-bounds access at index 33") == 1
    assert "fails 2 tests: a[n=1], a[n=33]" in compact and "1 performance test not run" in compact
    assert "1 not gradable here" in compact and "ok (1 test)" in compact
    assert "ex::b" not in compact and "-v for every test" in compact
    verbose = render(results, "table", verbose=True)
    assert "ex::b" in verbose and verbose.count("out-of-bounds access at index 33") == 2


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
