"""Pipelines: every node runs through the one runtime, in dependency order.

Nodes are command nodes (a component file, an inline component, or an inline command with no
component at all), sweep nodes (`trial:` a component) and pipeline nodes (a pipeline component,
run as a nested pipeline). `${{parent.inputs.x}}` binds a pipeline input, `${{parent.outputs.x}}`
makes a node write into a pipeline output, `${{parent.jobs.<node>.outputs.<name>}}` feeds one
node's output to another; a node input written as `{type, path}` resolves as a job input does.
Node-level `distribution`, `resources`, `environment_variables` and `environment` override the
component's. Everything a node needs is resolved before the first node starts, so a bad spec
fails before any work. `settings.continue_on_step_failure` runs what does not depend on a
failed node.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field, replace
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from . import launch, parallel, runtime
from .errors import LocalRunError
from .outputs import publish, slot
from .resolve import (
    DATA_TYPES,
    OutputSpec,
    Value,
    input_value,
    job_inputs,
    job_outputs,
    output_spec,
)
from .reuse import deterministic, link_step
from .specs import REF, flag
from .sweep import TrialContext, sweep, trial_factory
from .tasks import command_task, experiment_name, load_component
from .uris import AssetMap

PARENT_INPUT = re.compile(r"^\$\{\{\s*parent\.inputs\.([\w.-]+)\s*\}\}$")
PARENT_OUTPUT = re.compile(r"^\$\{\{\s*parent\.outputs\.([\w.-]+)\s*\}\}$")
STEP_OUTPUT = re.compile(r"\$\{\{\s*parent\.jobs\.([\w-]+)\.outputs\.([\w.-]+)\s*\}\}")
OVERRIDES = ("distribution", "environment", "environment_variables")


@dataclass
class Node:
    name: str
    kind: str  # command, sweep or pipeline
    raw: dict  # the node as written: bindings and overrides
    definition: dict  # the component (or inline command, or trial) it runs
    base: Path  # what the definition's relative paths are relative to
    where: str
    inline: bool = False  # a command node with no component: it declares its own inputs


@dataclass
class Scope:
    """What `${{parent.*}}` means inside one pipeline (the job itself, or a pipeline component)."""

    inputs: dict[str, Value]
    outputs: dict[str, OutputSpec]  # targets are concrete paths
    folder: Path
    run_id: str
    experiment: str
    assets: AssetMap
    base: Path
    steps: dict
    continue_on_failure: bool = False
    force_rerun: bool = False  # settings.force_rerun: no step is reused
    reused: list = field(default_factory=list)  # names of the steps reused, for the summary


def load_node(name: str, raw, base: Path, assets: AssetMap, where: str) -> Node:
    if not isinstance(raw, dict):
        raise LocalRunError(f"{where}: a node is a mapping (command, component or trial)")
    kind = str(raw.get("type") or "command").lower()
    if kind == "sweep":
        definition, def_base = load_component(raw.get("trial"), base, assets, f"{where}.trial")
    elif kind in ("command", "pipeline", "parallel") and raw.get("component") is not None:
        definition, def_base = load_component(raw["component"], base, assets,
                                              f"{where}.component")
    elif kind in ("command", "parallel"):
        return Node(name, kind, raw, raw, base, where, inline=True)
    else:
        raise LocalRunError(f"{where}: a {kind} node cannot run on this machine (the local "
                            "runtime runs command, sweep, parallel and pipeline nodes); run it "
                            "on Azure")
    if kind == "pipeline" and not isinstance(definition.get("jobs"), dict):
        raise LocalRunError(f"{where}: the pipeline component has no jobs:")
    return Node(name, kind, raw, definition, def_base, where)


def plan(jobs: dict, base: Path, assets: AssetMap, where: str) -> list[Node]:
    """Every node loaded and every static data input resolved, in dependency order."""
    nodes = {name: load_node(name, raw, base, assets, f"{where}: jobs.{name}")
             for name, raw in (jobs or {}).items()}
    for node in nodes.values():
        for key, binding in (node.raw.get("inputs") or {}).items():
            if isinstance(binding, dict) and not REF.search(str(binding.get("path", ""))):
                input_value(binding, f"{node.where}.inputs.{key}", base, assets)
        if node.kind == "pipeline":
            plan(node.definition["jobs"], node.base, assets, node.where)
    graph = {name: {step for step, _ in STEP_OUTPUT.findall(str(node.raw))}
             for name, node in nodes.items()}
    unknown = {dep for deps in graph.values() for dep in deps} - set(nodes)
    if unknown:
        raise LocalRunError(f"{where}: jobs refer to nodes that do not exist: {sorted(unknown)}")
    try:
        return [nodes[name] for name in TopologicalSorter(graph).static_order()]
    except CycleError as err:
        raise LocalRunError(f"{where}: jobs: the nodes depend on each other in a cycle "
                            f"({' -> '.join(err.args[1])}); break the cycle") from err


def bind(binding, decl: dict, scope: Scope, key: str) -> Value:
    """A node input binding -> its value in this pipeline."""
    kind = str((decl or {}).get("type") or "")
    if isinstance(binding, dict):
        path = binding.get("path")
        if isinstance(path, str) and REF.search(path):
            value = bind(path, decl, scope, key)
            return replace(value, type=str(binding.get("type") or value.type))
        return input_value(binding, key, scope.base, scope.assets)
    if not isinstance(binding, str):
        return input_value(binding, key, scope.base, scope.assets)
    text = binding.strip()
    if match := PARENT_INPUT.match(text):
        if match.group(1) not in scope.inputs:
            raise LocalRunError(f"{key}: {text}: the pipeline has no input {match.group(1)}")
        value = scope.inputs[match.group(1)]
        return replace(value, type=kind or value.type) if value.is_data else value
    if match := STEP_OUTPUT.fullmatch(text):
        produced = scope.steps.get(match.group(1), {})
        if match.group(2) not in produced:
            raise LocalRunError(f"{key}: {text}: node {match.group(1)} has no output "
                                f"{match.group(2)} (its outputs: {', '.join(produced) or 'none'})")
        out_type, path = produced[match.group(2)]
        return Value(path=path, type=kind or out_type)
    if PARENT_OUTPUT.match(text):
        raise LocalRunError(f"{key}: a node input cannot read a pipeline output ({text})")
    if REF.search(text):  # a literal with pipeline inputs inside it
        return Value(REF.sub(lambda m: str(bind("${{" + m.group(1) + "}}", {}, scope,
                                                key).text or ""), binding))
    if kind in DATA_TYPES:
        return Value(path=scope.assets.resolve(binding, key, scope.base), type=kind)
    return Value(binding)


def node_inputs(node: Node, scope: Scope) -> dict[str, Value]:
    decls = {} if node.inline else (node.definition.get("inputs") or {})
    bindings = node.raw.get("inputs") or {}
    values = {}
    for name in [*decls, *[b for b in bindings if b not in decls]]:
        decl = decls.get(name) if isinstance(decls.get(name), dict) else {}
        if name in bindings:
            values[name] = bind(bindings[name], decl, scope, f"{node.where}.inputs.{name}")
        else:
            values[name] = input_value(decl.get("default"), f"{node.where}.inputs.{name}",
                                       node.base, scope.assets)
    return values


def node_outputs(node: Node, scope: Scope) -> dict[str, OutputSpec]:
    bindings = node.raw.get("outputs") or {}
    decls = bindings if node.inline else (node.definition.get("outputs") or {})
    specs = {}
    for name in [*decls, *[b for b in bindings if b not in decls]]:
        spec = output_spec(decls.get(name) if isinstance(decls.get(name), dict) else None)
        binding = bindings.get(name)
        if isinstance(binding, str) and (match := PARENT_OUTPUT.match(binding.strip())):
            if match.group(1) not in scope.outputs:
                raise LocalRunError(f"{node.where}.outputs.{name}: the pipeline has no output "
                                    f"{match.group(1)}")
            parent = scope.outputs[match.group(1)]
            spec = replace(spec, type=parent.type, filename=parent.filename,
                           target=parent.target)
        elif isinstance(binding, dict) and binding.get("type"):
            spec = replace(output_spec(binding), target=None)
        specs[name] = spec
    return specs


def definition_for(node: Node) -> dict:
    """The component with the node's own overrides (distribution, resources, ...) applied."""
    merged = {**node.definition, **{k: node.raw[k] for k in OVERRIDES if k in node.raw}}
    if "environment_variables" in node.raw:
        merged["environment_variables"] = {**(node.definition.get("environment_variables")
                                              or {}), **(node.raw["environment_variables"] or {})}
    resources = {**(node.definition.get("resources") or {}), **(node.raw.get("resources") or {})}
    merged["resources"] = resources or None
    return merged


