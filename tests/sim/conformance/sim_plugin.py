"""pytest plugin: run numba-cuda's own test modules on grader.sim.

Loaded with `-p sim_plugin` (this folder on PYTHONPATH) before the test modules are imported, so
that decorators evaluated at import (skip_unless_cc_XX, eager `@cuda.jit(sig)`) already see the
simulated device. NUMBA_ENABLE_CUDASIM must be unset: numba-cuda's skip_on_cudasim decorators
then do not skip, and every kernel launch goes to grader.sim.

With GRADER_CONFORMANCE_STOCK=1 it installs nothing (the caller sets NUMBA_ENABLE_CUDASIM=1 to
measure numba-cuda's stock simulator with the same counting).

Environment: GRADER_SIM_EXECUTOR (auto|simt|thread, default auto), GRADER_SIM_DEVICES (default
2), GRADER_CONFORMANCE_JSON (write one outcome per test method there, see `_Outcomes`),
GRADER_CONFORMANCE_LAUNCHES (write the executor of every launch and the fallback reasons,
tallied, to that path + ".<pid>", see `_Launches`).
"""

from __future__ import annotations

import json
import os

import pytest

STOCK = os.environ.get("GRADER_CONFORMANCE_STOCK") == "1"


def pytest_configure(config):
    path = os.environ.get("GRADER_CONFORMANCE_JSON")
    if path:
        config.pluginmanager.register(_Outcomes(path), "grader_conformance_outcomes")
    if STOCK:
        # import numba.cuda under its own name before pytest imports the test modules, which
        # (import mode importlib) could otherwise bind numba-cuda's folder to the name `cuda`
        import numba.cuda  # noqa: F401
        return
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise RuntimeError("unset NUMBA_ENABLE_CUDASIM: this plugin runs the tests on grader.sim")
    import grader.sim as sim

    simulator = sim.install(devices=int(os.environ.get("GRADER_SIM_DEVICES", "2")),
                            executor=os.environ.get("GRADER_SIM_EXECUTOR", "auto"))
    launches = os.environ.get("GRADER_CONFORMANCE_LAUNCHES")
    if launches:
        config._grader_launches = _Launches(f"{launches}.{os.getpid()}")
        simulator.tracer._sinks.append(config._grader_launches)  # a sink keeping no record


class _Launches(list):
    """A launch-record sink that keeps only the tally: {executor: n, "reasons": {reason: n}}."""

    def __init__(self, path: str):
        super().__init__()
        self.path, self.tally = path, {"simt": 0, "thread": 0, "reasons": {}}

    def append(self, record):
        self.tally[record.executor] += 1
        if record.fallback_reason:
            reasons = self.tally["reasons"]
            reasons[record.fallback_reason] = reasons.get(record.fallback_reason, 0) + 1


def pytest_unconfigure(config):
    launches = getattr(config, "_grader_launches", None)
    if launches is not None:
        with open(launches.path, "w") as f:
            json.dump(launches.tally, f)
    if not STOCK:
        import grader.sim as sim

        sim.uninstall()


# numba-cuda's CUDATestCase uses this class fixture, defined in numba-cuda's repository conftest
# (not shipped in the wheel); only its FileCheck tests read the attribute.
@pytest.fixture(scope="class")
def initialize_from_pytest_config(request):
    request.cls._dump_failed_filechecks = False


def _message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    elif isinstance(report.longrepr, tuple):  # skips: (file, line, reason)
        text = str(report.longrepr[2])
    else:
        text = str(report.longrepr or "")
    text = text.strip().splitlines()[0] if text.strip() else ""
    return text[:300]


class _Outcomes:
    """One outcome per test method (subtests folded in): "failed" when any phase or subtest
    failed, "xfailed" for unittest's expectedFailure, "skipped", else "passed"; with the first
    failure's (or the skip's) one-line message."""

    def __init__(self, path: str):
        self.path = path
        self.tests: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report):
        name = report.nodeid
        entry = self.tests.setdefault(name, {"outcome": "passed", "message": ""})
        if report.failed:
            if entry["outcome"] != "failed":
                entry["outcome"], entry["message"] = "failed", _message(report)
        elif report.skipped and entry["outcome"] == "passed":
            if hasattr(report, "wasxfail"):
                entry["outcome"], entry["message"] = "xfailed", str(report.wasxfail)[:300]
            else:
                entry["outcome"], entry["message"] = "skipped", _message(report)

    def pytest_collectreport(self, report):
        if report.failed:
            self.tests["<collection>"] = {"outcome": "error", "message": _message(report)}

    def pytest_sessionfinish(self, session):
        with open(self.path, "w") as f:
            json.dump(self.tests, f, indent=1, sort_keys=True)
