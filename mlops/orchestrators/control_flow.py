"""Control-flow nodes read and checked as azure-ai-ml loads them (`if_else`, `do_while`,
`parallel_for`: entities/_builders/condition_node.py, do_while.py, parallel_for.py and their
schemas): which nodes each one controls, what runs before what, and what a condition means.

- `if_else`: `condition` is a boolean literal or a binding (`${{parent.jobs.<n>.outputs.<o>}}`,
  `${{parent.inputs.<i>}}`); `true_block` / `false_block` name nodes (`${{parent.jobs.<n>}}`,
  one or a list), at least one block, none in both. The blocks run after the condition node.
- `do_while`: `body` a node of the pipeline, `mapping` from the body's outputs to the inputs of
  its next iteration (`<output>: <input>` or a list, by name or by binding), `condition` one of
  the body's primitive outputs, `limits.max_iteration_count` from 1 to 1000.
- `parallel_for`: `body` a node, `items` a non-empty list (or mapping) of mappings with the same
  keys, each one of the body's inputs (or a JSON text of one, or a binding), `outputs` the body's
  outputs aggregated (data: an mltable of the items' outputs; a primitive: a JSON string).
A loop's body runs only inside its loop; what reads the body's outputs runs after the loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.specs import SpecData

CONTROL_KINDS = ("if_else", "do_while", "parallel_for")
NODE_REF = re.compile(r"^\$\{\{\s*parent\.jobs\.([\w-]+)\s*\}\}$")
PORT_REF = re.compile(r"^\$\{\{\s*parent\.jobs\.([\w-]+)\.(inputs|outputs)\.([\w.-]+)\s*\}\}$")
PARENT_INPUT_TEXT = re.compile(r"^\$\{\{\s*parent\.inputs\.([\w.-]+)\s*\}\}$")
BINDING = re.compile(r"^\$\{\{\s*parent\.[\w.-]+\s*\}\}$")
PRIMITIVE = {"boolean", "integer", "number", "string"}
MAX_ITERATIONS = 1000  # azure-ai-ml's DO_WHILE_MAX_ITERATION


@dataclass(frozen=True)
class Ports:
    """A node's declared inputs and outputs (its component's, or an inline node's own)."""

    inputs: dict[str, object] = field(default_factory=dict)
    outputs: dict[str, object] = field(default_factory=dict)

    def output_type(self, name: str) -> str:
        decl = self.outputs.get(name)
        return str((decl or {}).get("type") or "uri_folder") if isinstance(decl, dict) \
            or decl is None else "uri_folder"


def _names(value, where: str, key: str) -> list[str]:
    items = value if isinstance(value, list) else [] if value is None else [value]
    names = []
    for item in items:
        match = NODE_REF.match(str(item)) if isinstance(item, str) else None
        if match is None:
            raise LocalRunError(f"{where}.{key}: '{key}' of dsl.condition has invalid binding "
                                f"expression: {item}, for example, ${{{{parent.jobs.xxx}}}}")
        names.append(match.group(1))
    return names


def blocks(raw: SpecData, where: str) -> tuple[list[str], list[str]]:
    """An if_else node's true and false blocks, checked as azure-ai-ml checks them."""
    true, false = _names(raw.get("true_block"), where, "true_block"), \
        _names(raw.get("false_block"), where, "false_block")
    if not true and not false:
        raise LocalRunError(f"{where}: True block and false block cannot be empty at the same "
                            "time.")
    if set(true) & set(false):
        raise LocalRunError(f"{where}: True block and false block cannot contain same nodes: "
                            f"{sorted(set(true) & set(false))}")
    condition = raw.get("condition")
    if not isinstance(condition, bool) and not (isinstance(condition, str)
                                                and BINDING.match(condition.strip())):
        raise LocalRunError(f"{where}.condition: 'condition' of dsl.condition has invalid "
                            f"binding expression: {condition}, for example, "
                            "${{parent.jobs.xxx.outputs.output}}")
    return true, false


def body_of(raw: SpecData, where: str) -> str:
    match = NODE_REF.match(str(raw.get("body") or "").strip())
    if match is None:
        raise LocalRunError(f"{where}.body: {raw.get('body')!r}: a loop's body is a node of "
                            "this pipeline, written ${{parent.jobs.<node>}}")
    return match.group(1)


def port_name(value, body: str, side: str, where: str) -> str:
    """A mapping's or condition's port, by name or by `${{parent.jobs.<body>.<side>.<name>}}`."""
    text = str(value).strip()
    match = PORT_REF.match(text)
    if match is None:
        return text
    if match.group(1) != body or match.group(2) != side:
        raise LocalRunError(f"{where}: {text} is not one of the body's {side}; dowhile only "
                            f"accepts {side[:-1]}s of the body: {body}")
    return match.group(3)


@dataclass(frozen=True, kw_only=True)
class DoWhile:
    """A do_while node as it runs: its body, the mapping, the condition and the limit."""

    body: str
    mapping: dict[str, list[str]]  # body output -> the inputs it feeds next time
    condition: str | None
    max_iterations: int


