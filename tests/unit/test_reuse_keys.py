"""Why a pipeline step ran or was reused: the key's parts kept per step, their difference said
in one line, the key itself exactly as it decided before its parts were kept; --from / --only
planned before anything runs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from mlops.environments.envspec import EnvironmentRef, EnvMap, plan_for
from mlops.errors import LocalRunError
from mlops.orchestrators.graph import build_nodes
from mlops.orchestrators.subset import plan
from mlops.runtime.keydiff import compare, summary
from mlops.runtime.keyparts import KeyParts, Source, TreeStore, code_digest, data_digest
from mlops.runtime.placement import Placement
from mlops.runtime.records import Status, TaskRecord
from mlops.runtime.reuse import StepIndex, StepRules
from mlops.runtime.selection import Choice, Selection
from mlops.runtime.tasks import Task
from mlops.runtime.uris import AssetMap
from mlops.runtime.values import OutputSpec, Value

SPEC = "/repo/pipeline.yml"


def old_key(task: Task, env_map: EnvMap) -> str:
    """The key as reuse.py computed it before it kept its parts (the reference: what decides
    reuse must not move)."""
    plan = plan_for(task.environment.value, task.environment.base, env_map, task.where)
    inputs = {name: (f"data:{data_digest(Path(value.path), {})}" if value.is_data
                     else f"text:{value.text}") for name, value in task.inputs.items()}
    outputs = {name: {k: v for k, v in asdict(spec).items() if k != "target"}
               for name, spec in task.outputs.items()}
    identity = {"command": task.command, "code": code_digest(task.code, {}),
                "includes": [code_digest(p, {}) for p in task.includes],
                "environment": [sorted(plan.requirements), plan.python,
                                sorted(task.environment.adds), sorted(task.environment.fixed)],
                "inputs": inputs, "outputs": outputs, "placement": asdict(task.placement),
                "env": task.env_vars}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@pytest.fixture
def step(tmp_path) -> Task:
    """Step b of a pipeline: its code (two files in two folders), an include, a data input and
    a literal, an inline environment, in run r1."""
    code = tmp_path / "src"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "note.txt").write_text("a note\n")
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    (tmp_path / "conda.yml").write_text("dependencies:\n  - python=3.11\n  - pip:\n"
                                        "    - six==1.16.0\n")
    return Task(name="b", command="python train.py --x ${{inputs.x}}", where="spec: jobs.b",
                folder=tmp_path / "runs" / "r1" / "steps" / "b", code=code,
                includes=[tmp_path / "shared"],
                inputs={"data": Value(path=tmp_path / "data.csv", type="uri_file"),
                        "x": Value(text="0.5")},
                outputs={"model": OutputSpec()},
                environment=EnvironmentRef(value={"image": "img", "conda_file": "conda.yml"},
                                           base=tmp_path),
                env_vars={"A": "1"}, placement=Placement(), address=("b",))


def rules(**changes) -> StepRules:
    return replace(StepRules(spec=SPEC, component="train", version="1"), **changes)


def in_run(task: Task, run: str) -> Task:
    return replace(task, folder=task.folder.parents[2] / run / "steps" / task.name)


def completed(index: StepIndex, task: Task, how: StepRules) -> str:
    """Decide the step, then record it completed as the runtime does; its line."""
    decision = index.decide(task, EnvMap(), replace(how, run=task.folder.parents[1].name))
    task.folder.mkdir(parents=True, exist_ok=True)
    if decision.earlier is None:
        TaskRecord(status=Status.COMPLETED, mlflow_run_id=f"mlflow-{task.folder.parents[1].name}",
                   outputs={}).write(task.folder)
        index.record(decision, task.folder, f"mlflow-{task.folder.parents[1].name}", how)
    else:
        index.linked(decision, task.folder, how)
    return decision.line


def test_the_key_is_exactly_the_key_reuse_decided_by_before_its_parts_were_kept(step, tmp_path):
    index = StepIndex(tmp_path / "runs")
    parts = index.parts(step, EnvMap(), rules())
    assert parts.key == old_key(step, EnvMap())
    assert KeyParts.read(tmp_path) is None
    parts.write(tmp_path)
    assert KeyParts.read(tmp_path) == parts and KeyParts.read(tmp_path).hashed().key == parts.key
    # the component's name and version, a trial's parameters, where it ran: never in the key
    other = index.parts(in_run(step, "r2"), EnvMap(), rules(component="x", version="9",
                                                            params={"lr": "1"}))
    assert other.key == parts.key


def test_each_change_is_named_in_the_line_and_the_upstream_run_it_is_compared_with(step,
                                                                                    tmp_path):
    index = StepIndex(tmp_path / "runs")
    assert completed(index, step, rules()) == "ran: no earlier run"
    assert completed(index, in_run(step, "r2"), rules()) == "reused (from r1 b)"
    (step.code / "pkg" / "util.py").write_text("X = 2\n")
    assert completed(index, in_run(step, "r3"), rules()) == \
        f"ran: code {step.code / 'pkg/util.py'} changed (since r1 b)"
    (tmp_path / "shared" / "note.txt").write_text("another note\n")
    assert completed(index, in_run(step, "r4"), rules()) == \
        f"ran: additional include {tmp_path / 'shared/note.txt'} changed (since r3 b)"
    (tmp_path / "data.csv").write_text("a,b\n1,3\n")  # one byte
    assert completed(index, in_run(step, "r5"), rules()) == \
        "ran: input data: its content changed (since r4 b)"
    (tmp_path / "conda.yml").write_text("dependencies:\n  - python=3.11\n  - pip:\n"
                                        "    - six==1.17.0\n")
    assert completed(index, in_run(step, "r6"), rules()) == \
        "ran: environment: six==1.16.0 -> six==1.17.0 (since r5 b)"
    literal = replace(in_run(step, "r7"), inputs={**step.inputs, "x": Value(text="0.9")})
    assert completed(index, literal, rules(version="2")) == \
        "ran: input x: '0.5' -> '0.9'; component train 1 -> train 2 (since r6 b)"
    assert completed(index, replace(literal, folder=in_run(step, "r8").folder),
                     rules(forced="is_deterministic: false", indexed=False)) == \
        "ran: is_deterministic: false"


def test_a_step_of_another_pipeline_is_compared_by_its_component(step, tmp_path):
    index = StepIndex(tmp_path / "runs")
    completed(index, step, rules())
    changed = replace(in_run(step, "r2"), command="python train.py --y 1",
                      address=("outer", "b"))
    decision = index.decide(changed, EnvMap(), rules(spec="/elsewhere.yml"))
    assert decision.line == "ran: command changed (since r1 b)"
    assert "command was: python train.py --x ${{inputs.x}}" in decision.details
    assert index.decide(changed, EnvMap(), rules(spec="/x.yml", component="other")).line == \
        "ran: no earlier run"


def test_a_resumed_run_keeps_what_completed_in_its_folder_and_says_how_the_rest_ended(step,
                                                                                    tmp_path):
    index = StepIndex(tmp_path / "runs")
    completed(index, step, rules(forced="is_deterministic: false", indexed=False))
    # completed here, unchanged: kept in place, even for a step never reused across runs
    kept = index.decide(step, EnvMap(), rules(forced="is_deterministic: false", indexed=False))
    assert kept.earlier is not None and kept.earlier.folder == step.folder
    assert kept.line == "reused (from r1 b)"
    assert index.decide(step, EnvMap(), rules(resumable=False, forced="--force-rerun")).line \
        == "ran: --force-rerun"
    TaskRecord(status=Status.FAILED, mlflow_run_id="mlflow-r1").write(step.folder)
    assert index.decide(step, EnvMap(), rules()).line == "ran: it failed in this run"
    TaskRecord(status=Status.RUNNING, mlflow_run_id="mlflow-r1", pid=2 ** 22 + 1).write(step.folder)
    assert index.decide(step, EnvMap(), rules()).line == "ran: it was killed in this run"


def test_a_step_left_out_takes_its_last_run_even_when_it_changed(step, tmp_path):
    index = StepIndex(tmp_path / "runs")
    completed(index, step, rules())
    (step.code / "train.py").write_text("print(2)\n")
    taken = index.decide(in_run(step, "r2"), EnvMap(), rules(take=True, forced="--from c"))
    assert taken.earlier.folder == step.folder
    assert taken.line == "reused (from r1 b; --from c leaves it out, though it changed)"
    assert f"code {step.code / 'train.py'}: changed" in taken.details


def test_a_trees_objects_are_shared_and_a_change_adds_only_the_folders_above_it(tmp_path):
    """50,000 files in 500 folders: one object per folder; a changed file adds the objects of
    its folder and the root, and the diff reads only those."""
    trees = TreeStore(tmp_path)
    listing = [(f"d{n // 100:03d}/f{n % 100:02d}.py", hashlib.sha256(str(n).encode()).hexdigest())
               for n in range(50_000)]
    root = trees.put(listing)
    objects = sorted(trees.folder.rglob("*.json"))
    assert len(objects) == 501
    assert sum(p.stat().st_size for p in objects) < 50_000 * 40  # ~30 bytes a file
    changed = [*listing[:1234], (listing[1234][0], "f" * 64), *listing[1235:]]
    assert trees.put(listing) == root and len(list(trees.folder.rglob("*.json"))) == 501
    new_root = trees.put(changed)
    assert len(list(trees.folder.rglob("*.json"))) == 503
    assert trees.diff(root, new_root) == [("d012/f34.py", "changed")]
    grown = trees.put([*changed, ("d999/new.py", "0" * 64), ("top.txt", "1" * 64)])
    assert trees.diff(new_root, grown) == [("d999/", "added"), ("top.txt", "added")]
    assert trees.diff(grown, new_root) == [("d999/", "removed"), ("top.txt", "removed")]


def test_the_line_names_two_changes_and_counts_the_rest(tmp_path):
    old = KeyParts(key="1", inputs={"a": "text:1", "b": "text:2", "c": "data:x"},
                   env={"V": "1"}, code=Source("/c", "x"))
    new = replace(old, key="2", inputs={"a": "text:3", "b": "text:4", "c": "data:y"},
                  env={"V": "2"}, code=Source("/c", "y"))
    changes = compare(old, new, TreeStore(tmp_path))
    assert summary(changes) == \
        "code /c changed; input a: '1' -> '3' (+3 more)"
    params = compare(replace(old, params={"lr": "0.1"}, command="x --lr 0.1"),
                     replace(old, params={"lr": "0.2"}, command="x --lr 0.2"),
                     TreeStore(tmp_path))
    assert summary(params) == "parameter lr: '0.1' -> '0.2'"


PIPELINE = """
a: {type: command, command: "echo a", outputs: {o: {type: uri_folder}}}
b: {type: command, command: "echo b", inputs: {i: "${{parent.jobs.a.outputs.o}}"},
    outputs: {o: {type: uri_folder}}}
