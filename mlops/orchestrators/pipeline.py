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

from mlops.orchestrators import loops, parallel, subset
from mlops.orchestrators.component_job import pipeline_body
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
from mlops.orchestrators.subset import completed_steps, ever_completed, step_rules, take_node
from mlops.runtime import (
    AssetMap,
    Choice,
    Driven,
    Job,
    Result,
    RunStatus,
    Runtime,
    Status,
    Task,
    TaskSource,
    check_interrupt,
    command_task,
    experiment_name,
    guarding,
    job_inputs,
    job_outputs,
    publish,
    read_record,
    run_step,
    slot,
    spark_task,
    trial_addresses,
    update_record,
)
from mlops.specs import SpecData, flag


def node_source(node: Node, scope: Scope, definition: SpecData) -> TaskSource:
    """What a node's task is built from: its definition, bound to this pipeline."""
    return TaskSource(definition=definition, base=node.base,
                      folder=scope.folder / "steps" / node.name, assets=scope.assets,
                      where=node.where, name=node.name, experiment=scope.experiment,
                      parent=scope.run_id, inputs=node_inputs(node, scope),
                      outputs=node_outputs(node, scope),
                      tags={"mlops.spec": node.where, "mlops.step": node.name},
                      address=(*scope.path, node.name))


def node_task(node: Node, scope: Scope) -> Task:
    """A command or Spark node as one task (with a node's own limits: a component has none)."""
    definition = definition_for(node)
    if "limits" in node.raw:
        definition["limits"] = node.raw["limits"]
    source = node_source(node, scope, definition)
    if node.kind != "spark":
        return command_task(source)
    built = spark_task(source)
    for note in built.notes:
        print(note, file=sys.stderr)
    return built.task


def produced(task: Task, outputs: dict[str, str]) -> dict[str, Produced]:
    return {k: Produced(task.outputs[k].type, Path(v)) for k, v in outputs.items()}


def run_command_node(node: Node, scope: Scope, rt: Runtime) -> int:
    task = node_task(node, scope)
    result = run_step(task, rt, rules=step_rules(node, scope, rt), label=node.name)
    scope.steps[node.name] = produced(task, result.outputs)
    if loops.has_primitive_outputs(node):  # an if_else or do_while may read them
        scope.controls[node.name] = loops.control_outputs(rt, result.run_id)
    if result.status == Status.REUSED:
        scope.reused.append(node.name)
    elif result.code != 0:
        tail = "\n".join(f"  | {line}" for line in result_tail(result.log))
        print(f"\nstep {node.name} {result.status.lower()} (exit {result.code}); "
              f"{node.where}\nlog tail ({result.log}):\n{tail}", file=sys.stderr)
    return result.code


def result_tail(log: Path, lines: int = 25) -> list[str]:
    return log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else []


def run_sweep_node(node: Node, scope: Scope, rt: Runtime) -> int:
    from mlops.orchestrators.sweep import (
        TrialContext,
        no_best_reason,
        sweep,
        trial_factory,  # optuna: 0.3 s
    )

    folder = scope.folder / "steps" / node.name
    outputs = node_outputs(node, scope)
    tags = {"mlops.spec": node.where, "mlops.step": node.name}
    rules = step_rules(node, scope, rt)
    if rules.take:
        return take_node(node, scope, rt, rules)
    print(f"step {node.name}: ran: {rules.forced or 'a sweep runs its trials every time'}",
          flush=True)
    with rt.tracking.open(scope.experiment, node.name, tags, parent=scope.run_id) as run:
        ctx = TrialContext(folder=folder, assets=scope.assets, where=f"{node.where}.trial",
                           name=node.name, experiment=scope.experiment, parent=run.run_id,
                           address=(*scope.path, node.name), spec=scope.spec)
        make = trial_factory(definition_for(node), node.base,
                             inputs=node_inputs(node, scope), outputs=outputs, ctx=ctx)
        summary = sweep(node.raw, rt, folder=folder, parent_run=run.run_id, make_task=make,
                        rules=replace(rules, forced=""))
        best = summary.best
        paths = publish(best.folder, outputs, folder) if best else {}
        scope.steps[node.name] = {k: Produced(outputs[k].type, Path(v))
                                  for k, v in paths.items()}
        if not best:
            scope.unproduced[node.name] = f"its sweep has no best trial: {no_best_reason(summary)}"
        run.close(RunStatus.FINISHED if summary.completed else RunStatus.FAILED)
    if best:  # what --from / --only take from its last run
        rt.steps.completed_node(folder, run.run_id, paths, rules)
    return 0 if summary.completed else 1


