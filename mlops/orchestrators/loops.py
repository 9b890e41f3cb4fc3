"""Control-flow nodes as they run (what they mean: control_flow.py): an if_else chooses its
blocks, a do_while runs its body until the condition is false or the limit is reached, a
parallel_for runs its body once per item and aggregates the outputs. Each run of a body is a
step of its own, reused and debugged as any step: `steps/<loop>/iteration_<n>/steps/<body>`,
`DEBUG=<loop>/iteration:<n>/<body>` (`item_<key>`, `item:<key>` for parallel_for). A step not
chosen is `Skipped` in its status.json, and its MLflow child run FINISHED with mlops.status.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.orchestrators.control_flow import (
    CONTROL_KEY,
    PARENT_INPUT_TEXT,
    PRIMITIVE,
    blocks,
    do_while,
    items_of,
    primitive_value,
    truth,
)
from mlops.orchestrators.graph import STEP_OUTPUT, Node, Produced, Scope, bind
from mlops.runtime import DATA_TYPES, RunStatus, Runtime, Status, TaskRecord, Value, input_value

RunOne = Callable[[Node, Scope, Runtime], int]


# ---- if_else and skipping ------------------------------------------------------------------

def binding_value(value, scope: Scope, where: str) -> object:
    """A literal as written, or the value a `${{parent...}}` binding has now."""
    if not isinstance(value, str) or "${{" not in value:
        return value
    text = value.strip()
    match = STEP_OUTPUT.fullmatch(text)
    if match is not None:
        step, output = match.groups()
        made = scope.steps.get(step, {})
        if output not in made:
            raise LocalRunError(f"{where}: {text}: node {step} has no output {output}")
        return primitive_value(made[output].path, output, scope.controls.get(step))
    if PARENT_INPUT_TEXT.match(text):
        return bind(text, {}, scope, where).text
    raise LocalRunError(f"{where}: {text}: a condition or items binding reads a pipeline input "
                        "or a node's output")


def run_if_else(node: Node, scope: Scope, rt: Runtime) -> int:
    """Evaluate the condition; the blocks it does not choose are skipped when their turn comes."""
    true, false = blocks(node.raw, node.where)
    chosen = truth(binding_value(node.raw.get("condition"), scope, f"{node.where}.condition"),
                   f"{node.where}.condition")
    scope.chosen[node.name] = chosen
    runs, skips = (true, false) if chosen else (false, true)
    print(f"step {node.name}: if_else: condition {chosen}: runs {', '.join(runs) or 'nothing'}"
          f"; skips {', '.join(skips) or 'nothing'}", flush=True)
    return 0


def skip_reason(node: Node, scope: Scope) -> str | None:
    """Why `node` does not run: a block its if_else did not choose, or a required input from a
    step that did not run. None: it runs."""
    if node.gate is not None:
        control, branch = node.gate
        if control not in scope.chosen:
            return f"its if_else {control} did not run"
        if scope.chosen[control] != branch:
            return (f"in the {'true' if branch else 'false'} block of {control}, whose "
                    f"condition was {scope.chosen[control]}")
    decls = {} if node.inline else (node.definition.get("inputs") or {})
    for name, binding in (node.raw.get("inputs") or {}).items():
        steps = {step for step, _ in STEP_OUTPUT.findall(str(binding))} & scope.skipped
        decl = decls.get(name) if isinstance(decls.get(name), dict) else {}
        if steps and not decl.get("optional"):
            return f"its input {name} comes from {sorted(steps)[0]}, which was skipped"
    return None


def skip(node: Node, scope: Scope, rt: Runtime, why: str) -> None:
    """Record `node` as Azure's Studio shows it: Skipped, in its status.json and MLflow."""
    folder = scope.folder / "steps" / node.name
    folder.mkdir(parents=True, exist_ok=True)
    tags = {"mlops.spec": node.where, "mlops.step": node.name,
            "mlops.status": str(Status.SKIPPED), "mlops.skipped": why}
    with rt.tracking.open(scope.experiment, node.name, tags, parent=scope.run_id) as run:
        TaskRecord(status=Status.SKIPPED, mlflow_run_id=run.run_id, reason=why).write(folder)
        run.close(RunStatus.FINISHED)
    scope.skipped.add(node.name)
    print(f"step {node.name}: Skipped ({why})", flush=True)


# ---- loops ---------------------------------------------------------------------------------

def child_scope(scope: Scope, node: Node, label: str, given: dict[str, Value], *,
                run_id: str) -> Scope:
    """The scope one run of a loop's body sees: the pipeline's, in a folder of its own."""
    part = label.replace("_", ":", 1)
    return replace(scope, folder=scope.folder / "steps" / node.name / label, run_id=run_id,
                   steps=dict(scope.steps), given={node.body.name: given},
                   path=(*scope.path, node.name, part), skipped=set(scope.skipped))


def passed_on(made: Produced, name: str, controls: dict[str, object] | None) -> Value:
    """A body output as the next iteration's input: a primitive's value, else its files."""
    if made.type in PRIMITIVE:
        return Value(text=primitive_value(made.path, name, controls), type=made.type)
    return Value(path=made.path, type=made.type)


