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
