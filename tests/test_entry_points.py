"""Entry points end with their main's exit code and skip the garbage collection of shutdown."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from conftest import ROOT

# What every entry module's `if __name__ == "__main__":` block calls, but these: the watchdog
# imports the standard library alone (it must start in milliseconds, from a path), and the MLflow
# server leaves by os._exit.
OWN_WAY_OUT = {"mlops/runtime/watchdog.py", "mlops/runtime/mlflow_server.py"}

PROBE = """
import atexit, gc, sys
from {package} import exit_with

atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
exit_with(lambda: 1 / 0 if sys.argv[1] == "raise" else (None if sys.argv[1] == "none"
                                                          else int(sys.argv[1])))
"""


@pytest.mark.parametrize("package", ["image_classifier", "mlops"])
@pytest.mark.parametrize(("outcome", "code"), [("3", 3), ("0", 0), ("none", 0), ("raise", 1)])
def test_exit_with_keeps_mains_exit_code_and_freezes_what_lives(package, outcome, code):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", PROBE.format(package=package), outcome],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == code, done.stderr
    assert "frozen at exit: True" in done.stdout  # the exit's collection has nothing to scan
    assert ("ZeroDivisionError" in done.stderr) == (outcome == "raise")  # the traceback, as ever


def entry_modules() -> list[str]:
    found = []
    for folder in ("src", "mlops"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if 'if __name__ == "__main__":' in path.read_text():
                found.append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("module", sorted(set(entry_modules()) - OWN_WAY_OUT))
def test_every_entry_module_ends_with_exit_with(module):
    tree = ast.parse((ROOT / module).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "__name__ == '__main__'")
    assert ast.unparse(block.body[-1]) == "exit_with(main)", \
        f"{module}: end with exit_with(main) (from image_classifier / mlops), not sys.exit"


def test_the_exceptions_are_still_entry_modules():
    assert set(entry_modules()) >= OWN_WAY_OUT
