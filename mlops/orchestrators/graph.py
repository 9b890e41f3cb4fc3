"""A pipeline's graph: its nodes, their order, and what each node's inputs and outputs bind to.

mlops/orchestrators/pipeline.py runs the nodes; this module only reads the spec
(`${{parent.inputs.x}}`, `${{parent.outputs.x}}`, `${{parent.jobs.<node>.outputs.<name>}}`,
node-level overrides).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import NamedTuple

from mlops.errors import LocalRunError
from mlops.orchestrators.control_flow import (
    CONTROL_KINDS,
    PRIMITIVE,
    Ports,
    blocks,
    body_of,
    primitive_value,
)
from mlops.runtime import (
    DATA_TYPES,
    AssetMap,
    OutputSpec,
    Value,
    input_value,
    load_component,
    output_spec,
)
from mlops.specs import REF, SpecData
from mlops.workspace.records import asset_kind

PARENT_INPUT = re.compile(r"^\$\{\{\s*parent\.inputs\.([\w.-]+)\s*\}\}$")
PARENT_OUTPUT = re.compile(r"^\$\{\{\s*parent\.outputs\.([\w.-]+)\s*\}\}$")
STEP_OUTPUT = re.compile(r"\$\{\{\s*parent\.jobs\.([\w-]+)\.outputs\.([\w.-]+)\s*\}\}")
OVERRIDES = ("distribution", "environment", "environment_variables")
# what a spark node may set over its component (azure-ai-ml's Spark node schema)
SPARK_OVERRIDES = ("entry", "py_files", "jars", "files", "archives", "args", "identity",
                   "compute")


@dataclass(kw_only=True)
class Node:
    name: str
    kind: str  # command, sweep, parallel, spark or pipeline
    raw: SpecData  # the node as written: bindings and overrides
    definition: SpecData  # the component (or inline command, or trial) it runs
    base: Path  # what the definition's relative paths are relative to
    where: str
    inline: bool = False  # a command node with no component: it declares its own inputs
    registry: str | None = None  # the registry its component came from (its references' home)
    gate: tuple[str, bool] | None = None  # in an if_else block: (that node, the block's branch)
    body: Node | None = None  # a loop's body, which only the loop runs
    owner: str | None = None  # a loop body: the loop that runs it

    @property
    def ports(self) -> Ports:
        """Its declared inputs and outputs (an inline node's own)."""
        source = self.raw if self.inline else self.definition
        return Ports(dict(source.get("inputs") or {}), dict(source.get("outputs") or {}))


class Produced(NamedTuple):
    """An output a node produced: its type and where it is."""

    type: str
    path: Path


@dataclass(kw_only=True)
class Scope:
    """What `${{parent.*}}` means inside one pipeline (the job itself, or a pipeline component)."""

    inputs: dict[str, Value]
    outputs: dict[str, OutputSpec]  # targets are concrete paths
    folder: Path
    run_id: str
    experiment: str
    assets: AssetMap
    base: Path
    steps: dict[str, dict[str, Produced]] = field(default_factory=dict)  # node -> its outputs
    continue_on_failure: bool = False
    force_rerun: bool = False  # settings.force_rerun: no step is reused
    reused: list[str] = field(default_factory=list)  # names of the steps reused, for the summary
    path: tuple[str, ...] = ()  # the nodes above this scope: a nested pipeline's names
    spec: str = ""  # the pipeline job's spec file: a step's earlier runs are found by it
    skipped: set[str] = field(default_factory=set)  # nodes not run: an if_else did not choose them
    chosen: dict[str, bool] = field(default_factory=dict)  # if_else node -> its condition's value
    given: dict[str, dict[str, Value]] = field(default_factory=dict)  # a loop's inputs, by node
    controls: dict[str, dict[str, object]] = field(default_factory=dict)  # control outputs by node
    unproduced: dict[str, str] = field(default_factory=dict)  # node -> why it gave no outputs


def load_node(name: str, raw, *, base: Path, assets: AssetMap, where: str,
              registry: str | None = None) -> Node:
    if not isinstance(raw, dict):
        raise LocalRunError(f"{where}: a node is a mapping (command, component or trial)")
    kind = str(raw.get("type") or "command").lower()
    if kind in CONTROL_KINDS:  # control flow: what it controls is wired in build_nodes
        return Node(name=name, kind=kind, raw=raw, definition=raw, base=base, where=where,
                    inline=True, registry=registry)
    if kind == "automl":  # runs as what searches (mlops/automl/translate.py)
        from mlops.automl.translate import automl_command

        built = automl_command(raw, where, assets)
        for note in built.notes:
            print(note, file=sys.stderr)
        if built.definition["type"] == "sweep":  # an image task: a sweep of Azure's runner
            return Node(name=name, kind="sweep", raw=built.definition,
                        definition=built.definition["trial"], base=base, where=where)
        return Node(name=name, kind="command", raw=built.definition, definition=built.definition,
                    base=base, where=where, inline=True)
    if kind == "sweep":
        definition, def_base, home = load_component(raw.get("trial"), base, assets,
                                                    f"{where}.trial", registry=registry)
    elif kind in ("command", "pipeline", "parallel", "spark") and \
            raw.get("component") is not None:
        definition, def_base, home = load_component(raw["component"], base, assets,
                                                    f"{where}.component", registry=registry)
    elif kind in ("command", "parallel", "spark"):
        return Node(name=name, kind=kind, raw=raw, definition=raw, base=base, where=where,
                    inline=True, registry=registry)
    else:
        raise LocalRunError(f"{where}: a {kind} node cannot run on this machine (the local "
                            "runtime runs command, sweep, parallel, spark, automl, pipeline, "
                            "if_else, do_while and parallel_for nodes); run it on Azure")
    if kind == "pipeline" and not isinstance(definition.get("jobs"), dict):
        raise LocalRunError(f"{where}: the pipeline component has no jobs:")
    return Node(name=name, kind=kind, raw=raw, definition=definition, base=def_base, where=where,
                registry=home)


def build_nodes(jobs: SpecData, base: Path, assets: AssetMap, where: str, *,
                registry: str | None = None) -> list[Node]:
    """Every node loaded and every static data input resolved, in dependency order (a loop's
    body is not in it: its loop runs it). `registry`: the registry a pipeline component came
    from, where its nodes' `azureml:` components are."""
    nodes = {name: load_node(name, raw, base=base, assets=assets, where=f"{where}: jobs.{name}",
                             registry=registry)
             for name, raw in (jobs or {}).items()}
    for node in nodes.values():
        for key, binding in (node.raw.get("inputs") or {}).items():
            if isinstance(binding, dict) and not REF.search(str(binding.get("path", ""))):
                input_value(binding, f"{node.where}.inputs.{key}", base, assets)
        if node.kind == "pipeline":
            build_nodes(node.definition["jobs"], node.base, assets, node.where,
                        registry=node.registry)
    graph = {name: {step for step, _ in STEP_OUTPUT.findall(str(node.raw))}
             for name, node in nodes.items()}
    unknown = {dep for deps in graph.values() for dep in deps} - set(nodes)
    if unknown:
        raise LocalRunError(f"{where}: jobs refer to nodes that do not exist: {sorted(unknown)}")
    wire(nodes, graph)
    try:
        return [nodes[name] for name in TopologicalSorter(graph).static_order()]
    except CycleError as err:
        raise LocalRunError(f"{where}: jobs: the nodes depend on each other in a cycle "
                            f"({' -> '.join(err.args[1])}); break the cycle") from err


def _member(nodes: dict[str, Node], name: str, control: Node) -> Node:
    if name not in nodes:
        raise LocalRunError(f"{control.where}: node {name} does not exist in this pipeline "
                            f"(its nodes: {', '.join(nodes)})")
    return nodes[name]


def wire(nodes: dict[str, Node], graph: dict[str, set[str]]) -> None:
    """Control flow into the order: an if_else's blocks run after it; a loop's body runs only
    inside its loop, which runs after what the body needs, and what reads the body's outputs
    runs after the loop (control_flow.py)."""
    for name, node in nodes.items():
        if node.kind == "if_else":
            true, false = blocks(node.raw, node.where)
            for member, branch in [(m, True) for m in true] + [(m, False) for m in false]:
                _member(nodes, member, node).gate = (name, branch)
                graph[member].add(name)
        elif node.kind in ("do_while", "parallel_for"):
            body = _member(nodes, body_of(node.raw, node.where), node)
            if body.owner is not None or body.kind in CONTROL_KINDS:
                raise LocalRunError(f"{node.where}.body: The body of loop node cannot be "
                                    "promoted as another loop again.")
            body.owner, node.body = name, body
    for node in [n for n in nodes.values() if n.owner is not None]:
        needs = graph.pop(node.name) - {node.owner}
        graph[node.owner] = (graph[node.owner] | needs) - {node.name}
        for deps in graph.values():
            if node.name in deps:
                deps.discard(node.name)
                deps.add(node.owner)
        graph[node.owner].discard(node.owner)


def bind(binding, decl: SpecData, scope: Scope, key: str) -> Value:
    """A node input binding -> its value in this pipeline."""
    kind = str((decl or {}).get("type") or "")
    if isinstance(binding, dict):
        path = binding.get("path")
        if isinstance(path, str) and REF.search(path):  # the binding's type and mode hold
            value = bind(path, decl, scope, key)
            return replace(value, type=str(binding.get("type") or value.type),
                           mode=str(binding.get("mode") or value.mode or "") or None)
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
        return step_output(match.group(1), match.group(2), scope, where=f"{key}: {text}",
                           kind=kind)
    if PARENT_OUTPUT.match(text):
        raise LocalRunError(f"{key}: a node input cannot read a pipeline output ({text})")
    if REF.search(text):  # a literal with pipeline inputs inside it
        return Value(text=REF.sub(lambda m: str(bind("${{" + m.group(1) + "}}", {}, scope,
                                                key).text or ""), binding))
    if kind in DATA_TYPES:
        return Value(path=scope.assets.local_path(binding, key, scope.base, bare=True,
                                                  kind=asset_kind(kind)), type=kind)
    return Value(text=binding)


def step_output(step: str, output: str, scope: Scope, *, where: str, kind: str | None) -> Value:
    """`${{parent.jobs.<step>.outputs.<output>}}`: what that step produced."""
    if step in scope.skipped:  # an optional input from a step not run: no value
        return Value(text=None, type=kind or "string")
    produced = scope.steps.get(step, {})
    if output not in produced and step in scope.unproduced:
        raise LocalRunError(f"{where}: node {step} gave no outputs: {scope.unproduced[step]}")
    if output not in produced:
        raise LocalRunError(f"{where}: node {step} has no output {output} (its outputs: "
                            f"{', '.join(produced) or 'none'})")
    out_type, path = produced[output]
    if out_type in PRIMITIVE:  # a primitive output feeds its value
        return Value(text=primitive_value(path, output, scope.controls.get(step)), type=out_type)
    return Value(path=path, type=kind or out_type)


def node_inputs(node: Node, scope: Scope) -> dict[str, Value]:
    decls = {} if node.inline else (node.definition.get("inputs") or {})
    bindings = node.raw.get("inputs") or {}
    given = scope.given.get(node.name, {})  # a loop's: an item's, the last iteration's outputs
    values = {}
    for name in [*decls, *[b for b in bindings if b not in decls], *given]:
        decl = decls.get(name) if isinstance(decls.get(name), dict) else {}
        if name in given:
            values[name] = given[name]
        elif name in bindings:
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
        bound = binding.get("path") if isinstance(binding, dict) else binding
        if isinstance(bound, str) and (match := PARENT_OUTPUT.match(bound.strip())):
            if match.group(1) not in scope.outputs:
                raise LocalRunError(f"{node.where}.outputs.{name}: the pipeline has no output "
                                    f"{match.group(1)}")
            parent = scope.outputs[match.group(1)]  # a mapping's own mode holds over it
            own = str(binding.get("mode") or "").lower() if isinstance(binding, dict) else ""
            spec = replace(spec, type=parent.type, filename=parent.filename,
                           target=parent.target, mode=own or parent.mode or spec.mode)
        elif isinstance(binding, dict) and binding.get("type"):
            spec = output_spec(binding, scope.assets)
        specs[name] = spec
    return specs


def definition_for(node: Node) -> SpecData:
    """The component with the node's own overrides (distribution, resources, ...) applied."""
    merged = {**node.definition, **{k: node.raw[k] for k in OVERRIDES if k in node.raw}}
    if "environment_variables" in node.raw:
        merged["environment_variables"] = {**(node.definition.get("environment_variables")
                                              or {}), **(node.raw["environment_variables"] or {})}
    resources = {**(node.definition.get("resources") or {}), **(node.raw.get("resources") or {})}
    merged["resources"] = resources or None
    if node.kind == "spark":
        merged.update({k: node.raw[k] for k in SPARK_OVERRIDES if k in node.raw})
        merged["conf"] = {**(node.definition.get("conf") or {}), **(node.raw.get("conf") or {})}
    return merged
