"""The suite's tiers (docs/development.md, "Test tiers"), held as house rules:

- every test under tests/e2e belongs to exactly one tier: `make test` (marked `proof`), `make
  test-e2e` (unmarked: the rest) or `make test-heavy` (marked `heavy`), and the three targets'
  marker expressions split every kind of test between them, nothing twice, nothing left out;
- `make test` holds at least one real proof of each e2e module's behaviour, or the module says
  why not (`WHY_NO_PROOF = "..."`);
- no test decides to skip from the state of a cache: a test that needs a download runs in its
  tier every time, and a skip says what the machine cannot have (no interpreter, no root).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _pytest.mark.expression import Expression
from support import ROOT, Syntax, syntax

TESTS = ROOT / "tests"
E2E = sorted((TESTS / "e2e").glob("test_*.py"))
TIERS = ("TEST_MARKS", "E2E_MARKS", "HEAVY_MARKS")  # make test, test-e2e, test-heavy


def parsed(path: Path) -> ast.Module:
    return syntax(path).tree


def marks_in(node: ast.expr | None) -> set[str]:
    """The marker names an expression applies: `pytest.mark.x`, `pytest.mark.x(...)`, and lists
    of them (a module's pytestmark). pytest.param's marks are the caller's business."""
    found = set()
    for sub in ast.walk(node) if node is not None else ():
        target = sub.func if isinstance(sub, ast.Call) else sub
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) and \
                target.value.attr == "mark":
            found.add(target.attr)
    return found - {"parametrize", "usefixtures", "filterwarnings"}


def param_marks(function: ast.FunctionDef) -> list[set[str]]:
    """The marks of each pytest.param of a function's parametrize lists (empty: none)."""
    found = []
    for decorator in function.decorator_list:
        for call in ast.walk(decorator):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                    call.func.attr == "param":
                marks = next((k.value for k in call.keywords if k.arg == "marks"), None)
                found.append(marks_in(marks))
    return found


@dataclass(frozen=True, kw_only=True)
class Declared:
    """A test function of an e2e module and the marks it is declared with."""

    module: str
    name: str
    marks: frozenset[str]  # its own and its module's
    params: tuple[frozenset[str], ...]  # each pytest.param's own marks


def module_marks(tree: ast.Module) -> set[str]:
    return {mark for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            for mark in marks_in(node.value)}


