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