def run_command_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    definition = definition_for(node)
    task = command_task(definition, node.base, folder, scope.assets, node.where,
                        node.name, scope.experiment, scope.run_id, node_inputs(node, scope),
                        node_outputs(node, scope), {"mlops.spec": node.where,
                                                    "mlops.step": node.name})
    key = None
    if deterministic(definition) and not (scope.force_rerun or rt.force_rerun):
        key = rt.reuse.key(task, rt.environments.env_map)
        earlier = rt.reuse.find(key)
        if earlier is not None:
            paths = link_step(task, earlier, rt)
            scope.steps[node.name] = {k: (task.outputs[k].type, Path(v))
                                      for k, v in paths.items()}
            scope.reused.append(node.name)
            return 0
    print(f"step {node.name}: started", flush=True)
    result = runtime.run(task, rt, label=node.name)
    if key is not None and result.status == "Completed":
        rt.reuse.record(key, folder, result.run_id)
    scope.steps[node.name] = {k: (task.outputs[k].type, Path(v))
                              for k, v in result.outputs.items()}
    if result.code != 0:
        tail = "\n".join(f"  | {line}" for line in result_tail(result.log))
        print(f"\nstep {node.name} failed (exit {result.code}); {node.where}\nlog tail "
              f"({result.log}):\n{tail}", file=sys.stderr)
    return result.code