def declared_in(tree: ast.Module, module: str) -> Iterator[Declared]:
    shared = module_marks(tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            own = {m for d in node.decorator_list for m in marks_in(d)}
            yield Declared(module=module, name=node.name, marks=frozenset(own | shared),
                           params=tuple(frozenset(p) for p in param_marks(node)))


def declared(path: Path) -> Iterator[Declared]:
    return declared_in(parsed(path), path.name)


def why_no_proof(path: Path) -> str | None:
    for node in parsed(path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id ==
                                                "WHY_NO_PROOF" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def makefile_marks() -> dict[str, str]:
    """The marker expression of each tier target, as the Makefile says it."""
    text = (ROOT / "Makefile").read_text()
    found = dict(re.findall(r"^(\w+_MARKS) = (.+)$", text, flags=re.MULTILINE))
    assert set(TIERS) <= set(found), "the Makefile names each tier's marker expression"
    return {name: found[name] for name in TIERS}


def selects(expression: str, marks: set[str]) -> bool:
    return Expression.compile(expression).evaluate(lambda name, **_: name in marks)


def kinds_of_test() -> list[frozenset[str]]:
    """Every set of tier marks a collected test can carry: a unit test carries none of them
    (tests/conftest.py marks every test under tests/e2e `e2e`)."""
    kinds = {frozenset()}
    for path in E2E:
        for test in declared(path):
            for params in test.params or (frozenset(),):
                kinds.add(frozenset(test.marks | params) & {"proof", "heavy"} | {"e2e"})
    kinds |= {frozenset({"e2e"}), frozenset({"e2e", "proof"}), frozenset({"e2e", "heavy"})}
    return sorted(kinds, key=sorted)


def test_every_kind_of_test_is_in_exactly_one_tier():
    tiers = makefile_marks()
    for marks in kinds_of_test():
        chosen = [name for name, expression in tiers.items() if selects(expression, marks)]
        assert len(chosen) == 1, f"a test marked {sorted(marks)} is selected by {chosen}"
    assert selects(tiers["TEST_MARKS"], set()), "make test runs the unit tests"


def test_no_test_is_both_a_proof_and_heavy():
    both = [f"{t.module}::{t.name}" for path in E2E for t in declared(path)
            if any({"proof", "heavy"} <= t.marks | p for p in t.params or (frozenset(),))]
    assert not both, f"heavy tests are make test-heavy's alone: {both}"


def proof_faults(path: Path) -> list[str]:
    """An e2e module without a proof in make test and without WHY_NO_PROOF, or with both."""
    tests = list(declared(path))
    proofs = [t.name for t in tests if "proof" in t.marks or any("proof" in p for p in t.params)]
    reason = why_no_proof(path)
    if not (proofs or reason):
        return [f"{path.name}: mark a test of it `proof` (make test), or say why not in "
                "WHY_NO_PROOF"]
    return [f"{path.name} has proofs in make test and WHY_NO_PROOF"] if proofs and reason else []


def test_make_test_proves_each_e2e_modules_behaviour_or_says_why_not():
    """Every e2e module, each fault named (one test for the rule: a test per module was
    pytest's own work 37 times over for one check)."""
    found = [fault for path in E2E for fault in proof_faults(path)]
    assert not found, "\n".join(found)


def test_the_proof_marker_is_read_where_it_is_declared():
    """What the rules above read is what pytest applies: a planted module's marks."""
    tree = ast.parse(
        "import pytest\npytestmark = [pytest.mark.usefixtures('x'), pytest.mark.network]\n"
        "@pytest.mark.proof\ndef test_a(): ...\n"
        "@pytest.mark.parametrize('n', [1, pytest.param(2, marks=pytest.mark.proof)])\n"
        "def test_b(n): ...\n@pytest.mark.heavy\ndef test_c(): ...\n")
    found = {t.name: t for t in declared_in(tree, "test_planted.py")}
    assert found["test_a"].marks == {"network", "proof"}
    assert found["test_b"].params == (frozenset({"proof"}),)
    assert found["test_c"].marks == {"network", "heavy"}


def test_every_test_module_has_a_name_of_its_own():
    """pytest imports a module of tests/unit and one of tests/e2e by its file name alone (the
    folders are not packages): two of one name fail the whole collection."""
    names = [p.name for p in TESTS.rglob("*.py") if "fixtures" not in p.parts]
    assert sorted({n for n in names if names.count(n) > 1} - {"conftest.py"}) == []


# ---- no skip reads a cache ----

CACHE_WORDS = re.compile(r"cache|layer|envs_dir|local_envs|built", re.IGNORECASE)


def _words(node: ast.AST) -> set[str]:
    """The names, attributes and strings an expression or function reads (docstrings aside)."""
    docstrings = {id(sub.value) for sub in ast.walk(node)
                  if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant)}
    words = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            words.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            words.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and \
                id(sub) not in docstrings:
            words.add(sub.value)
    return words


def _is_skip(node: ast.AST) -> bool:
    """pytest.skip(...), pytest.mark.skipif(...) or pytest.skip.Exception raised."""
    target = node.func if isinstance(node, ast.Call) else None
    return isinstance(target, ast.Attribute) and target.attr in ("skip", "skipif") and \
        isinstance(target.value, ast.Attribute | ast.Name)


def skip_conditions(code: Syntax) -> Iterator[tuple[int, set[str]]]:
    """For each skip in a module: its line and the words of what decides it (the `if` and
    `while` tests around a pytest.skip, the `try` body whose handler skips, a skipif's
    condition), with the bodies of the module's own functions those words call, followed to
    any depth."""
    local = {n.name: n for n in code.nodes(ast.FunctionDef)}
    parents: dict[ast.AST, ast.AST] = {}
    for node in code.nodes(ast.Call):
        if not _is_skip(node):
            continue
        parents = parents or {child: up for up in ast.walk(code.tree)
                              for child in ast.iter_child_nodes(up)}
        deciding: list[ast.AST] = list(node.args[:1]) if node.func.attr == "skipif" else []
        child, up = node, parents.get(node)
        while up is not None and node.func.attr == "skip" and \
                not isinstance(up, ast.FunctionDef | ast.Module):
            if isinstance(up, ast.If | ast.While):
                deciding.append(up.test)
            elif isinstance(up, ast.Try) and isinstance(child, ast.ExceptHandler):
                deciding.extend(up.body)
            child, up = up, parents.get(up)
        yield node.lineno, _followed(deciding, local)


def _followed(nodes: list[ast.AST], local: dict[str, ast.FunctionDef]) -> set[str]:
    words: set[str] = set()
    seen: set[str] = set()
    while nodes:
        found = _words(nodes.pop())
        words |= found
        for name in (found & set(local)) - seen:
            seen.add(name)
            nodes.append(local[name])
    return words


def cache_skips(code: Syntax) -> list[tuple[int, list[str]]]:
    return [(line, sorted(w for w in words if CACHE_WORDS.search(w)))
            for line, words in skip_conditions(code)
            if any(CACHE_WORDS.search(w) for w in words)]


def test_no_skip_decides_from_the_state_of_a_cache():
    """Every test module, conftest.py and support.py (this file plants cache-reading skips on
    purpose, as strings); one test naming each offender, not one per file."""
    paths = [*sorted(TESTS.rglob("test_*.py")), TESTS / "conftest.py", TESTS / "support.py"]
    found = [f"{path.relative_to(TESTS)}: lines {lines}" for path in paths
             if path.name != "test_tiers.py" and (lines := cache_skips(syntax(path)))]
    assert not found, "a skip reads cache state: run the test in its tier every time (make " \
        "test-e2e, make test-heavy) instead:\n" + "\n".join(found)


CACHE_SKIP = '''
import pytest
from mlops.environments.layers import cache_dir

def spark_layer_cached(envs):
    return any(envs.glob("*/layer.json"))

@pytest.fixture
def spark():
    if not spark_layer_cached(cache_dir()):
        pytest.skip("the Spark layer is not cached yet")

@pytest.mark.skipif(not (cache_dir() / "tools").is_dir(), reason="no debugpy yet")
def test_debug(): ...
'''

MACHINE_SKIP = '''
import pytest, subprocess
from mlops.environments.interpreters import find, how_to_get

def needs(minor):
    found = find(minor)
    if found is None:
        pytest.skip(f"no Python {minor} on this machine: {how_to_get(minor)}")
    return found

def test_disk(tmp_path):
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tmp_path)]).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
'''


def test_the_rule_finds_a_skip_on_cache_state_and_passes_a_machine_limit():
    assert sorted(line for line, _ in cache_skips(Syntax.of(ast.parse(CACHE_SKIP)))) == [11, 13]
    assert cache_skips(Syntax.of(ast.parse(MACHINE_SKIP))) == []
