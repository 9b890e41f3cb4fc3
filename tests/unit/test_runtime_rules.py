"""Rules of the local runtime that need no process: how --set edits a spec (held to azure-ai-ml's
own override hook), how a command is rendered, how references map to local paths, which places a
job may not write, how processes share the cores, and which signals stop a run."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from mlops.checks.overrides import apply_sets, parse_sets
from mlops.errors import LocalRunError
from mlops.orchestrators.parallel import batch_size, entry_script, tabular
from mlops.runtime import launch
from mlops.runtime.uris import lookup
from mlops.runtime.values import Value, render_command


def test_processes_share_the_cores_unless_told_otherwise(monkeypatch):
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    for processes, env, threads in ((2, {}, "1"), (8, {}, "1"), (1, {}, None),
                                    (2, {"OMP_NUM_THREADS": "2"}, "2")):
        launch.share_cores(env, processes)
        assert env.get("OMP_NUM_THREADS") == threads, (processes, env)


def test_the_runner_catches_every_signal_that_stops_a_terminal_job():
    """SIGINT (Ctrl-C), SIGTERM (kill) and SIGHUP (the terminal closed) take the same handler,
    so the end-to-end test below sends two of them."""
    previous = launch.install_signal_handlers()
    try:
        handlers = {signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM,
                                                      signal.SIGHUP)}
        assert len(handlers) == 1 and callable(handlers.pop())
    finally:
        launch.restore_signal_handlers(previous)


def test_render_substitutes_raw_values_and_drops_unset_optional_segments():
    command = "python t.py --a '${{inputs.a}}' $[[--b ${{inputs.b}}]] --o ${{outputs.o}}"
    values = {"inputs": {"a": "x y", "b": None}, "outputs": {"o": "/tmp/o"}}
    assert render_command(command, values, "s.yml") == "python t.py --a 'x y'  --o /tmp/o"
    values["inputs"]["a"] = None
    with pytest.raises(LocalRunError, match=r"\$\{\{inputs.a\}\} has no value"):
        render_command(command, values, "s.yml")


def test_set_passes_raw_strings_as_the_cli_does():
    data = {"inputs": {"epochs": 10, "data": "azureml:fowl@latest"}}
    apply_sets(data, parse_sets(["inputs.epochs=1", "limits.timeout=60", "a.b=x=y"],
                                Path("s.yml")), Path("s.yml"))
    assert data["inputs"]["epochs"] == "1" and data["limits"]["timeout"] == "60"
    assert data["a"]["b"] == "x=y"
    with pytest.raises(LocalRunError, match="defined by reference strings"):
        apply_sets(data, [{"inputs.data.path": "/x"}], Path("s.yml"))


SET_CASES = [
    ({"inputs": {"epochs": 10}}, [{"inputs.epochs": "1"}]),
    ({}, [{"limits.timeout": "60"}, {"a.b.c": "x=y"}]),  # missing levels are created
    ({"jobs": {"train": {"inputs": {"lr": 0.1}}}}, [{"jobs.train.inputs.lr": "0.5"}]),
    ({"inputs": {"data": "azureml:fowl@latest"}}, [{"inputs.data.path": "/x"}]),  # refused
    ({"inputs": {"data": "azureml:fowl@latest"}}, [{"inputs.data": "azureml:other:2"}]),
    ({"environment_variables": None}, [{"environment_variables.X": "1"}]),
    ({"list": [{"a": 1}]}, [{"list.0.a": "2"}]),
    ({"tags": {"k": "v"}}, [{"tags": "flat"}, {"tags2.k": "true"}]),
]


@pytest.mark.parametrize("data,overrides", SET_CASES)
def test_set_matches_azure_ai_mls_own_override_hook(data, overrides):
    """apply_sets mirrors azure-ai-ml's PathAwareSchema.add_param_overrides (what az ml job create
    runs on --set) without importing the SDK on every rerun; this holds it to the original."""
    import copy
    from types import SimpleNamespace

    from azure.ai.ml._schema.core.schema import PathAwareSchema
    from azure.ai.ml.constants._common import PARAMS_OVERRIDE_KEY
    from azure.ai.ml.exceptions import MlException

    theirs, ours = copy.deepcopy(data), copy.deepcopy(data)
    hook = SimpleNamespace(context={PARAMS_OVERRIDE_KEY: overrides})
    try:
        PathAwareSchema.add_param_overrides(hook, theirs)
        refused = None
    except (MlException, AttributeError) as err:  # the CLI fails on either
        refused = str(err)
    if refused:
        expected = "has no attribute 'get'" if "no attribute" in refused else \
            "defined by reference strings"
        with pytest.raises(LocalRunError, match=expected):
            apply_sets(ours, overrides, Path("s.yml"))
    else:
        assert apply_sets(ours, overrides, Path("s.yml")) == theirs


def test_reference_lookup_by_asset_name_prefix_and_long_datastore_form():
    mapping = {"azureml:fowl": "data/fowl",
               "azureml://datastores/blob/paths/": "data/blob/"}
    assert lookup("azureml:fowl:3", mapping) == "data/fowl"
    assert lookup("azureml:fowl@latest", mapping) == "data/fowl"
    assert lookup("azureml://datastores/blob/paths/a/b.csv", mapping) == "data/blob/a/b.csv"
    # a folder's own prefix key: a data spec's `path: .../x/` is read without its slash
    folder = {"azureml://datastores/blob/paths/data/curated/": "core/data/curated"}
    assert lookup("azureml://datastores/blob/paths/data/curated", folder) == "core/data/curated"
    assert lookup("azureml://datastores/blob/paths/data/curated/", folder) == "core/data/curated"
    assert lookup("azureml://datastores/blob/paths/data/curatedX", folder) is None
    long_form = ("azureml://subscriptions/s/resourcegroups/g/workspaces/w/datastores/blob/"
                 "paths/a/b.csv")
    assert lookup(long_form, mapping) == "data/blob/a/b.csv"
    assert lookup("https://example.com/x.csv", mapping) is None


def test_read_only_places_follow_the_input_mode(tmp_path):
    from mlops.runtime.binding import read_only
    from mlops.runtime.values import Value

    data, task = tmp_path / "data", tmp_path / "runs" / "job"
    inputs = {"a": Value(path=data, type="uri_folder"), "b": Value(path=data, mode="download"),
              "c": Value(path=data / "f.csv", type="uri_file", mode="ro_mount"),
              "n": Value(text="3"), "whole": Value(path=tmp_path, type="uri_folder")}
    assert read_only(inputs, task) == [
        str(task / "inputs/a"), str(data), str(task / "inputs/c"), str(data / "f.csv"),
        str(task / "inputs/whole")]  # not tmp_path itself: the job's own folder is inside it


def test_downloaded_inputs_are_the_jobs_own_copies(tmp_path):
    """`download` and `eval_download` (an MLTable's files, downloaded): Azure downloads the
    data to the node, so the job may write it; here it gets a copy, never links through which
    its writes would reach the user's files. A mounted input is a folder of links (read-only:
    readonly_inputs.py)."""
    from mlops.runtime.binding import bind_inputs
    from mlops.runtime.values import Value

    data = tmp_path / "data"
    data.mkdir()
    (data / "MLTable").write_text("paths:\n  - file: ./rows.csv\n")
    (data / "rows.csv").write_text("a\n1\n")
    inputs = {"eval": Value(path=data, type="mltable", mode="eval_download"),
              "file": Value(path=data / "rows.csv", type="uri_file", mode="eval_download"),
              "mounted": Value(path=data, type="mltable", mode="eval_mount")}
    bound = bind_inputs(inputs, tmp_path / "run")
    original = data / "rows.csv"
    assert not Path(bound["eval"], "rows.csv").samefile(original)
    assert not Path(bound["file"]).samefile(original)
    Path(bound["eval"], "rows.csv").write_text("changed\n")
    Path(bound["file"]).write_text("changed\n")
    assert original.read_text() == "a\n1\n"
    assert Path(bound["mounted"], "rows.csv").samefile(original)  # a link, read-only


def test_mini_batch_sizes_are_counts_or_sizes():
    assert batch_size("5", False, "x") == 5 and batch_size(None, False, "x") == 10
    assert batch_size("10kb", True, "x") == 10240 and batch_size("1MB", True, "x") == 1 << 20
    with pytest.raises(LocalRunError, match="mini_batch_size"):
        batch_size("ten", False, "x")


def test_a_job_sees_azures_variables_not_this_shells_python_path(monkeypatch, tmp_path):
    """What Azure sets itself, and what would make this shell's modules importable (a user's
    `PYTHONPATH=src`), never reach a job from the shell; the rest of the shell does."""
    from types import SimpleNamespace

    from mlops.environments.activation import Activation
    from mlops.runtime.environ import process_env

    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONSTARTUP", "AZUREML_RUN_ID",
                 "MLFLOW_RUN_ID", "RANK"):
        monkeypatch.setenv(name, "from-the-shell")
    monkeypatch.setenv("MY_SETTING", "kept")
    task = SimpleNamespace(inputs={}, folder=tmp_path, read_only=[], outputs={},
                           assets=(None, {}), env_vars={"PYTHONPATH": "the-specs-own"})
    env = process_env(task, Activation(variables={}, top_site=tmp_path, label="x"), inputs={},
                      outputs={})
    assert "from-the-shell" not in env.values() and env["MY_SETTING"] == "kept"
    assert env["PYTHONPATH"] == "the-specs-own"  # environment_variables: still the spec's


@pytest.mark.parametrize("kind", ["run_function", "function", "RUN_FUNCTION", "Function", None])
def test_a_parallel_task_runs_its_script_under_every_type_azure_loads_for_one(kind):
    task = {"entry_script": "score.py", **({"type": kind} if kind else {})}
    assert entry_script(task, "x") == "score.py"


def test_a_parallel_task_without_a_script_or_of_another_type_is_refused_by_name():
    with pytest.raises(LocalRunError, match="entry_script"):
        entry_script({"type": "function"}, "x")
    with pytest.raises(LocalRunError, match="task.type: 'model'"):
        entry_script({"type": "model", "entry_script": "score.py"}, "x")


def test_an_mltable_is_a_table_in_direct_mode_and_a_file_list_mounted_or_downloaded():
    def table(mode):
        return tabular(Value(path=Path("t"), type="mltable", mode=mode))
    assert table("direct") and table(None) and table("DIRECT")
    assert not any(table(mode) for mode in ("ro_mount", "download", "eval_mount",
                                             "eval_download"))
    assert not tabular(Value(path=Path("t"), type="uri_folder", mode="direct"))


def test_a_mapped_output_in_a_folder_with_a_space_reaches_the_command_whole(tmp_path,
                                                                            monkeypatch):
    from mlops.runtime import aliases

    monkeypatch.setattr(aliases, "_base", lambda: tmp_path / "links")
    folder = tmp_path / "my data" / "pred"
    folder.mkdir(parents=True)
    seen = aliases.shell_path(str(folder))
    assert aliases.is_safe(Path(seen)) and Path(seen).resolve() == folder.resolve()
    file_seen = aliases.shell_path(str(folder / "log.txt"))
    assert file_seen == str(Path(seen) / "log.txt")
    assert aliases.shell_path(str(tmp_path)) == str(tmp_path)


def test_a_mapped_output_under_a_space_is_seen_as_the_folder_itself_not_a_link_to_it(
        tmp_path, monkeypatch):
    """`rm -rf ${{outputs.x}}` must remove the output folder (its rw_mount is then made again,
    as Azure's mount point stays), not a link to it that nothing makes again: the link is to the
    deepest folder a shell would split, and the names below it are the real ones."""
    import shutil

    from mlops.runtime import aliases

    monkeypatch.setattr(aliases, "_base", lambda: tmp_path / "links")
    folder = tmp_path / "my store" / "shared" / "training_data"
    folder.mkdir(parents=True)
    (folder / "old.csv").write_text("x\n")
    seen = Path(aliases.shell_path(str(folder)))
    assert aliases.is_safe(seen) and seen.name == "training_data" and not seen.is_symlink()
    assert Path(os.readlink(seen.parent.parent)) == (tmp_path / "my store").resolve()
    shutil.rmtree(seen)  # what the shell's rm -rf does through the path the command sees
    assert not folder.exists()
    folder.mkdir()  # the launcher's DEBUG trap (launch.keeping_mounts) makes it again
    assert seen.is_dir() and not (seen / "old.csv").exists()
    name_split = tmp_path / "my store" / "a b.txt"  # a file's own name: nothing keeps it whole
    assert aliases.shell_path(str(name_split)) == str(name_split)


def test_a_parallel_nodes_workers_are_told_the_asset_maps_stand_ins(tmp_path):
    from mlops.orchestrators.parallel import node_task
    from mlops.runtime.tasks import TaskSource
    from mlops.runtime.uris import AssetMap

    (tmp_path / "model").mkdir()
    (tmp_path / "map.yml").write_text(f"azureml:fare-model: {tmp_path / 'model'}\n")
    definition = {"task": {"type": "run_function", "entry_script": "score.py", "code": "."},
                  "input_data": "${{inputs.data}}"}
    source = TaskSource(definition=definition, base=tmp_path, folder=tmp_path / "run",
                        assets=AssetMap(tmp_path / "map.yml"), where="p.yml: jobs.score",
                        name="score", experiment="e", inputs={}, outputs={})
    task = node_task(source, max_procs=1)
    assert task.assets == (str(tmp_path / "map.yml"),
                           {"azureml:fare-model": str(tmp_path / "model")})


def test_a_uri_file_output_bound_to_a_folder_is_refused_by_name(tmp_path):
    """An asset map that sends a uri_file output (an append_row_to file) to a folder: the
    input's error, before anything runs (was an IsADirectoryError traceback at the end)."""
    from mlops.runtime.binding import bind_outputs
    from mlops.runtime.values import OutputSpec

    folder = tmp_path / "training_log.txt"
    folder.mkdir()
    with pytest.raises(LocalRunError, match="output log is a uri_file.*training_log.txt"):
        bind_outputs({"log": OutputSpec(type="uri_file", target=folder)}, tmp_path / "task")
    assert bind_outputs({"log": OutputSpec(type="uri_file", target=tmp_path / "a.txt")},
                        tmp_path / "task") == {"log": str(tmp_path / "a.txt")}


@pytest.mark.parametrize(("values", "said"), [
    ({"A=B": "x"}, "its name holds '=' or a NUL character"),
    ({"X\0Y": "x"}, "its name holds '=' or a NUL character"),
    ({"N": "a\0b"}, "its value holds a NUL character"),
    ({"LONG": "v" * 200_000}, "it is 200,006 bytes, past the 131,072 Linux lets one variable"),
])
def test_a_variable_no_process_can_start_with_is_the_inputs_error_by_name(values, said):
    """Was a ValueError or E2BIG traceback from the launcher (jobs, steps, deployments alike
    read environment_variables through tasks.variables)."""
    from mlops.runtime.tasks import variables

    with pytest.raises(LocalRunError, match=rf"environment_variables\.'.*': {said}"):
        variables(values)
    assert variables({"OK": "v" * 100_000, "N": None, 3: 1.5}) == {"OK": "v" * 100_000,
                                                                   "N": "", "3": "1.5"}


def test_a_command_or_variable_no_process_can_start_with_is_refused_before_anything_starts():
    """A literal input of 200 kB substituted into the command (or carried in its
    AZURE_ML_INPUT_<name>) was an E2BIG traceback from Popen."""
    from mlops.runtime.launch import too_long

    with pytest.raises(LocalRunError, match=r"the command, its inputs substituted, is 200,014 "
                                            r"bytes, past the 131,072"):
        too_long("echo " + "v" * 200_008, [{}])
    with pytest.raises(LocalRunError, match=r"variable AZURE_ML_INPUT_x is 200,018 bytes"):
        too_long("echo", [{"AZURE_ML_INPUT_x": "v" * 200_000}])
    too_long("echo " + "v" * 100_000, [{"X": "v" * 100_000}])  # within the limit: nothing said