def result_tail(log: Path, lines: int = 25) -> list[str]:
    return log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else []


def run_sweep_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    outputs = node_outputs(node, scope)
    run_id = rt.tracking.start(scope.experiment, node.name, {"mlops.spec": node.where,
                                                             "mlops.step": node.name},
                               scope.run_id)
    ctx = TrialContext(folder, scope.assets, f"{node.where}.trial", node.name,
                       scope.experiment, run_id)
    make = trial_factory(definition_for(node), node.base, node_inputs(node, scope), outputs, ctx)
    try:
        summary = sweep(node.raw, rt, folder, run_id, make)
    except KeyboardInterrupt:
        rt.tracking.finish(run_id, "KILLED")
        raise
    best = summary["best_trial"]
    paths = publish(Path(best["folder"]), outputs, folder) if best else {}
    scope.steps[node.name] = {k: (outputs[k].type, Path(v)) for k, v in paths.items()}
    rt.tracking.finish(run_id, "FINISHED" if best else "FAILED")
    return 0 if best else 1


def run_pipeline_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    outputs = {k: replace(v, target=slot(k, v, folder)) for k, v in
               node_outputs(node, scope).items()}
    run_id = rt.tracking.start(scope.experiment, node.name, {"mlops.spec": node.where,
                                                             "mlops.step": node.name},
                               scope.run_id)
    child = Scope(node_inputs(node, scope), outputs, folder, run_id, scope.experiment,
                  scope.assets, node.base, {}, scope.continue_on_failure, scope.force_rerun,
                  scope.reused)
    code = run_graph(plan(node.definition["jobs"], node.base, scope.assets, node.where), child,
                     rt)
    scope.steps[node.name] = {k: (v.type, v.target) for k, v in outputs.items()}
    return code


