"""JUnit XML, for CI systems and LMS plugins that read it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .results import Results, Status
from .text import first_line, num


def junit(results: Results) -> str:
    suite = ET.Element("testsuite", name=results.submission, tests=str(len(results.tests)),
                       failures=str(sum(t.status == Status.FAILED for t in results.tests)),
                       skipped=str(sum(t.status == Status.NOT_GRADABLE for t in results.tests)),
                       errors=str(len(results.errors)), time=str(results.execution_time))
    for t in results.tests:
        case = ET.SubElement(suite, "testcase", classname=t.exercise, name=t.name, time="0")
        ET.SubElement(case, "properties").extend([
            ET.Element("property", name="score", value=num(t.score)),
            ET.Element("property", name="max_score", value=num(t.max_score)),
            ET.Element("property", name="stage", value=str(t.stage)),
        ])
        if t.status == Status.FAILED:
            failure = ET.SubElement(case, "failure", message=first_line(t.output))
            failure.text = t.output
        elif t.status == Status.NOT_GRADABLE:
            ET.SubElement(case, "skipped", message=first_line(t.output)).text = t.output
    for error in results.errors:
        ET.SubElement(ET.SubElement(suite, "testcase", classname="gpugrade", name="grader"), "error",
                      message=first_line(error)).text = error
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode", xml_declaration=True)
