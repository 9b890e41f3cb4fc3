"""Pipeline step reuse, as Azure reuses a step whose work would be the same, and why each step
ran or was reused, in one line.

Azure reuses a pipeline step (shows it "Reused", links the earlier outputs, starts nothing) when
its component is deterministic (`is_deterministic`, true by default) and the step's definition,
code snapshot, environment and inputs match an earlier completed step. Here a step's key hashes:
the task as resolved (command, distribution, resources, environment variables, declared outputs),
the content of its code snapshot (the files Azure would upload), its environment's packages and
Python, each literal input's text and each data input's content (a file's bytes, or every file
of a folder by relative path: an upstream step that ran again and wrote the same bytes is still
the same input). Not reused: `is_deterministic: false`, the pipeline's `settings.force_rerun`,
or `--force-rerun` (make ... FORCE=1).

Every step prints `reused (from <run> <step>)` or `ran: <what changed>`: the parts of its key
(keyparts.py, kept in `<step>/reuse.json`) against those of the nearest earlier run of the same
step (the same step path in runs of the same pipeline spec, else any run of the same component),
compared by keydiff.py. The explanation never changes a decision.

The index lives beside the run folders (`<runs>/.reuse/`): `<key>.json` (the step to link),
`history/` (each step's runs, newest last, for the explanation and --from/--only), `trees/`
(code snapshots' digests); a record whose step folder is gone, or did not complete, is ignored.
A step that completed in the very run folder being run again is kept in place when its key is
unchanged (resuming a failed or killed run), whatever its determinism.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlops.environments import steps
from mlops.environments.envspec import EnvMap, plan_for
from mlops.runtime import keydiff
from mlops.runtime.binding import publish
from mlops.runtime.earlier import DONE, Earlier, StepHistory, lineages
from mlops.runtime.keyparts import (
    Json,
    KeyParts,
    TreeStore,
    code_digest,
    data_digest,
    plain,
)
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.records import RunStatus, Status, TaskRecord
from mlops.runtime.tasks import Task
from mlops.specs import SpecData, flag

__all__ = ["DONE", "INDEX", "Earlier", "StepIndex", "StepRules", "code_digest", "data_digest",
           "deterministic", "lineages"]
INDEX = ".reuse"
ENDED = {Status.FAILED: "failed", Status.CANCELED: "was canceled", Status.TIMED_OUT: "timed out",
         Status.RUNNING: "was killed"}  # how an earlier attempt in the same folder ended


@dataclass(frozen=True, kw_only=True)
class StepRules:
    """What decides a step besides its key, and what finds its earlier runs."""

    spec: str  # the pipeline's spec file: earlier runs of a step are found by it and its path
    run: str = ""  # this run folder's name
    step: str = ""  # the step's path in its pipeline (outer/train)
    component: str = ""  # the component's name ("": an inline step) and version
    version: str = ""
    forced: str = ""  # why it runs whatever its key ("is_deterministic: false", "--from b")
    always: str = ""  # why it runs even unchanged, its changes still named (a sweep's trial)
    resumable: bool = True  # completed in this very run folder: kept when unchanged
    take: bool = False  # --from/--only left it out: its outputs from its last run
    indexed: bool = True  # deterministic: a later run may reuse it
    extra: dict[str, Json] = field(default_factory=dict)  # a parallel node's settings
    params: dict[str, str] = field(default_factory=dict)  # a sweep trial's sampled values


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A step's parts, the earlier step to link (None: it runs), its line and --explain's."""

    parts: KeyParts
    earlier: Earlier | None
    line: str
    details: list[str]


@dataclass(frozen=True)
class Linked:
    """A reused step: its own MLflow run, and where its outputs are."""

    run_id: str
    outputs: dict[str, str]


