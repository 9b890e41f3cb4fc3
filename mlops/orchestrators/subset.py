"""A pipeline's steps against a rerun's requests: what decides each step's reuse besides its
key (step_rules), and for --from / --only (mlops/runtime/selection.py) which steps run, which
take their outputs from their last run and which are left out, planned before anything runs.

A --from plan runs the named steps and everything downstream of them (a nested pipeline whose
inputs come from a step that runs, all of it); an --only plan runs the named steps and leaves
out what is downstream of them. A step left out takes its outputs from its last completed run
of this pipeline (this run folder's own, else the newest); one that never completed is refused
when a step that is not left out reads it, else left out too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.orchestrators.graph import (
    STEP_OUTPUT,
    Node,
    Produced,
    Scope,
    build_nodes,
    definition_for,
    node_outputs,
)
from mlops.runtime import (
    DONE,
    Address,
    AssetMap,
    Choice,
    Runtime,
    Selection,
    StepRules,
    Task,
    TaskRecord,
    deterministic,
    link_step,
)

Completed = Callable[[Address], bool]  # whether a step ever completed (its outputs exist)


def step_addresses(nodes: list[Node], assets: AssetMap, above: Address = ()) -> list[Address]:
    """Every step and pipeline node, by the path --from / --only (and DEBUG=) name it with."""
    found: list[Address] = []
    for node in nodes:
        here = (*above, node.name)
        found.append(here)
        if node.kind == "pipeline":
            found += step_addresses(children(node, assets), assets, here)
    return found


def children(node: Node, assets: AssetMap) -> list[Node]:
    return build_nodes(node.definition["jobs"], node.base, assets, node.where,
                       registry=node.registry)


def depends(node: Node) -> set[str]:
    return {step for step, _ in STEP_OUTPUT.findall(str(node.raw))}


def choose(selection: Selection, nodes: list[Node], assets: AssetMap, *,
           above: Address = (), inherit: Choice | None = None) -> set[str]:
    """Fill selection.choices for the steps below `nodes`; the nodes that run or are left out
    downstream (whose dependents follow them)."""
    moved: set[str] = set()
    for node in nodes:
        here = (*above, node.name)
        choice = Choice.RUN if selection.names(here) else inherit
        if choice is None and depends(node) & moved:
            choice = Choice.RUN if selection.flag == "--from" else Choice.SKIP
        if node.kind == "pipeline":
            if choose(selection, children(node, assets), assets, above=here, inherit=choice):
                moved.add(node.name)
            continue
        selection.choices[here] = choice or Choice.TAKE
        if choice is not None:
            moved.add(node.name)
    return moved


def plan(selection: Selection, nodes: list[Node], assets: AssetMap,
         completed: Completed) -> None:
    """The whole plan, refused before anything runs when it names no step, runs nothing, or
    needs the outputs of a step that never completed."""
    selection.check(step_addresses(nodes, assets))
    choose(selection, nodes, assets)
    if Choice.RUN not in selection.choices.values():
        raise LocalRunError(f"{selection.label}: no step to run")
    missing = [a for a, c in selection.choices.items() if c == Choice.TAKE and not completed(a)]
    for address in missing:
        selection.choices[address] = Choice.SKIP
    for address in missing:
        reader = reader_of(address, nodes, selection, assets)
        if reader is not None:
            raise LocalRunError(
                f"{selection.label}: step {'/'.join(reader)} reads the outputs of step "
                f"{'/'.join(address)}, which has never completed in a run of this pipeline, so "
                f"there are none to take; run the pipeline once, or name it too")


def reader_of(address: Address, nodes: list[Node], selection: Selection,
              assets: AssetMap) -> Address | None:
    """A step that is not left out and reads the outputs of the step at `address` (in the same
    pipeline), if any."""
    scope, name = address[:-1], address[-1]
    for node in scope_nodes(nodes, scope, assets):
        if name not in depends(node):
            continue
        here = (*scope, node.name)
        live = [a for a, c in selection.choices.items() if a[:len(here)] == here
                and c != Choice.SKIP]
        if live:
            return live[0]
    return None


def scope_nodes(nodes: list[Node], scope: Address, assets: AssetMap) -> list[Node]:
    for name in scope:
        node = next(n for n in nodes if n.name == name)
        nodes = children(node, assets)
    return nodes


def step_rules(node: Node, scope: Scope, rt: Runtime, **extra: object) -> StepRules:
    """What decides a node's reuse besides its key (mlops/runtime/reuse.py), and what finds its
    earlier runs."""
    definition = definition_for(node)
    address = (*scope.path, node.name)
    choice = rt.selection.choice(address) if rt.selection else None
    debugged = rt.debug is not None and rt.debug.matches(address)
    forced = rt.selection.label if choice in (Choice.RUN, Choice.TAKE) else \
        "DEBUG=" if debugged else "--force-rerun" if rt.force_rerun else \
        "settings.force_rerun" if scope.force_rerun else \
        "" if deterministic(definition) else "is_deterministic: false"
    named = {} if node.inline else node.definition
    return StepRules(spec=scope.spec, run=rt.shown.name, step="/".join(address),
                     component=str(named.get("name") or ""),
                     version=str(named.get("version") or ""), forced=forced,
                     resumable=not (choice == Choice.RUN or debugged or rt.force_rerun),
                     take=choice == Choice.TAKE, indexed=deterministic(definition),
                     extra=extra)


def take_node(node: Node, scope: Scope, rt: Runtime, rules: StepRules) -> int:
    """A node that is not one task (a sweep), left out by --from / --only: its last run's
    outputs, linked."""
    earlier = rt.steps.last(rules, rules.step)
    task = Task(name=node.name, command="", where=node.where,
                folder=scope.folder / "steps" / node.name, outputs=node_outputs(node, scope),
                experiment=scope.experiment, parent_run=scope.run_id,
                tags={"mlops.spec": node.where, "mlops.step": node.name})
    linked = link_step(task, earlier, rt.tracking)
    print(f"step {node.name}: reused (from {earlier.label}; {rules.forced} leaves it out)",
          flush=True)
    scope.steps[node.name] = {k: Produced(task.outputs[k].type, Path(v))
                              for k, v in linked.outputs.items()}
    scope.reused.append(node.name)
    return 0


def completed_steps(folder: Path) -> int:
    """How many steps (nested ones too) completed, or were reused, in a run folder."""
    count = 0
    for step in sorted((folder / "steps").glob("*/")):
        record = TaskRecord.read(step)
        count += (record is not None and record.status in DONE) + completed_steps(step)
    return count


def ever_completed(rt: Runtime, spec: str, address: tuple[str, ...]) -> bool:
    """Whether a step completed in this run folder, or in any run of this spec (--from/--only
    take its outputs from there)."""
    record = TaskRecord.read(rt.root.joinpath(*[p for name in address for p in ("steps", name)]))
    return (record is not None and record.status in DONE) or \
        rt.steps.last(StepRules(spec=spec), "/".join(address)) is not None