def run_pipeline_node(node: Node, scope: Scope, rt: Runtime) -> int:
    folder = scope.folder / "steps" / node.name
    outputs = {k: replace(v, target=slot(k, v, folder)) for k, v in
               node_outputs(node, scope).items()}
    tags = {"mlops.spec": node.where, "mlops.step": node.name}
    with rt.tracking.open(scope.experiment, node.name, tags, parent=scope.run_id) as run:
        child = Scope(inputs=node_inputs(node, scope), outputs=outputs, folder=folder,
                      run_id=run.run_id, experiment=scope.experiment, assets=scope.assets,
                      base=node.base, continue_on_failure=scope.continue_on_failure,
                      force_rerun=scope.force_rerun, reused=scope.reused,
                      path=(*scope.path, node.name), spec=scope.spec)
        nodes = build_nodes(node.definition["jobs"], node.base, scope.assets, node.where,
                            registry=node.registry)
        code = run_graph(nodes, child, rt)
        run.close(RunStatus.FINISHED if code == 0 else RunStatus.FAILED)
    scope.steps[node.name] = {k: Produced(v.type, v.target) for k, v in outputs.items()}
    return code


def run_parallel_node(node: Node, scope: Scope, rt: Runtime) -> int:
    definition = {**definition_for(node), **{k: v for k, v in node.raw.items()
                                             if k in parallel.NODE_SETTINGS}}
    task = parallel.node_task(node_source(node, scope, definition), rt.max_procs)
    driven: list[Driven] = []

    def drive() -> Result:
        driven.append(parallel.run_node(definition, task, rt))
        return driven[0].result

    rules = step_rules(node, scope, rt, **parallel.key_settings(definition))
    result = run_step(task, rt, rules=rules, label=node.name, runs=drive)
    scope.steps[node.name] = produced(task, result.outputs)
    if driven:
        print(f"step {node.name}: {result.status}: {parallel.summary(driven[0].tally)}",
              flush=True)
    if result.status == Status.REUSED:
        scope.reused.append(node.name)
    elif result.status != Status.COMPLETED:
        tail = "\n".join(f"  | {line}" for line in result_tail(result.log))
        print(f"\nstep {node.name} failed; {node.where}\nlog tail ({result.log}):\n{tail}",
              file=sys.stderr)
        return result.code or 1
    return 0


def run_node(node: Node, scope: Scope, rt: Runtime) -> int:
    """One node by its kind (a loop runs its body through this too)."""
    return RUNNERS[node.kind](node, scope, rt)


RUNNERS = {"command": run_command_node, "sweep": run_sweep_node, "pipeline": run_pipeline_node,
           "parallel": run_parallel_node, "spark": run_command_node,
           "if_else": loops.run_if_else,
           "do_while": lambda node, scope, rt: loops.run_do_while(node, scope, rt, run_node),
           "parallel_for": lambda node, scope, rt: loops.run_parallel_for(node, scope, rt,
                                                                          run_node)}


def needs(node: Node) -> set[str]:
    """The nodes whose outputs `node` (and a loop's body) reads."""
    raw = [node.raw, node.body.raw] if node.body is not None else [node.raw]
    return {step for step, _ in STEP_OUTPUT.findall(str(raw))}


def run_graph(nodes: list[Node], scope: Scope, rt: Runtime) -> int:
    """Nodes in order; a failure stops the pipeline (or, with continue_on_step_failure, only
    what depends on it); a node an if_else did not choose is skipped. The first failing node's
    exit code (0: every node succeeded or was skipped)."""
    failed: set[str] = set()
    first_code = 0
    for node in nodes:
        check_interrupt()
        if failed & (needs(node) | ({node.gate[0]} if node.gate else set())):
            print(f"step {node.name}: skipped (an input comes from a failed step)")
            failed.add(node.name)
            continue
        if rt.selection and rt.selection.choice((*scope.path, node.name)) == Choice.SKIP:
            print(f"step {node.name}: left out ({rt.selection.label})", flush=True)
            continue
        why = loops.skip_reason(node, scope)
        if why is not None:
            loops.skip(node, scope, rt, why)
            continue
        code = run_node(node, scope, rt)
        if code == 0:
            code = register_node_outputs(node, scope)
        if code != 0:
            failed |= {node.name, *([node.body.name] if node.body is not None else [])}
            first_code = first_code or code
            if not scope.continue_on_failure:
                break
    return first_code or (1 if failed else 0)


