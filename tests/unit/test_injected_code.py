"""The runtime's own code that runs in a job's or deployment's interpreter, not .venv's: every
module copied into a top layer or named as a scoring script, and the code strings handed to an
environment's python. Each must run on the oldest Python it can meet there (3.6 for whatever a
spec's environment picks, the helpers as helper_source.for_python copies them for it; the AutoML
runners' own pinned Pythons for theirs): its grammar, and no PEP 585 (`dict[str, int]`) or
PEP 604 (`int | None`) expression evaluated at run time (`from __future__ import annotations`,
from 3.7, keeps annotations unevaluated; nothing keeps the rest).
tests/e2e/test_injected_code_e2e.py imports each on real 3.7, 3.8 and 3.12 interpreters."""

from __future__ import annotations

import ast

import pytest
from injected_code import as_copied, injected, runtime_evaluated
from support import ROOT

from mlops.environments import abi, interpreters


def test_the_checker_finds_what_kills_an_old_python_and_passes_what_does_not():
    bad = ast.parse("def f(x: dict[str, object]) -> list[int]: pass\nA = int | None\n")
    assert runtime_evaluated(bad) == ["line 1: dict[str, object]", "line 1: list[int]",
                                      "line 2: int | None"]
    assert runtime_evaluated(bad, (3, 9)) == ["line 2: int | None"]
    assert runtime_evaluated(bad, (3, 10)) == []
    lazy = ast.parse("from __future__ import annotations\n"
                     "def f(x: dict[str, object]) -> int | None: pass\ny: list[int] = []\n"
                     "Z = tuple[int, ...]\n")
    assert runtime_evaluated(lazy) == ["line 4: tuple[int, ...]"]
    assert runtime_evaluated(ast.parse("flags = 1 | 2\nfrom typing import Dict\nD = Dict[str, int]"
                                       )) == []


def test_every_injected_file_is_found():
    names = {path.name for path in injected()}
    assert {"readonly_inputs.py", "minibatch_worker.py", "azureml_run.py", "debug_hook.py",
            "inference_server.py", "mlflow_score.py", "mlflow_batch.py", "mltable_worker.py",
            "automl_standin.py", "automl_vision.py"} <= names


@pytest.mark.parametrize("path", sorted(injected()), ids=lambda p: p.name)
def test_injected_files_parse_and_evaluate_on_the_oldest_python_they_meet(path):
    oldest = injected()[path]
    tree = ast.parse(as_copied(path, oldest), feature_version=oldest)
    where = path.relative_to(ROOT)
    assert runtime_evaluated(tree, oldest) == [], f"{where} runs on Python {oldest}"


@pytest.mark.parametrize("code", [abi.IMPORT_ALL, interpreters.ASK], ids=["abi", "probe"])
def test_code_strings_run_in_an_environments_python_parse_on_the_oldest_it_meets(code):
    assert runtime_evaluated(ast.parse(code, feature_version=interpreters.OLDEST)) == []


def test_the_no_code_scorer_that_died_on_python_3_7_is_what_the_checker_refuses():
    old = "def as_mlflow_request(body: dict[str, object]) -> dict[str, object]:\n    return body\n"
    assert runtime_evaluated(ast.parse(old, feature_version=(3, 7))) == [
        "line 1: dict[str, object]", "line 1: dict[str, object]"]


def test_the_annotations_future_import_is_what_python_3_6_refuses():
    lazy = ast.parse("from __future__ import annotations\ndef f(x: int | None): pass\n")
    assert runtime_evaluated(lazy, (3, 6)) == ["line 1: from __future__ import annotations"]
    assert runtime_evaluated(lazy, (3, 7)) == []