def do_while(raw: SpecData, ports: dict[str, Ports], where: str) -> DoWhile:
    body = body_of(raw, where)
    if body not in ports:
        raise LocalRunError(f"{where}: Cannot find the do-while loop body \"{body}\" in the "
                            "pipeline.")
    own = ports[body]
    mapping: dict[str, list[str]] = {}
    for out, ins in (raw.get("mapping") or {}).items():
        out = port_name(out, body, "outputs", f"{where}.mapping")
        ins = [port_name(i, body, "inputs", f"{where}.mapping")
               for i in (ins if isinstance(ins, list) else [ins])]
        _check_ports(out, ins, own, body=body, where=where)
        mapping[out] = ins
    taken = [i for ins in mapping.values() for i in ins]
    for doubled in sorted({i for i in taken if taken.count(i) > 1}):
        raise LocalRunError(f"{where}.mapping: Input {doubled} has been linked to multiple "
                            "outputs.")
    condition = raw.get("condition")
    if condition is not None:
        condition = port_name(condition, body, "outputs", f"{where}.condition")
        if condition not in own.outputs:
            raise LocalRunError(f"{where}.condition: {condition} is not an output of {body} "
                                f"(its outputs: {', '.join(own.outputs) or 'none'})")
        if own.output_type(condition) not in PRIMITIVE:
            raise LocalRunError(f"{where}.condition: {condition} is not a control output and "
                                "is not primitive type. The condition of dowhile must be the "
                                "control output or primitive type of the body.")
    return DoWhile(body=body, mapping=mapping, condition=condition,
                   max_iterations=_limit(raw, where))


def _check_ports(out: str, ins: list[str], own: Ports, *, body: str, where: str) -> None:
    if out not in own.outputs:
        raise LocalRunError(f"{where}.mapping: The output of mapping {out} does not exist in "
                            f"{body} outputs, existing outputs: {sorted(own.outputs)}")
    for name in ins:
        if name not in own.inputs:
            raise LocalRunError(f"{where}.mapping: The input of mapping {name} does not exist "
                                f"in {body} inputs, existing inputs: {sorted(own.inputs)}")
        decl = own.inputs.get(name)
        in_type = str((decl or {}).get("type") or "") if isinstance(decl, dict) else ""
        if own.output_type(out) not in PRIMITIVE and in_type in PRIMITIVE:
            raise LocalRunError(f"{where}.mapping: {out} is a non-primitive type output and "
                                f"{name} is a primitive input. Non-primitive type output "
                                "cannot be connected to an a primitive type input.")


def _limit(raw: SpecData, where: str) -> int:
    count = (raw.get("limits") or {}).get("max_iteration_count") \
        if isinstance(raw.get("limits"), dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or \
            not 1 <= count <= MAX_ITERATIONS:
        raise LocalRunError(f"{where}.limits.max_iteration_count: {count!r}; give a whole "
                            f"number from 1 to {MAX_ITERATIONS}")
    return count


Item = tuple[str, dict[str, object]]  # a parallel_for item: its name, and the inputs it sets


def items_of(value, where: str, body_inputs: dict[str, object] | None) -> list[Item]:
    """parallel_for's items, each with the name its outputs are aggregated under (its index,
    or its key when items is a mapping), checked as azure-ai-ml checks them."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise LocalRunError(f"{where}.items: Items is neither a valid JSON string due to "
                                f"{err} or a binding string.") from None
    named = list(value.items()) if isinstance(value, dict) else \
        [(str(i), v) for i, v in enumerate(value)] if isinstance(value, list) else None
    if named is None:
        raise LocalRunError(f"{where}.items: a list or mapping of mappings, got "
                            f"{type(value).__name__}")
    if not named:
        raise LocalRunError(f"{where}.items: Items is an empty list/dict.")
    keys = None
    for key, item in named:
        if not isinstance(item, dict):
            raise LocalRunError(f"{where}.items: Items has to be list/dict of dict as value, "
                                f"but got {type(item).__name__} for {item}.")
        if keys is not None and set(item) != keys:
            raise LocalRunError(f"{where}.items: Items should have same keys with body inputs, "
                                f"but got {sorted(item)} and {sorted(keys)}.")
        keys = set(item)
        unknown = sorted(set(item) - set(body_inputs)) if body_inputs is not None else []
        if unknown:
            raise LocalRunError(f"{where}.items: item {key} sets {unknown}, which the loop body "
                                f"does not take (its inputs: {sorted(body_inputs or {})})")
    return [(str(k), dict(v)) for k, v in named]


def truth(value, where: str) -> bool:
    """A condition's value as Azure reads a boolean: a literal, or a primitive output's text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise LocalRunError(f"{where}: the condition's value is {str(value)[:80]!r}, not a "
                        "boolean (True or False)")


CONTROL_KEY = "azureml.pipeline.control"  # the run property mldesigner writes primitive outputs to


def primitive_value(path: Path, name: str, control: dict[str, object] | None = None) -> str:
    """A primitive output's value: the step's control outputs (mldesigner writes them as the run
    property azureml.pipeline.control), else the text written at the output's path (a file, or
    `output` in its folder, where mldesigner writes it)."""
    if control and name in control:
        value = control[name]
        return ("True" if value else "False") if isinstance(value, bool) else str(value)
    target = path / "output" if path.is_dir() else path
    if path.is_dir() and not target.is_file():
        files = [p for p in path.iterdir() if p.is_file()]
        target = files[0] if len(files) == 1 else target
    try:
        return target.read_text(encoding="utf-8").strip()[:100_000]
    except (OSError, UnicodeDecodeError):
        raise LocalRunError(f"primitive output {name}: nothing written at {path} (a step writes "
                            "its value there, or as mldesigner does)") from None
