"""Shared fixtures for the vigil pytest suites (run by ctest with
PYTHONPATH=build/python and VIGIL_RULECHECK set)."""
import os
import shutil

import pytest


@pytest.fixture
def rulecheck():
    path = os.environ.get("VIGIL_RULECHECK") or shutil.which("rulecheck")
    if not path or not os.path.exists(path):
        pytest.fail("VIGIL_RULECHECK is not set to the rulecheck binary (ctest sets it)")
    return path
