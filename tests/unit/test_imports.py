"""The house rules of mlops/: rooms in one order, front doors thin, nothing below the top
imports one, the runtime reached through its surface alone.

A front door is a module at the top of mlops/ that `python -m mlops.<name>` runs (make and the
azml command call them); the rooms below hold the engines, in ROOM_ORDER (mlops/__init__.py's
map): a room imports only rooms before it. Imports inside functions count: a hidden edge is
still an edge. `from mlops.runtime import X` is an edge to the module below that defines X (the
package loads it on first use), so circles through the surface are still seen.
"""

from __future__ import annotations

import ast
import functools
import importlib
import textwrap
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
from support import ROOT, Syntax, python_files, syntax

PACKAGE = ROOT / "mlops"
SHARED = {"mlops", "mlops.errors", "mlops.specs", "mlops.project",
          "mlops.yaml_limits"}  # every room may use these
FRONT_DOORS = {f"mlops.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"} - SHARED
MAX_FRONT_DOOR_LINES = 70


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parsed(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once for every test that reads it."""
    return syntax(path).tree


@functools.cache
def known_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in python_files(PACKAGE))


@functools.cache
def lazy_names(package: str) -> dict[str, str]:
    """The names a package loads on first use (PEP 562) -> the module that defines each: what
    its `if TYPE_CHECKING:` block imports (mlops/runtime/__init__.py)."""
    init = ROOT.joinpath(*package.split("."), "__init__.py")
    if not init.is_file():
        return {}
    blocks = [node.body for node in parsed(init).body if isinstance(node, ast.If) and
              isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"]
    return {alias.asname or alias.name: node.module for body in blocks for node in body
            if isinstance(node, ast.ImportFrom) for alias in node.names}


@functools.cache
def imported(path: Path, top_level_only: bool = False) -> frozenset[str]:
    """The mlops modules a file imports (`from mlops import x` names mlops.x when x is one;
    `from mlops.runtime import X` the module that defines X)."""
    nodes = parsed(path).body if top_level_only else \
        syntax(path).nodes(ast.Import, ast.ImportFrom)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            lazy = lazy_names(node.module)
            found |= {lazy.get(alias.name, f"{node.module}.{alias.name}")
                      for alias in node.names}
    return frozenset(name for name in found if name in known_modules())


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


def test_a_room_imports_only_rooms_below_it():
    """Function-level imports included: an import hidden in a function to dodge a circle is
    still an edge up. One test per rule, naming every offender, as the rules below: a test per
    file was pytest's own work 666 times over for four checks."""
    found = []
    for path in python_files(PACKAGE):
        here = room_of(module_name(path))
        up = sorted(m for m in imported(path) if rank(room_of(m)) > rank(here))
        found += [f"{module_name(path)} ({here}) imports rooms above it: {up}"] if up else []
    assert not found, "\n".join(found)


def test_the_front_doors_are_the_top_modules_make_runs():
    assert {"mlops.run", "mlops.validate", "mlops.serve", "mlops.batch", "mlops.envs",
            "mlops.workflow_lint", "mlops.assets", "mlops.azml"} == FRONT_DOORS


def test_no_room_imports_a_front_door():
    found = [f"{path} imports a front door" for path in ROOMS if imported(path) & FRONT_DOORS]
    assert not found, "\n".join(found)


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


RUNTIME = "mlops.runtime"


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a from-import names, `from ..runtime.job import x` in mlops.api too."""
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def surface_breaches(code: Syntax, package: str) -> list[str]:
    """Imports (in functions too) that pass by the runtime's surface: a module below
    mlops.runtime, the package as a whole, or a name that is not in its `__all__`."""
    surface = set(importlib.import_module(RUNTIME).__all__)
    found = []
    for node in code.nodes(ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name == RUNTIME or alias.name.startswith(f"{RUNTIME}.")]
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node, package)
            names = [alias.name for alias in node.names]
            if source.startswith(f"{RUNTIME}.") or (source == "mlops" and "runtime" in names):
                found.append(f"line {node.lineno}: from {source} import {', '.join(names)}")
            elif source == RUNTIME:
                found += [f"line {node.lineno}: {name} is not in {RUNTIME}.__all__"
                          for name in names if name not in surface]
    return found


ABOVE_RUNTIME = [p for p in python_files(PACKAGE) if rank(room_of(module_name(p))) >
                 rank("runtime")]


def test_the_rooms_above_the_runtime_reach_it_through_its_surface_only():
    found = []
    for path in ABOVE_RUNTIME:
        package = module_name(path) if path.name == "__init__.py" else \
            module_name(path).rpartition(".")[0]
        breaches = surface_breaches(syntax(path), package)
        found += [f"{path.relative_to(ROOT)}: {breaches}"] if breaches else []
    assert not found, "import `from mlops.runtime import X`, X one of its __all__ (add a name " \
        "there only when a room needs it):\n" + "\n".join(found)


def test_the_surface_rule_finds_each_way_past_it():
    planted = Syntax.of(ast.parse("from mlops.runtime.engine import Runtime\n"
                        "import mlops.runtime.launch\n"
                        "from mlops.runtime import Task, engine\n"
                        "from mlops import errors, runtime\n"
                        "def f():\n    from ..runtime.job import Job\n"))
    breaches = surface_breaches(planted, "mlops.orchestrators")
    assert [b.split(":")[0] for b in breaches] == [f"line {n}" for n in (1, 2, 3, 4, 6)]
    assert "engine is not in mlops.runtime.__all__" in breaches[2]
    assert "from mlops.runtime.job import Job" in breaches[4]
    assert not surface_breaches(Syntax.of(ast.parse("from mlops.runtime import Runtime, Task\n"
                                                    "from mlops.runtime_notes import x\n")),
                                "mlops.api")


def test_a_name_through_the_surface_is_an_edge_to_the_module_that_defines_it():
    """The circle and room rules see where `from mlops.runtime import X` really leads."""
    assert imported(PACKAGE / "orchestrators" / "jobs.py") >= {
        "mlops.runtime", "mlops.runtime.engine", "mlops.runtime.job", "mlops.runtime.launch"}


def test_the_runtime_surface_is_one_table_loaded_on_first_use():
    """__all__, the lazy table and the TYPE_CHECKING imports name the same things; each name
    is the object its module defines; the package itself imports nothing at load time."""
    runtime = importlib.import_module(RUNTIME)
    table = runtime._WHERE
    assert len(runtime.__all__) == len(set(runtime.__all__)) and set(runtime.__all__) == \
        set(table)
    init = parsed(PACKAGE / "runtime" / "__init__.py")
    checked = {alias.asname or alias.name: node.module.rpartition(".")[2] + (
        f":{alias.name}" if alias.asname not in (None, alias.name) else "")
        for block in init.body if isinstance(block, ast.If) for node in block.body
        if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert checked == table, "the TYPE_CHECKING imports and _WHERE differ"
    submodules = {m.rpartition(".")[2] for m in known_modules() if m.startswith(f"{RUNTIME}.")}
    assert not set(table) & submodules, "a surface name would hide a module of the same name"
    for name, where in table.items():
        module, _, own = where.partition(":")
        defined = getattr(importlib.import_module(f"{RUNTIME}.{module}"), own or name)
        assert getattr(runtime, name) is defined, name
    loaded = {alias.name for node in init.body if isinstance(node, ast.Import)
              for alias in node.names} | {node.module for node in init.body
                                          if isinstance(node, ast.ImportFrom)}
    assert loaded <= {"__future__", "importlib", "typing"}, "mlops.runtime loads at import"


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


def functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return syntax(path).nodes(ast.FunctionDef, ast.AsyncFunctionDef)


def bare_dicts(path: Path) -> list[int]:
    """Lines of annotations that say `dict` without its key and value types."""
    code = syntax(path)
    typed = {id(n.value) for n in code.nodes(ast.Subscript)}
    annotations = [node.annotation for node in code.nodes(ast.AnnAssign)]
    for node in functions(path):
        args = node.args
        annotations += [a.annotation for a in args.posonlyargs + args.args +
                        args.kwonlyargs if a.annotation] + [node.returns]
    return [name.lineno for ann in annotations if ann is not None for name in ast.walk(ann)
            if isinstance(name, ast.Name) and name.id == "dict" and id(name) not in typed]


def house_faults(path: Path) -> list[str]:
    """A file's functions over MAX_FUNCTION_LINES or MAX_PARAMETERS, and its bare dicts."""
    found = []
    for node in functions(path):
        lines = node.end_lineno - node.lineno + 1
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        count = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
        where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        found += [f"{where}: {lines} lines; split it"] if lines > MAX_FUNCTION_LINES else []
        found += [f"{where}: {count} parameters; group them in a dataclass"] \
            if count > MAX_PARAMETERS else []
    dicts = bare_dicts(path)
    return found + ([f"{path.relative_to(ROOT)}: bare dict at {dicts}"] if dicts else [])


def test_functions_are_short_take_few_parameters_and_say_their_types():
    found = [fault for path in HOUSE for fault in house_faults(path)]
    assert not found, "\n".join(found)


# Keyword construction: state past 3 fields is built by name, and no call of ours leans on the
# position of a fifth argument. Checked in every Python file of ours, tests and scripts included.
CHECKED = sorted(p for folder in ("mlops", "src", "scripts", "tests")
                 for p in python_files(ROOT / folder))
MAX_POSITIONAL_FIELDS = 3
MAX_POSITIONAL_ARGUMENTS = 4
# Callees exempt from MAX_POSITIONAL_ARGUMENTS: not ours to change, and positional by design.
# Each is matched against the callee as written (`ast.unparse(call.func)`): a name exactly, "x."
# as a prefix (every function of a module or logger), ".x" as a suffix (a method of any object).
POSITIONAL_BY_DESIGN = (
    "print", "max", "min", "range",  # builtins that take a run of values
    "log.", "logger.", "logging.", "warnings.warn",  # logging's %-style arguments
    ".format", ".join", "Path", ".joinpath",  # str.format, "...".join, os.path.join, path parts
    "struct.pack", "struct.unpack",  # a binary layout's values, in the layout's order
    "torch.", "np.", "numpy.",  # tensor and array shapes (torch.zeros(a, b, c, d, e))
)


def is_dataclass(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return getattr(target, "id", getattr(target, "attr", "")) == "dataclass"


def positional_fields(node: ast.ClassDef) -> list[str]:
    """The fields a dataclass takes by position: those before a `_: KW_ONLY` marker."""
    names = []
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        annotation = ast.unparse(stmt.annotation)
        if annotation.endswith("KW_ONLY"):
            break
        if "ClassVar" not in annotation:
            names.append(stmt.target.id)
    return names


def positional_dataclasses(code: Syntax) -> list[str]:
    """Dataclasses with more than MAX_POSITIONAL_FIELDS fields a caller could give by position."""
    found = []
    for node in code.nodes(ast.ClassDef):
        for deco in node.decorator_list:
            kw_only = isinstance(deco, ast.Call) and any(
                k.arg == "kw_only" and getattr(k.value, "value", False) for k in deco.keywords)
            if is_dataclass(deco) and not kw_only and \
                    len(positional_fields(node)) > MAX_POSITIONAL_FIELDS:
                found.append(f"{node.lineno} {node.name}")
    return found


def variadic(code: Syntax) -> dict[str, int]:
    """Functions this file defines with `*args` (an argv, a folder's parts): name -> how many
    named parameters come before it. The values a call spreads into `*args` are one list given
    inline, not positions a reader must count."""
    found = {}
    for node in code.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
        if node.args.vararg:
            names = [a.arg for a in node.args.posonlyargs + node.args.args]
            found[node.name] = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
    return found


def exempt(callee: str) -> bool:
    return any(callee == rule or (rule.endswith(".") and callee.startswith(rule))
               or (rule.startswith(".") and callee.endswith(rule)) for rule in POSITIONAL_BY_DESIGN)


def positional_calls(code: Syntax) -> list[str]:
    """Calls that pass more than MAX_POSITIONAL_ARGUMENTS arguments by position."""
    spread, found = variadic(code), []
    for node in code.nodes(ast.Call):
        if len(node.args) <= MAX_POSITIONAL_ARGUMENTS:
            continue
        callee = ast.unparse(node.func)
        local = callee.removeprefix("self.").removeprefix("cls.")
        count = min(len(node.args), spread.get(local, len(node.args)))
        if count > MAX_POSITIONAL_ARGUMENTS and not exempt(callee):
            found.append(f"{node.lineno} {callee}")
    return found


def test_dataclasses_past_three_fields_are_keyword_only():
    found = [f"{p.relative_to(ROOT)}:{where}" for p in CHECKED
             for where in positional_dataclasses(syntax(p))]
    assert not found, ("make these @dataclass(..., kw_only=True) and build them with keywords: "
                       f"{found}")


def test_no_call_passes_more_than_four_positional_arguments():
    found = [f"{p.relative_to(ROOT)}:{where}" for p in CHECKED
             for where in positional_calls(syntax(p))]
    assert not found, ("pass these by keyword (make the function's trailing parameters "
                       f"keyword-only with `*`): {found}")


def test_the_keyword_rules_find_what_they_forbid_and_pass_what_they_allow():
    planted = Syntax.of(ast.parse(textwrap.dedent("""\
        @dataclass(frozen=True)
        class Wide:
            a: int; b: int; c: int; d: int
        @dataclasses.dataclass
        class AlsoWide:
            a: int; b: int; c: int; d: int = 0
        @dataclass(frozen=True, kw_only=True)
        class Fine:
            a: int; b: int; c: int; d: int
        @dataclass
        class Marked:
            a: int; _: KW_ONLY; b: int; c: int; d: int
        @dataclass
        class Narrow:
            a: int; b: int; c: int; k: ClassVar[int] = 1
        """)))
    assert positional_dataclasses(planted) == ["2 Wide", "5 AlsoWide"]
    calls = Syntax.of(ast.parse(textwrap.dedent("""\
        build(1, 2, 3, 4, 5)
        self.go(a, b, c, d, e, f)
        build(1, 2, 3, 4, key=5)
        print(1, 2, 3, 4, 5)
        log.info("%s %s %s %s", 1, 2, 3, 4)
        torch.zeros(1, 2, 3, 4, 5)
        "{}{}{}{}{}".format(1, 2, 3, 4, 5)
        os.path.join("a", "b", "c", "d", "e")
        def argv(repo, *args): ...
        argv(repo, "job", "create", "--file", "x.yml")
        def fixed(a, b, c, d, e): ...
        fixed(1, 2, 3, 4, 5)
        blog(1, 2, 3, 4, 5)
        """)))
    assert positional_calls(calls) == ["1 build", "2 self.go", "12 fixed", "13 blog"]
