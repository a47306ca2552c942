"""Helpers of the sandbox suites (tests/conftest.py has their fixtures)."""

import os

import pytest


def unavailable(reason: str):
    """A sandbox this test needs is missing: skipped here, a failure in CI (where it must run)."""
    if os.environ.get("CI"):
        pytest.fail(f"the sandbox tests must run in CI: {reason}", pytrace=False)
    pytest.skip(reason)
