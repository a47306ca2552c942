import pytest

import grader.sim as sim


@pytest.fixture
def simulator():
    """The simulator installed with the per-thread executor for one test."""
    s = sim.install(executor="thread")
    try:
        yield s
    finally:
        sim.uninstall()


@pytest.fixture(params=["recorded", "compiled"])
def thread_sim(request):
    """The per-thread executor with every checker on (accesses through the recorders), and
    with the race and uninitialised-read checkers off (accesses compiled inline,
    grader/sim/thread/access.py): tests of what both must do."""
    checks = None if request.param == "recorded" else sim.Checks(off={"races", "uninitialised"})
    s = sim.install(executor="thread", checks=checks)
    try:
        yield s
    finally:
        sim.uninstall()


@pytest.fixture(params=["simt", "thread"])
def executor(request):
    """The simulator installed with each executor in turn (a test module's parametrize of the
    same name takes precedence)."""
    sim.install(executor=request.param)
    try:
        yield request.param
    finally:
        sim.uninstall()
