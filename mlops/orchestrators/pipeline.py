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

import sys
from dataclasses import replace
from pathlib import Path

from mlops import runtime
from mlops.orchestrators import parallel
from mlops.orchestrators.graph import (
    STEP_OUTPUT,
    Node,
    Produced,
    Scope,
    build_nodes,
    definition_for,
    node_inputs,
    node_outputs,
)
from mlops.runtime import launch, watchdog
from mlops.runtime.binding import publish, slot
from mlops.runtime.job import Job, read_record, update_record
from mlops.runtime.reuse import deterministic, link_step
from mlops.runtime.spark import spark_task
from mlops.runtime.tasks import command_task, experiment_name
from mlops.runtime.uris import AssetMap
from mlops.runtime.values import (
    job_inputs,
    job_outputs,
)
from mlops.specs import flag


def run_command_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    definition = definition_for(node)
    if "limits" in node.raw:  # a node's own (a component has none)
        definition["limits"] = node.raw["limits"]
    args = (definition, node.base, folder, scope.assets, node.where, node.name,
            scope.experiment, scope.run_id, node_inputs(node, scope), node_outputs(node, scope),
            {"mlops.spec": node.where, "mlops.step": node.name})
    if node.kind == "spark":
        built = spark_task(*args)
        task = built.task
        for note in built.notes:
            print(note, file=sys.stderr)
    else:
        task = command_task(*args)
    task.address = (*scope.path, node.name)
    debugged = rt.debug is not None and rt.debug.matches(task.address)
    key = None
    if deterministic(definition) and not (scope.force_rerun or rt.force_rerun or debugged):
        key = rt.steps.key(task, rt.environments.env_map)
        earlier = rt.steps.find(key)
        if earlier is not None:
            paths = link_step(task, earlier, rt)
            scope.steps[node.name] = {k: Produced(task.outputs[k].type, Path(v))
                                      for k, v in paths.items()}
            scope.reused.append(node.name)
            return 0
    print(f"step {node.name}: started", flush=True)
    result = runtime.run(task, rt, label=node.name)
    if key is not None and result.status == "Completed":
        rt.steps.record(key, folder, result.run_id)
    scope.steps[node.name] = {k: Produced(task.outputs[k].type, Path(v))
                              for k, v in result.outputs.items()}
    if result.code != 0:
        tail = "\n".join(f"  | {line}" for line in result_tail(result.log))
        print(f"\nstep {node.name} {result.status.lower()} (exit {result.code}); "
              f"{node.where}\nlog tail ({result.log}):\n{tail}", file=sys.stderr)
    return result.code


def result_tail(log: Path, lines: int = 25) -> list[str]:
    return log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else []


def run_sweep_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    from mlops.orchestrators.sweep import TrialContext, sweep, trial_factory  # optuna: 0.3 s

    folder = scope.folder / "steps" / node.name
    outputs = node_outputs(node, scope)
    run_id = rt.tracking.start(scope.experiment, node.name, {"mlops.spec": node.where,
                                                             "mlops.step": node.name},
                               scope.run_id)
    ctx = TrialContext(folder, scope.assets, f"{node.where}.trial", node.name,
                       scope.experiment, run_id, (*scope.path, node.name))
    make = trial_factory(definition_for(node), node.base, node_inputs(node, scope), outputs, ctx)
    try:
        summary = sweep(node.raw, rt, folder, run_id, make)
    except KeyboardInterrupt:
        rt.tracking.finish(run_id, "KILLED")
        raise
    best = summary["best_trial"]
    paths = publish(Path(best["folder"]), outputs, folder) if best else {}
    scope.steps[node.name] = {k: Produced(outputs[k].type, Path(v)) for k, v in paths.items()}
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
                  scope.reused, (*scope.path, node.name))
    nodes = build_nodes(node.definition["jobs"], node.base, scope.assets, node.where)
    code = run_graph(nodes, child, rt)
    scope.steps[node.name] = {k: Produced(v.type, v.target) for k, v in outputs.items()}
    return code


def run_parallel_node(node: Node, scope: Scope, rt: runtime.Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    definition = {**definition_for(node), **{k: v for k, v in node.raw.items()
                                             if k in parallel.NODE_SETTINGS}}
    task = parallel.node_task(definition, node.base, folder, node.where, node.name,
                              node_inputs(node, scope), node_outputs(node, scope), rt.max_procs,
                              experiment=scope.experiment, parent_run=scope.run_id,
                              tags={"mlops.spec": node.where, "mlops.step": node.name})
    task.address = (*scope.path, node.name)
    driven = parallel.run_node(definition, task, rt)
    result = driven.result
    scope.steps[node.name] = {k: Produced(task.outputs[k].type, Path(v))
                              for k, v in result.outputs.items()}
    print(f"step {node.name}: {result.status}: {parallel.summary(driven.tally)}", flush=True)
    if result.status != "Completed":
        tail = "\n".join(f"  | {line}" for line in result_tail(result.log))
        print(f"\nstep {node.name} failed; {node.where}\nlog tail ({result.log}):\n{tail}",
              file=sys.stderr)
        return result.code or 1
    return 0


RUNNERS = {"command": run_command_node, "sweep": run_sweep_node, "pipeline": run_pipeline_node,
           "parallel": run_parallel_node, "spark": run_command_node}


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


def addresses(nodes: list[Node], assets: AssetMap, above: tuple[str, ...] = ()
              ) -> list[tuple[str, ...]]:
    """Every task the pipeline may start, by the path DEBUG= names it with."""
    found: list[tuple[str, ...]] = []
    for node in nodes:
        here = (*above, node.name)
        if node.kind == "pipeline":
            found += addresses(build_nodes(node.definition["jobs"], node.base, assets,
                                           node.where), assets, here)
        elif node.kind == "sweep":
            trials = int((node.raw.get("limits") or {}).get("max_total_trials") or 1)
            found += [(*here, f"trial:{n}") for n in range(trials)]
        else:
            found.append(here)
    return found


def run_pipeline_job(job: Job, rt: runtime.Runtime) -> int:
    data, path = job.data, job.spec.path
    nodes = build_nodes(data.get("jobs"), path.parent, job.assets, str(path))
    if rt.debug is not None:
        rt.debug.check(addresses(nodes, job.assets))
    experiment = experiment_name(data)
    outputs = {name: replace(spec, target=slot(name, spec, rt.root))
               for name, spec in job_outputs(data.get("outputs")).items()}
    inputs = job_inputs(data.get("inputs"), path.parent, job.assets)
    run_id = rt.tracking.start(experiment, job.name, {"mlops.spec": str(path),
                                                      "mlops.local": "true"},
                               reopen=read_record(rt.root).get("mlflow_run_id"))
    update_record(rt.root, mlflow_run_id=run_id)
    settings = data.get("settings") or {}
    scope = Scope(inputs, outputs, rt.root, run_id, experiment, job.assets, path.parent, {},
                  flag(settings.get("continue_on_step_failure")),
                  flag(settings.get("force_rerun")))
    print(f"{job.name}: steps {' -> '.join(n.name for n in nodes)}; run folder {rt.root}")
    with watchdog.guarding(rt.root, run_id, rt.tracking.uri):
        code = run_graph(nodes, scope, rt)
    status = "Completed" if code == 0 else f"Failed (exit {code})"
    if scope.reused:
        status += f"; reused {len(scope.reused)} step(s): {', '.join(scope.reused)}"
    print(f"{job.name}: {status}\n  outputs: {rt.root / 'outputs'}\n  steps: {rt.root / 'steps'}"
          f"\n  MLflow run: {run_id}")
    return code
