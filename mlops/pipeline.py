"""Local pipeline jobs: steps run in dependency order, wired through their output folders.

`${{parent.inputs.x}}` binds a pipeline input, `${{parent.outputs.x}}` makes a step write into a
pipeline output, `${{parent.jobs.<step>.outputs.<name>}}` feeds one step's output folder to
another. A failing step stops the run and shows its log tail and its spec path.
"""

from __future__ import annotations

import re
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from . import execute
from .resolve import LocalRunError, render_command, render_literal, resolve_inputs
from .specs import load_spec

PARENT = re.compile(r"^\$\{\{\s*parent\.(inputs|outputs)\.(\w+)\s*\}\}$")
STEP_OUTPUT = re.compile(r"\$\{\{\s*parent\.jobs\.(\w+)\.outputs\.(\w+)\s*\}\}")


def step_order(jobs: dict, spec_path: Path) -> list[str]:
    graph = {name: {step for step, _ in STEP_OUTPUT.findall(str(node or {}))}
             for name, node in jobs.items()}
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        raise LocalRunError(f"{spec_path}: jobs: the steps depend on each other in a cycle "
                            f"({' -> '.join(err.args[1])}); break the cycle") from err


def bind(value, pipeline_inputs: dict, pipeline_outputs: dict, step_outputs: dict):
    """A node binding -> a concrete value: a pipeline input, an output folder, or a literal."""
    text = str(value)
    parent = PARENT.match(text)
    if parent:
        scope, name = parent.groups()
        return (pipeline_inputs if scope == "inputs" else pipeline_outputs).get(name)
    step = STEP_OUTPUT.fullmatch(text.strip())
    if step:
        return step_outputs[step.group(1)][step.group(2)]
    if isinstance(value, dict):
        return value.get("path") or value.get("value")
    return render_literal(value)


def step_values(name, node, component, ctx, state) -> tuple[dict, dict]:
    data = component.data
    inputs = {}
    for key, definition in (data.get("inputs") or {}).items():
        binding = (node.get("inputs") or {}).get(key)
        if binding is None:
            default = (definition or {}).get("default")
            inputs[key] = None if default is None else render_literal(default)
        else:
            inputs[key] = bind(binding, state["inputs"], state["outputs"], state["steps"])
    outputs = {}
    for key in data.get("outputs") or {}:
        binding = (node.get("outputs") or {}).get(key)
        target = bind(binding, state["inputs"], state["outputs"], state["steps"]) \
            if binding else None
        folder = Path(target) if target else ctx.run_dir / "steps" / name / key
        folder.mkdir(parents=True, exist_ok=True)
        outputs[key] = str(folder)
    state["steps"][name] = outputs
    return inputs, outputs


def run_step(name, node, ctx, state, parent_run: str) -> int:
    component = load_spec(ctx.spec.path.parent / node["component"].removeprefix("file:"))
    inputs, outputs = step_values(name, node, component, ctx, state)
    command = render_command(str(component.data["command"]), {"inputs": inputs,
                             "outputs": outputs}, component.path, "command")
    from .run import check_environment_pins, process_env

    check_environment_pins(component.data.get("environment"), ctx)
    run_id = ctx.tracking.start(ctx.spec.data.get("experiment_name") or "Default", name,
                                {"mlops.spec": str(component.path), "mlops.step": name},
                                parent=parent_run)
    env = process_env({**(component.data.get("environment_variables") or {}),
                       **(node.get("environment_variables") or {})}, run_id)
    cwd = (component.path.parent / component.data.get("code", ".")).resolve()
    print(f"step {name}: {command}", flush=True)
    proc = execute.start(name, command, cwd, env, ctx.run_dir / "steps" / name / "log.txt",
                         echo=True)
    try:
        code = execute.wait(proc)
    finally:
        ctx.tracking.finish(run_id, "FINISHED" if proc.popen.returncode == 0 else "FAILED")
    if code != 0:
        tail = "\n".join(f"  | {line}" for line in proc.tail)
        print(f"\nstep {name} failed (exit {code}); spec {component.path}\nlog tail "
              f"({proc.log}):\n{tail}", file=sys.stderr)
    return code


def run_pipeline(ctx) -> int:
    spec = ctx.spec.data
    jobs = spec.get("jobs") or {}
    state = {"inputs": resolve_inputs(spec.get("inputs"), ctx.spec.path, ctx.asset_map,
                                      ctx.map_file),
             "outputs": {}, "steps": {}}
    for name in spec.get("outputs") or {}:
        folder = ctx.run_dir / "outputs" / name
        folder.mkdir(parents=True, exist_ok=True)
        state["outputs"][name] = str(folder)
    order = step_order(jobs, ctx.spec.path)
    title = spec.get("display_name") or ctx.spec.path.stem
    parent = ctx.tracking.start(spec.get("experiment_name") or "Default", title,
                                {"mlops.spec": str(ctx.spec.path), "mlops.local": "true"})
    print(f"{title}: steps {' -> '.join(order)}; run folder {ctx.run_dir}")
    for name in order:
        try:
            code = run_step(name, jobs[name], ctx, state, parent)
        except KeyboardInterrupt:
            ctx.tracking.finish(parent, "KILLED")
            return 130
        if code != 0:
            ctx.tracking.finish(parent, "FAILED")
            return code
    ctx.tracking.finish(parent, "FINISHED")
    print(f"{title}: Completed\n  outputs: {ctx.run_dir / 'outputs'}\n  steps: "
          f"{ctx.run_dir / 'steps'}\n  MLflow run: {parent}")
    return 0