class StepIndex:
    """Completed steps by key and by step, for one folder of runs."""

    def __init__(self, runs: Path):
        self.folder = runs / INDEX
        self.trees = TreeStore(self.folder)
        self.earlier = StepHistory(self.folder)
        self._hashes: dict[str, object] | None = None

    @property
    def hashes(self) -> dict[str, object]:
        if self._hashes is None:
            try:
                self._hashes = json.loads((self.folder / "hashes.json").read_text())
            except (OSError, ValueError):
                self._hashes = {}
        return self._hashes

    def parts(self, task: Task, env_map: EnvMap, rules: StepRules) -> KeyParts:
        """The step's identity, part by part, and its key: everything that decides what it
        computes."""
        plan = plan_for(task.environment.value, task.environment.base, env_map, task.where)
        cache = self.hashes
        inputs = {name: (f"data:{data_digest(Path(value.path), cache)}" if value.is_data
                         else f"text:{value.text}") for name, value in task.inputs.items()}
        outputs = {name: {k: v for k, v in asdict(spec).items() if k != "target"}
                   for name, spec in task.outputs.items()}
        parts = KeyParts(
            command=task.command.replace(str(task.folder), "{step folder}"),
            code=self.trees.source(task.code, cache),
            includes=[self.trees.source(p, cache) for p in task.includes],
            environment={"label": plan.label, "python": plan.python,
                         "requirements": sorted(steps.key_lines(plan.requirements)),
                         "adds": sorted(task.environment.adds),
                         "fixed": sorted(task.environment.fixed)},
            inputs=inputs, outputs=plain(outputs), placement=plain(asdict(task.placement)),
            env=dict(task.env_vars), extra=plain(rules.extra), component=rules.component,
            version=rules.version, params=dict(rules.params), run=rules.run,
            step="/".join(task.address) or task.name, folder=str(task.folder.resolve()))
        self._save_hashes()
        return parts.hashed()

    def key(self, task: Task, env_map: EnvMap) -> str:
        return self.parts(task, env_map, StepRules(spec="")).key

    def _save_hashes(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f"hashes.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(self.hashes))
        os.replace(tmp, self.folder / "hashes.json")

    # deciding ---------------------------------------------------------------------------
    def decide(self, task: Task, env_map: EnvMap, rules: StepRules) -> Decision:
        """Link an earlier step, or run, and say why (the explanation never decides)."""
        parts = self.parts(task, env_map, rules)
        own = self.own(task.folder, parts.key) if rules.resumable else None
        if own is not None:
            return self._reused(parts, own, "")
        if rules.take:
            found = self.find(parts.key) or self.last(rules, parts.step)
            if found is not None:
                return self._reused(parts, found, f"; {rules.forced} leaves it out" + (
                    "" if found.key == parts.key else ", though it changed"))
        elif not rules.forced:
            found = self.find(parts.key)
            if found is not None:
                return self._reused(parts, found, "")
        return self._ran(parts, rules, task.folder)

    def explain(self, task: Task, env_map: EnvMap, rules: StepRules) -> Decision:
        """What differs from the nearest earlier run, for a task that always runs (a trial)."""
        return self._ran(self.parts(task, env_map, rules), rules, task.folder)

    def _reused(self, parts: KeyParts, earlier: Earlier, note: str) -> Decision:
        old = KeyParts.read(earlier.folder)
        changes = keydiff.compare(old, parts, self.trees) if old else []
        lines = [f"key {parts.key}, " + ("as " if earlier.key == parts.key else
                                          f"was {earlier.key} in ")
                 + f"{earlier.label} ({earlier.folder})", *keydiff.details(changes)]
        return Decision(parts=parts, earlier=earlier, line=f"reused (from {earlier.label}{note})",
                        details=lines)

    def _ran(self, parts: KeyParts, rules: StepRules, folder: Path) -> Decision:
        nearest = self.nearest(rules, parts.step)
        old = KeyParts.read(nearest.folder) if nearest else None
        changes = keydiff.compare(old, parts, self.trees) if old else [keydiff.Change(
            "its key differs (the earlier run kept no parts of it)")] * bool(nearest)
        lines = [f"key {parts.key}; nearest earlier run: " + (
            f"{nearest.label} ({nearest.folder}), key {nearest.key}" if nearest else "none"),
            *keydiff.details(changes)]
        ended = TaskRecord.read(folder)
        if rules.forced:
            why = rules.forced
        elif ended is not None and ended.status not in DONE:
            why = f"it {ENDED.get(ended.status, 'ended')} in this run"
        elif nearest is None:
            why = "no earlier run"
        elif nearest.key == parts.key:
            why = f"unchanged since {nearest.label} ({rules.always or 'not in the reuse index'})"
        else:
            why = f"{keydiff.summary(changes)} (since {nearest.label})"
        return Decision(parts=parts, earlier=None, line=f"ran: {why}", details=lines)

    # finding ----------------------------------------------------------------------------
    def find(self, key: str) -> Earlier | None:
        """The earlier completed step with this key, if its folder still holds it."""
        try:
            record = json.loads((self.folder / f"{key}.json").read_text())
            earlier = Earlier(folder=Path(record["folder"]), run_id=record["run_id"], key=key,
                              run=str(record.get("run") or ""), step=str(record.get("step") or ""))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return earlier if earlier.holds() else None

    def own(self, folder: Path, key: str) -> Earlier | None:
        """This step's folder, when it completed there with this key (a resumed run)."""
        record, parts = TaskRecord.read(folder), KeyParts.read(folder)
        if record is None or record.status not in DONE or parts is None or parts.key != key:
            return None
        return Earlier(folder=folder, run_id=record.mlflow_run_id or "", key=key, run=parts.run,
                       step=parts.step)

    def nearest(self, rules: StepRules, step: str) -> Earlier | None:
        """The nearest earlier run of this step: by its path in runs of the same spec, else
        any run of the same component."""
        return self.earlier.nearest(lineages(rules.spec, step, rules.component))

    def last(self, rules: StepRules, step: str) -> Earlier | None:
        """The step's last completed run in runs of the same spec (--from, --only)."""
        return self.earlier.nearest(lineages(rules.spec, step)[:1])

    # recording --------------------------------------------------------------------------
    def record(self, decision: Decision, folder: Path, run_id: str, rules: StepRules) -> None:
        """A step that completed: its parts in its folder, its key in the index (when later
        runs may reuse it), its run in its history."""
        parts = decision.parts
        parts.write(folder)
        here = Earlier(folder=folder.resolve(), run_id=run_id, key=parts.key, run=parts.run,
                       step=parts.step)
        if rules.indexed:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f"{parts.key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"folder": str(here.folder), "run_id": run_id,
                                       "run": here.run, "step": here.step}))
            os.replace(tmp, self.folder / f"{parts.key}.json")
        self.earlier.remember(here, lineages(rules.spec, parts.step, rules.component))

    def completed_node(self, folder: Path, run_id: str, outputs: dict[str, str],
                       rules: StepRules) -> None:
        """A node that is not one task (a sweep) completed: its record and its history, what
        --from / --only take from its last run."""
        TaskRecord(status=Status.COMPLETED, mlflow_run_id=run_id, exit_code=0,
                   outputs=outputs).write(folder)
        here = Earlier(folder=folder.resolve(), run_id=run_id, key="", run=rules.run,
                       step=rules.step)
        self.earlier.remember(here, lineages(rules.spec, rules.step)[:1])

    def linked(self, decision: Decision, folder: Path, rules: StepRules) -> None:
        """A step that was reused: its parts in its folder, the step it links in its
        history."""
        if decision.earlier is None:
            return
        if folder.resolve() != decision.earlier.folder.resolve():
            decision.parts.write(folder)
        self.earlier.remember(decision.earlier,
                             lineages(rules.spec, decision.parts.step, rules.component))


def deterministic(definition: SpecData) -> bool:
    return flag(definition.get("is_deterministic"), default=True)


def link_step(task: Task, earlier: Earlier, tracking: Tracking) -> Linked:
    """Azure's reused step: the earlier outputs linked into this step's places, nothing started,
    a FINISHED MLflow child run that names the original. A step kept in its own folder (a
    resumed run) keeps its run and outputs as they are."""
    folder = task.folder
    folder.mkdir(parents=True, exist_ok=True)
    if folder.resolve() == earlier.folder.resolve():
        recorded = TaskRecord.read(folder)
        return Linked(earlier.run_id, recorded.outputs if recorded else {})
    paths = publish(earlier.folder, task.outputs, folder)
    tags = {**task.tags, "mlops.reused_from": earlier.run_id,
            "mlops.reused_from_folder": str(earlier.folder)}
    with tracking.open(task.experiment, task.name, tags, parent=task.parent_run) as run:
        run.close(RunStatus.FINISHED)
    TaskRecord(status=Status.REUSED, mlflow_run_id=run.run_id, exit_code=0, outputs=paths,
               reused_run=earlier.run_id, reused_from=str(earlier.folder)).write(folder)
    return Linked(run.run_id, paths)
