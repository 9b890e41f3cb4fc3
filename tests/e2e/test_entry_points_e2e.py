"""Entry points end with their main's exit code and skip the garbage collection of shutdown."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import ROOT

PROBE = """
import atexit, gc, sys
from {package} import exit_with

atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
exit_with(lambda: 1 / 0 if sys.argv[1] == "raise" else (None if sys.argv[1] == "none"
                                                          else int(sys.argv[1])))
"""


@pytest.mark.proof
@pytest.mark.parametrize("package", ["image_classifier", "mlops"])
@pytest.mark.parametrize(("outcome", "code"), [("3", 3), ("0", 0), ("none", 0), ("raise", 1)])
def test_exit_with_keeps_mains_exit_code_and_freezes_what_lives(package, outcome, code):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", PROBE.format(package=package), outcome],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == code, done.stderr
    assert "frozen at exit: True" in done.stdout  # the exit's collection has nothing to scan
    assert ("ZeroDivisionError" in done.stderr) == (outcome == "raise")  # the traceback, as ever
