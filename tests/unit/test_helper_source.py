"""The runtime's helpers as a job's own Python reads them (mlops/environments/helper_source.py):
as written from 3.7, without annotations for 3.6, whose grammar has no annotations future."""

from __future__ import annotations

import ast
from pathlib import Path

from injected_code import runtime_evaluated

from mlops.environments import interpreters
from mlops.environments.closures import bytecode_flags
from mlops.environments.helper_source import for_python
from mlops.environments.interpreters import Python

SOURCE = '''from __future__ import annotations, division
import os

LIMIT: int = 3
SEEN: dict[str, int]


class Places:
    root: str | None

    def __init__(self, root: str | None = None, *rest: int, **named: object) -> None:
        self.root: str | None = root


def first(items: list[str]) -> str | None:
    return items[0] if items else None
'''


def test_python_3_7_and_newer_read_the_helpers_as_written():
    assert for_python(SOURCE, (3, 7)) == SOURCE and for_python(SOURCE, (3, 12)) == SOURCE


def test_python_3_6_reads_them_without_annotations_and_the_annotations_future():
    text = for_python(SOURCE, (3, 6))
    tree = ast.parse(text, feature_version=(3, 6))
    assert runtime_evaluated(tree, (3, 6)) == []
    assert "annotations" not in text and "from __future__ import division" in text
    assert "LIMIT = 3" in text and "self.root = root" in text
    assert "def first(items):" in text and "->" not in text
    namespace: dict[str, object] = {}
    exec(compile(text, "helper", "exec"), namespace)  # it still does what it did
    assert namespace["first"](["a"]) == "a" and namespace["Places"]("r").root == "r"


def test_python_3_6_is_an_interpreter_the_runtime_runs_environments_on():
    assert interpreters.supported("3.6") and not interpreters.supported("3.5")


def test_a_python_3_6_environment_is_compiled_by_its_own_compileall_not_uvs_script():
    # uv's compile script reads py_compile.PycInvalidationMode (3.7): it died on 3.6
    old, new = (Python(Path(f"/p/python{v[:3]}"), v) for v in ("3.6.15", "3.7.16"))
    assert bytecode_flags(old) == [] and bytecode_flags(new) == ["--compile-bytecode"]