def register_node_outputs(node: Node, scope: Scope) -> int:
    """A node's outputs declared with `name:` (and `version:`), registered when the step
    completes, as Azure registers them (mlops/workspace/jobs.py)."""
    from mlops.workspace.jobs import register_named

    declared = {k: v for k, v in (node.raw.get("outputs") or {}).items() if isinstance(v, dict)}
    paths = {k: str(made.path) for k, made in scope.steps.get(node.name, {}).items()}
    return register_named(declared, paths, origin=f"step {node.name}", label=f"step {node.name}")


def addresses(nodes: list[Node], assets: AssetMap, above: tuple[str, ...] = (),
              wanted: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every task the pipeline may start, by the path DEBUG= names it with (a sweep node's
    trials: the one `wanted` names, else a few: debugging.trial_addresses)."""
    found: list[tuple[str, ...]] = []
    for node in nodes:
        here = (*above, node.name)
        if node.body is not None:
            for part in loops.parts(node):
                found += addresses([node.body], assets, (*here, part), wanted)
        elif node.kind in ("if_else",):
            continue
        elif node.kind == "pipeline":
            found += addresses(build_nodes(node.definition["jobs"], node.base, assets,
                                           node.where, registry=node.registry), assets, here,
                               wanted)
        elif node.kind == "sweep":
            trials = int((node.raw.get("limits") or {}).get("max_total_trials") or 1)
            found += trial_addresses(wanted, trials, here)
        else:
            found.append(here)
    return found


def run_pipeline_job(job: Job, rt: Runtime) -> int:
    data, path = job.data, job.spec.path
    body = pipeline_body(data, path, job.assets)
    nodes = build_nodes(body.jobs, body.base, job.assets, str(path), registry=body.registry)
    if rt.debug is not None:
        rt.debug.check(addresses(nodes, job.assets, wanted=rt.debug.path))
    spec_file = str(path.resolve())
    if rt.selection is not None:
        subset.plan(rt.selection, nodes, job.assets, lambda a: ever_completed(rt, spec_file, a))
    experiment = experiment_name(data)
    outputs = {name: replace(spec, target=slot(name, spec, rt.root))
               for name, spec in job_outputs(body.outputs, job.assets).items()}
    inputs = job_inputs(body.inputs, path.parent, job.assets)
    earlier = read_record(rt.root)
    tags = {"mlops.spec": str(path), "mlops.local": "true"}
    settings = data.get("settings") or {}
    with rt.tracking.open(experiment, job.name, tags,
                          reopen=earlier.mlflow_run_id if earlier else None) as run:
        update_record(rt.root, mlflow_run_id=run.run_id)
        scope = Scope(inputs=inputs, outputs=outputs, folder=rt.root, run_id=run.run_id,
                      experiment=experiment, assets=job.assets, base=body.base,
                      continue_on_failure=flag(settings.get("continue_on_step_failure")),
                      force_rerun=flag(settings.get("force_rerun")), spec=spec_file)
        print(f"{job.name}: steps {' -> '.join(n.name for n in nodes)}; run folder {rt.shown}")
        if earlier is not None and earlier.mlflow_run_id:
            print(f"resuming {rt.shown.name}: {completed_steps(rt.root)} step(s) completed "
                  "there, reused unless they changed", flush=True)
        with guarding(rt.root, run.run_id, rt.tracking.uri):
            code = run_graph(nodes, scope, rt)
            run.close(RunStatus.FINISHED if code == 0 else RunStatus.FAILED)
    status = "Completed" if code == 0 else f"Failed (exit {code})"
    if scope.reused:
        status += f"; reused {len(scope.reused)} step(s): {', '.join(scope.reused)}"
    print(f"{job.name}: {status}\n  outputs: {rt.shown / 'outputs'}\n  steps: {rt.shown / 'steps'}"
          f"\n  MLflow run: {run.run_id}")
    return code

