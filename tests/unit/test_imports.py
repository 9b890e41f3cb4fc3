"""The house rules of mlops/: rooms in one order, front doors thin, nothing below the top
imports one.

A front door is a module at the top of mlops/ that `python -m mlops.<name>` runs (make and the
azml command call them); the rooms below hold the engines, in ROOM_ORDER (mlops/__init__.py's
map): a room imports only rooms before it. Imports inside functions count: a hidden edge is
still an edge.
"""

from __future__ import annotations

import ast
import functools
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
from support import ROOT, python_files

PACKAGE = ROOT / "mlops"
SHARED = {"mlops", "mlops.errors", "mlops.specs", "mlops.project",
          "mlops.yaml_limits"}  # every room may use these
FRONT_DOORS = {f"mlops.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"} - SHARED
MAX_FRONT_DOOR_LINES = 70


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once for every test that reads it."""
    return ast.parse(path.read_text())


@functools.cache
def known_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in python_files(PACKAGE))


def imported(path: Path, top_level_only: bool = False) -> set[str]:
    """The mlops modules a file imports (`from mlops import x` names mlops.x when x is one)."""
    tree = parsed(path)
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in known_modules()}


ROOMS = sorted(p for p in python_files(PACKAGE) if p.parent != PACKAGE)
# Bottom to top: each room may import the rooms before it (and SHARED), never one after it.
ROOM_ORDER = ("workspace", "environments", "runtime", "automl", "checks", "orchestrators",
              "endpoints", "api", "cli")


def room_of(module: str) -> str:
    """A module's room: its folder under mlops/, "shared" for SHARED, "door" for a front
    door."""
    if module in SHARED:
        return "shared"
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (PACKAGE / parts[1]).is_dir() else "door"


def rank(room: str) -> int:
    return -1 if room == "shared" else len(ROOM_ORDER) if room == "door" else \
        ROOM_ORDER.index(room)


def test_every_room_has_its_place_in_the_order():
    rooms = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOM_ORDER), "add the new room to ROOM_ORDER (and mlops/__init__.py)"


@pytest.mark.parametrize("path", python_files(PACKAGE),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_room_imports_only_rooms_below_it(path):
    """Function-level imports included: an import hidden in a function to dodge a circle is
    still an edge up."""
    here = room_of(module_name(path))
    up = sorted(m for m in imported(path) if rank(room_of(m)) > rank(here))
    assert not up, f"{module_name(path)} ({here}) imports rooms above it: {up}"


def test_the_front_doors_are_the_top_modules_make_runs():
    assert {"mlops.run", "mlops.validate", "mlops.serve", "mlops.batch", "mlops.envs",
            "mlops.workflow_lint", "mlops.assets", "mlops.azml"} == FRONT_DOORS


@pytest.mark.parametrize("path", ROOMS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_room_imports_a_front_door(path):
    assert not imported(path) & FRONT_DOORS, f"{path} imports a front door"


@pytest.mark.parametrize("door", sorted(FRONT_DOORS))
def test_a_front_door_is_thin_and_imports_no_other(door):
    path = ROOT / (door.replace(".", "/") + ".py")
    code = [line for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    assert len(code) <= MAX_FRONT_DOOR_LINES, f"{door}: {len(code)} lines; move the engine down"
    assert not imported(path) & (FRONT_DOORS - {door})


def test_the_rooms_import_no_circle_at_load_time():
    graph = {module_name(p): imported(p, top_level_only=True) - {module_name(p)}
             for p in python_files(PACKAGE)}
    # a package's __init__ is loaded with every module below it: an edge to the package is fine
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")


SHIPPED = ROOT / "src" / "image_classifier"


def load_time_imports(path: Path, package: str) -> set[str]:
    """The package's modules a file imports outside functions: at load time, and under `if
    TYPE_CHECKING:` too (a circle there is still two modules that need each other)."""
    tree = parsed(path)
    found, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {f"{package}.{node.module}"} if node.module else \
                {f"{package}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package):
            found.add(node.module)
        todo += list(ast.iter_child_nodes(node))
    return found


def test_the_shipped_package_has_no_import_circle():
    graph = {f"image_classifier.{p.stem}": load_time_imports(p, "image_classifier") -
             {f"image_classifier.{p.stem}"} for p in SHIPPED.glob("*.py") if p.stem != "__init__"}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")


HOUSE = sorted([*python_files(PACKAGE), *python_files(SHIPPED)])
MAX_FUNCTION_LINES = 40
MAX_PARAMETERS = 6


def functions(path: Path):
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def bare_dicts(path: Path) -> list[int]:
    """Lines of annotations that say `dict` without its key and value types."""
    tree = parsed(path)
    typed = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
    annotations = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations += [a.annotation for a in args.posonlyargs + args.args +
                            args.kwonlyargs if a.annotation] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    return [name.lineno for ann in annotations if ann is not None for name in ast.walk(ann)
            if isinstance(name, ast.Name) and name.id == "dict" and id(name) not in typed]


@pytest.mark.parametrize("path", HOUSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_functions_are_short_take_few_parameters_and_say_their_types(path):
    for node in functions(path):
        lines = node.end_lineno - node.lineno + 1
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        count = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
        where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        assert lines <= MAX_FUNCTION_LINES, f"{where}: {lines} lines; split it"
        assert count <= MAX_PARAMETERS, f"{where}: {count} parameters; group them in a dataclass"
    assert not bare_dicts(path), f"{path.relative_to(ROOT)}: bare dict at {bare_dicts(path)}"
