"""Entry points end with their main's exit code and skip the garbage collection of shutdown."""

from __future__ import annotations

import ast

import pytest
from support import ROOT, python_files

# What every entry module's `if __name__ == "__main__":` block calls, but these: the watchdog and
# the local endpoint's front import the standard library alone (they start from a path, in any
# environment's Python), the mini-batch worker runs in the environment's own Python (it
# freezes the collector itself), the AutoML stand-in, the image AutoML trial and the MLTable
# worker run in environments of their own, which hold no mlops (the stand-in and the trial
# freeze the collector themselves), and the MLflow server leaves by os._exit.
OWN_WAY_OUT = {"mlops/runtime/watchdog.py", "mlops/runtime/mlflow_serve.py",
               "mlops/endpoints/front.py", "mlops/runtime/minibatch_worker.py",
               "mlops/automl/standin/automl_standin.py", "mlops/runtime/mltable_worker.py",
               "mlops/automl/vision/automl_vision.py", "mlops/runtime/inference_server.py"}


def entry_modules() -> list[str]:
    found = []
    for folder in ("src", "mlops"):
        for path in sorted(python_files(ROOT / folder)):
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
