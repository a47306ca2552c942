"""numba-cuda's own test suite (shipped in its wheel) on grader.sim: no module may pass fewer
tests than recorded in tests/sim/conformance/expected.json, and the total must beat numba-cuda's
stock simulator. docs/CONFORMANCE.md lists every test that does not pass, with its reason;
`tests/sim/conformance/numba_suite.py --full --thread --stock --write` re-records both.
Regression tests for what the suite found: test_conformance_fixes.py."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "conformance"
sys.path.insert(0, str(HERE))
import numba_suite as conformance  # noqa: E402


needs_suite = [
    pytest.mark.slow,
    pytest.mark.skipif(conformance.cudapy_dir() is None,
                       reason="numba-cuda (with its test suite) is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("filecheck") is None,
                       reason="numba-cuda's test modules import `filecheck` (dev extra)"),
]


def suite_test(f):
    for mark in needs_suite:
        f = mark(f)
    return f


@pytest.fixture(scope="module")
def timed_run():
    outcomes, _ = conformance.run(conformance.fast_modules(), "auto",
                                  deselect=conformance.fast_deselect(), timeout=300)
    return outcomes


@pytest.fixture(scope="module")
def expected():
    return json.loads((HERE / "expected.json").read_text())


@suite_test
def test_every_module_passes_at_least_its_recorded_count(timed_run, expected):
    counts = conformance.summarise(timed_run)
    below = []
    for module in conformance.fast_modules():
        floor = expected["modules"][module]["fast_passed_min"]
        got = counts.get(module, {}).get("passed", 0)
        if got < floor:
            lost = sorted(n for n, e in timed_run.items() if conformance.module_of(n) == module
                          and e["outcome"] != "passed"
                          and n not in expected["not_passing"])
            detail = "; ".join(f"{n}: {timed_run[n]['message']}" for n in lost[:5])
            below.append(f"{module}: {got} passed < {floor} recorded ({detail or 'see numba_suite.py'})")
    assert not below, "\n".join(below)


@suite_test
def test_total_beats_the_stock_simulator(timed_run, expected):
    modules = conformance.fast_modules()
    ours = sum(1 for n, e in timed_run.items()
               if conformance.module_of(n) in modules and e["outcome"] == "passed")
    stock = sum(max(expected["modules"][m].get("stock", {}).get("passed", 0),
                    expected["modules"][m]["stock_reference"] or 0) for m in modules)
    assert ours > stock, f"grader.sim passes {ours} tests, the stock simulator {stock}"
