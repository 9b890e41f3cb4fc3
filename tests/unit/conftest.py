"""The unit tests (make test-quick): no process, server or training. A test here that starts a
process fails at once and says where it belongs."""

from __future__ import annotations

import os
import subprocess

import pytest


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started a process: move the test to tests/e2e/")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)