def run_parallel_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    definition = {**definition_for(node), **{k: v for k, v in node.raw.items()
                                             if k in parallel.NODE_SETTINGS}}
    task = parallel.node_task(definition, node.base, folder, node.where, node.name,
                              node_inputs(node, scope), node_outputs(node, scope), rt.max_procs,
                              experiment=scope.experiment, parent_run=scope.run_id,
                              tags={"mlops.spec": node.where, "mlops.step": node.name})
    result, items = parallel.run_node(definition, task, rt)
    scope.steps[node.name] = {k: (task.outputs[k].type, Path(v))
                              for k, v in result.outputs.items()}
    print(f"step {node.name}: {result.status}: {parallel.summary(folder / 'work', items)}",
          flush=True)
    if result.status != "Completed":
        tail = "\n".join(f"  | {line}" for line in result_tail(result.log))
        print(f"\nstep {node.name} failed; {node.where}\nlog tail ({result.log}):\n{tail}",
              file=sys.stderr)
        return result.code or 1
    return 0


RUNNERS = {"command": run_command_node, "sweep": run_sweep_node, "pipeline": run_pipeline_node,
           "parallel": run_parallel_node}


def run_graph(nodes: list[Node], scope: Scope, rt: runtime.Runtime) -> int:
    """Nodes in order; a failure stops the pipeline (or, with continue_on_step_failure, only
    what depends on it). Finishes the scope's MLflow run."""
    failed: set[str] = set()
    first_code = 0
    try:
        for node in nodes:
            launch.check_interrupt()
            if failed & {step for step, _ in STEP_OUTPUT.findall(str(node.raw))}:
                print(f"step {node.name}: skipped (an input comes from a failed step)")
                failed.add(node.name)
                continue
            code = RUNNERS[node.kind](node, scope, rt)
            if code != 0:
                failed.add(node.name)
                first_code = first_code or code
                if not scope.continue_on_failure:
                    break
    except KeyboardInterrupt:
        rt.tracking.finish(scope.run_id, "KILLED")
        raise
    rt.tracking.finish(scope.run_id, "FAILED" if failed else "FINISHED")
    return first_code


def run_pipeline_job(job, rt: runtime.Runtime) -> int:
    data, path = job.data, job.spec.path
    nodes = plan(data.get("jobs"), path.parent, job.assets, str(path))
    experiment = experiment_name(data)
    outputs = {name: replace(spec, target=slot(name, spec, rt.root))
               for name, spec in job_outputs(data.get("outputs")).items()}
    inputs = job_inputs(data.get("inputs"), path.parent, job.assets)
    record = rt.root / "run.json"
    previous = json.loads(record.read_text()).get("mlflow_run_id") if record.is_file() else None
    run_id = rt.tracking.start(experiment, job.name, {"mlops.spec": str(path),
                                                      "mlops.local": "true"}, reuse=previous)
    record.write_text(json.dumps({**json.loads(record.read_text()), "mlflow_run_id": run_id}))
    settings = data.get("settings") or {}
    scope = Scope(inputs, outputs, rt.root, run_id, experiment, job.assets, path.parent, {},
                  flag(settings.get("continue_on_step_failure")),
                  flag(settings.get("force_rerun")))
    print(f"{job.name}: steps {' -> '.join(n.name for n in nodes)}; run folder {rt.root}")
    code = run_graph(nodes, scope, rt)
    status = "Completed" if code == 0 else f"Failed (exit {code})"
    if scope.reused:
        status += f"; reused {len(scope.reused)} step(s): {', '.join(scope.reused)}"
    print(f"{job.name}: {status}\n  outputs: {rt.root / 'outputs'}\n  steps: {rt.root / 'steps'}"
          f"\n  MLflow run: {run_id}")
    return code