side: {type: command, command: "echo side", inputs: {i: "${{parent.jobs.a.outputs.o}}"}}
outer:
  type: pipeline
  inputs: {i: "${{parent.jobs.b.outputs.o}}"}
  component: file:outer.yml
last: {type: command, command: "echo last", inputs: {i: "${{parent.jobs.b.outputs.o}}"}}
"""
OUTER = """
type: pipeline
inputs: {i: {type: uri_folder}}
jobs:
  prep: {type: command, command: "echo prep", outputs: {o: {type: uri_folder}}}
  train: {type: command, command: "echo t", inputs: {i: "${{parent.jobs.prep.outputs.o}}"}}
"""


@pytest.fixture
def graph(tmp_path, monkeypatch):
    (tmp_path / "outer.yml").write_text(OUTER)
    monkeypatch.chdir(tmp_path)


def planned(flag: str, text: str, never: tuple[str, ...] = ()) -> dict[str, Choice]:
    import yaml

    nodes = build_nodes(yaml.safe_load(PIPELINE), Path.cwd(), AssetMap(None), "p.yml")
    selection = Selection.parse(text if flag == "--from" else None,
                                text if flag == "--only" else None)
    plan(selection, nodes, AssetMap(None), lambda address: "/".join(address) not in never)
    return {"/".join(a): c for a, c in selection.choices.items()}


@pytest.mark.usefixtures("graph")
def test_from_runs_a_step_and_everything_downstream_taking_the_rest_from_the_last_run():
    run, take = Choice.RUN, Choice.TAKE
    assert planned("--from", "b") == {"a": take, "b": run, "side": take, "outer/prep": run,
                                      "outer/train": run, "last": run}
    assert planned("--from", "outer/train") == {"a": take, "b": take, "side": take,
                                                "outer/prep": take, "outer/train": run,
                                                "last": take}


@pytest.mark.usefixtures("graph")
def test_only_runs_just_its_steps_and_leaves_out_what_is_downstream_of_them():
    run, take, skip = Choice.RUN, Choice.TAKE, Choice.SKIP
    assert planned("--only", "b,outer/prep") == {"a": take, "b": run, "side": take,
                                                 "outer/prep": run, "outer/train": skip,
                                                 "last": skip}
    assert planned("--only", "outer") == {"a": take, "b": take, "side": take,
                                          "outer/prep": run, "outer/train": run, "last": take}
    # a step left out that never completed: left out too when nothing reads it
    assert planned("--only", "b", never=("side",))["side"] == skip


@pytest.mark.usefixtures("graph")
def test_a_plan_that_needs_outputs_never_produced_or_names_no_step_is_refused():
    with pytest.raises(LocalRunError, match="step b reads the outputs of step a, which has "
                                            "never completed"):
        planned("--only", "b", never=("a",))
    with pytest.raises(LocalRunError, match=r"--from trian: no such step in this pipeline; "
                                            r"its steps: a, b, side, outer, outer/prep"):
        planned("--from", "trian")
    with pytest.raises(LocalRunError, match="together"):
        Selection.parse("a", "b")
    assert Selection.parse(" ", None) is None
