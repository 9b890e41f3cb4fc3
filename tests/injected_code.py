"""The runtime's code that runs in an interpreter it does not own (a job's or deployment's
environment, an AutoML runner's), and the check that it runs on the oldest Python it meets there:
tests/unit/test_injected_code.py (grammar, annotations) and tests/e2e/test_injected_code_e2e.py
(imported on real interpreters) share this list."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mlops.automl import translate, vision_job
from mlops.endpoints import deployment
from mlops.environments import activation, interpreters
from mlops.environments.helper_source import for_python
from mlops.runtime import debugging, mltable

COPIED_FOR_PYTHON = {*(path for path, _ in activation.HELPERS), debugging.HOOK}
BUILTIN_GENERICS = {"dict", "list", "tuple", "set", "frozenset", "type"}


def injected() -> dict[Path, tuple[int, int]]:
    """Every file the runtime runs in an interpreter it does not own, with the oldest Python it
    meets there (the helpers and the debug hook as copied: as_copied)."""
    oldest = interpreters.OLDEST
    files = {path: oldest for path, _ in activation.HELPERS}
    files[debugging.HOOK] = oldest
    files.update({deployment.NOCODE / name: oldest for name in deployment.NOCODE_SCRIPTS.values()})
    files[mltable.WORKER] = tuple(map(int, interpreters.HERE.minor.split(".")))
    for folder in (translate.STANDIN, vision_job.VISION):  # runners with a Python of their own
        python = re.search(r"python=(\d+)\.(\d+)", (folder / "conda.yml").read_text())
        files.update({path: (int(python[1]), int(python[2])) for path in folder.glob("*.py")})
    return files


def as_copied(path: Path, python: tuple[int, int]) -> str:
    """The text of `path` as the runtime writes it for Python `python`: the helpers and the
    debug hook through helper_source.for_python, the rest as they are."""
    text = path.read_text()
    return for_python(text, python) if path in COPIED_FOR_PYTHON else text


def _builtin_generic(node: ast.AST) -> bool:
    """`dict[str, int]`: PEP 585, from Python 3.9."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
        and node.value.id in BUILTIN_GENERICS


def _union(node: ast.AST) -> bool:
    """`int | None`: PEP 604, from Python 3.10 (`1 | 2` is an integer's or)."""
    types = {*BUILTIN_GENERICS, "str", "int", "float", "bool", "bytes"}
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and any(
        isinstance(side, ast.Name) and side.id in types
        or isinstance(side, ast.Constant) and side.value is None
        for side in (node.left, node.right))


def runtime_evaluated(tree: ast.Module, python: tuple[int, int] = (3, 7)) -> list[str]:
    """PEP 585 (before 3.9) and PEP 604 (before 3.10) expressions that `python` evaluates and
    fails on: all of them, less the annotations `from __future__ import annotations` leaves as
    strings."""
    future = [node for node in tree.body if isinstance(node, ast.ImportFrom) and
              node.module == "__future__" and any(a.name == "annotations" for a in node.names)]
    if future and python < (3, 7):  # the future import itself is a SyntaxError there
        return [f"line {node.lineno}: from __future__ import annotations" for node in future]
    lazy = bool(future)
    skipped: set[int] = set()
    if lazy:
        for node in ast.walk(tree):
            notes = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                notes = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                args.vararg, args.kwarg] if a is not None]
                notes.append(node.returns)
            elif isinstance(node, ast.AnnAssign):
                notes = [node.annotation]
            for note in filter(None, notes):
                skipped |= {id(inner) for inner in ast.walk(note)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if python < (3, 9) and _builtin_generic(node) or python < (3, 10) and _union(node):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(found)