def run_do_while(node: Node, scope: Scope, rt: Runtime, run_one: RunOne) -> int:
    body = node.body
    spec = do_while(node.raw, {body.name: body.ports}, node.where)
    tags = {"mlops.spec": node.where, "mlops.step": node.name}
    given: dict[str, Value] = {}
    with rt.tracking.open(scope.experiment, node.name, tags, parent=scope.run_id) as run:
        for count in range(spec.max_iterations):
            inner = child_scope(scope, node, f"iteration_{count}", given, run_id=run.run_id)
            code = run_one(body, inner, rt)
            if code != 0:
                run.close(RunStatus.FAILED)
                return code
            made, controls = inner.steps[body.name], inner.controls.get(body.name)
            scope.steps[body.name], scope.controls[body.name] = made, controls or {}
            if spec.condition is not None and not truth(
                    passed_on(made[spec.condition], spec.condition, controls).text,
                    f"{node.where}.condition"):
                print(f"step {node.name}: do_while: {spec.condition} is False after iteration "
                      f"{count}: done", flush=True)
                break
            given = {target: passed_on(made[out], out, controls)
                     for out, targets in spec.mapping.items() for target in targets}
        else:
            print(f"step {node.name}: do_while: max_iteration_count {spec.max_iterations} "
                  "reached", flush=True)
        run.close(RunStatus.FINISHED)
    return 0


def loop_items(node: Node, scope: Scope) -> list[tuple[str, dict[str, object]]]:
    value = node.raw.get("items")
    if isinstance(value, str) and value.strip().startswith("${{"):
        value = binding_value(value, scope, f"{node.where}.items")
    inputs = node.body.ports.inputs if not node.body.inline else None
    return items_of(value, node.where, inputs)


def run_parallel_for(node: Node, scope: Scope, rt: Runtime, run_one: RunOne) -> int:
    body = node.body
    items = loop_items(node, scope)
    tags = {"mlops.spec": node.where, "mlops.step": node.name}
    results: dict[str, dict[str, Produced]] = {}
    controls: dict[str, dict[str, object]] = {}
    with rt.tracking.open(scope.experiment, node.name, tags, parent=scope.run_id) as run:
        for key, item in items:
            given = {name: input_value(value, f"{node.where}.items.{key}.{name}", node.base,
                                       scope.assets) for name, value in item.items()}
            inner = child_scope(scope, node, f"item_{key}", given, run_id=run.run_id)
            code = run_one(body, inner, rt)
            if code != 0:
                run.close(RunStatus.FAILED)
                return code
            results[key] = inner.steps[body.name]
            controls[key] = inner.controls.get(body.name) or {}
        scope.steps[node.name] = aggregate(node, scope, results, controls)
        run.close(RunStatus.FINISHED)
    print(f"step {node.name}: parallel_for: {len(items)} item(s), outputs "
          f"{', '.join(scope.steps[node.name]) or 'none'} aggregated", flush=True)
    return 0


def aggregate(node: Node, scope: Scope, results: dict[str, dict[str, Produced]],
              controls: dict[str, dict[str, object]]) -> dict[str, Produced]:
    """The body's outputs over every item, as azure-ai-ml types them: data as one mltable of
    the items' outputs (a folder per item, named by its index or key), a primitive as a JSON
    string of each item's value."""
    folder = scope.folder / "steps" / node.name / "outputs"
    names = list(dict.fromkeys(name for made in results.values() for name in made))
    found = {}
    for name in names:
        target = folder / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        kinds = {made[name].type for made in results.values() if name in made}
        if kinds & PRIMITIVE:
            values = {key: passed_on(made[name], name, controls[key]).text
                      for key, made in results.items() if name in made}
            (target / "output").write_text(json.dumps(values))
            found[name] = Produced("string", target)
            continue
        paths = []
        for key, made in results.items():
            if name in made and made[name].path.exists():
                paths.append(_link_into(made[name].path, target / key))
        (target / "MLTable").write_text(
            "paths:\n" + "".join(f"  - {kind}: ./{rel}\n" for kind, rel in paths))
        found[name] = Produced("mltable", target)
    return found


def _link_into(source: Path, target: Path) -> tuple[str, str]:
    """`source` (a file or folder) under `target`, by hard links where the file system has
    them; the MLTable path entry that names it."""
    target.mkdir(parents=True, exist_ok=True)
    if source.is_file():
        _link(source, target / source.name)
        return "file", f"{target.name}/{source.name}"
    shutil.copytree(source, target, dirs_exist_ok=True, copy_function=_link)
    return "folder", target.name


def _link(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def control_outputs(rt: Runtime, run_id: str) -> dict[str, object]:
    """The control outputs a step wrote as the run property mldesigner writes
    (azureml.pipeline.control, a JSON object), as MLflow tags; {} when it wrote none."""
    try:
        tags = rt.tracking.client.get_run(run_id).data.tags
    except Exception:  # noqa: BLE001 - no run, or a store that cannot say: the files are next
        return {}
    text = tags.get(CONTROL_KEY) or tags.get(f"properties.{CONTROL_KEY}")
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def has_primitive_outputs(node: Node) -> bool:
    return any(isinstance(d, dict) and str(d.get("type")) in PRIMITIVE and
               str(d.get("type")) not in DATA_TYPES for d in node.ports.outputs.values())



def parts(node: Node) -> list[str]:
    """The address parts of a loop's runs of its body, as DEBUG= names them: every iteration a
    do_while may run; each literal item of a parallel_for (items bound at run time: none)."""
    if node.kind == "do_while":
        return [f"iteration:{n}" for n in range(do_while(node.raw, {node.body.name:
                                                                    node.body.ports},
                                                         node.where).max_iterations)]
    value = node.raw.get("items")
    if isinstance(value, str) and value.strip().startswith("${{"):
        return []
    inputs = node.body.ports.inputs if not node.body.inline else None
    return [f"item:{key}" for key, _ in items_of(value, node.where, inputs)]
