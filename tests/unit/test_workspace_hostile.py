"""The local workspace against hostile and damaged input: job names and job records, paths that
leave their own tree, folders az ml's upload could not take, damaged MLflow stores and MLflow
versions whose files are gone, a workspace that cannot be written."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlops.errors import LocalRunError, MachineError
from mlops.workspace import jobs as workspace_jobs
from mlops.workspace import mlflow_models
from mlops.workspace.names import InvalidName
from mlops.workspace.records import AssetKind, DamagedRecord
from mlops.workspace.references import local_path
from mlops.workspace.store import Draft, Workspace
from mlops.workspace.uploads import upload_files


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    return Workspace(tmp_path / "workspace")


def finished_job(workspace: Workspace, tmp_path: Path, name: str = "train-7") -> Path:
    out = tmp_path / "run" / "outputs" / "o"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "f.txt").write_text("inside")
    (tmp_path / "run" / "secret.txt").write_text("outside the output")
    workspace_jobs.record_job(workspace, [name], tmp_path / "run", {"o": str(out)})
    return out


@pytest.mark.parametrize("name", ["j" * 300, "a b", "-x", "jо", "a\u00a0b", "x.y"])
def test_a_job_name_azure_refuses_is_refused_as_a_name(workspace, tmp_path, name):
    with pytest.raises(InvalidName, match="job name .* is not one Azure takes: job names"):
        local_path(f"azureml://jobs/{name}/outputs/o", AssetKind.DATA, workspace)
    with pytest.raises(InvalidName, match="job name"):
        workspace_jobs.claim_name(workspace, name, tmp_path / "run")
    assert not workspace.root.exists()


def test_a_job_name_at_azures_limit_has_a_record_of_its_own(workspace, tmp_path):
    name, other = "j" * 256, "j" * 255 + "k"
    out = finished_job(workspace, tmp_path, name)
    assert local_path(f"azureml://jobs/{name}/outputs/o", AssetKind.DATA, workspace) == out
    with pytest.raises(LocalRunError, match="no finished local job"):
        local_path(f"azureml://jobs/{other}/outputs/o", AssetKind.DATA, workspace)


@pytest.mark.parametrize("subpath", ["../..", "..", "sub/../../..", "../secret.txt", "/etc"])
def test_a_path_under_an_output_stays_in_it(workspace, tmp_path, subpath):
    finished_job(workspace, tmp_path)
    with pytest.raises(LocalRunError, match="the path leaves the output 'o'"):
        local_path(f"azureml://jobs/train-7/outputs/o/paths/{subpath}", AssetKind.DATA,
                   workspace)


def test_a_link_inside_an_output_does_not_lead_out_of_it(workspace, tmp_path):
    out = finished_job(workspace, tmp_path)
    (out / "escape").symlink_to(tmp_path / "run")
    with pytest.raises(LocalRunError, match="leaves the output"):
        local_path("azureml://jobs/train-7/outputs/o/paths/escape/secret.txt", AssetKind.DATA,
                   workspace)
    assert local_path("azureml://jobs/train-7/outputs/o/paths/sub/f.txt", AssetKind.DATA,
                      workspace) == out / "sub" / "f.txt"


@pytest.mark.parametrize(("record", "wrong"), [
    ("[1]", "not a JSON object"), ('{"folder": 3, "outputs": {}, "completed": true}', "'folder'"),
    ('{"folder": "rel", "outputs": {}, "completed": true}', "'folder'"),
    ('{"folder": "/r", "outputs": [], "completed": true}', "'outputs'"),
    ('{"folder": "/r", "outputs": {"o": 1}, "completed": true}', "'outputs'"),
    ('{"folder": "/r", "outputs": {"o": "../x"}, "completed": true}', "'outputs'"),
    ('{"folder": "/r", "outputs": {}, "completed": "yes"}', "'completed'"),
    ("[" * 100_000, "cannot be read|maximum recursion"), ("\xff\xfe", "Expecting value")])
def test_a_damaged_job_record_is_named_with_what_to_do(workspace, tmp_path, record, wrong):
    (workspace.root / "jobs").mkdir(parents=True)
    (workspace.root / "jobs" / "train-7.json").write_text(record, encoding="latin-1")
    with pytest.raises(DamagedRecord, match=f"train-7.json: damaged job record .*{wrong}.*"
                                            "remove it"):
        local_path("azureml://jobs/train-7/outputs/o", AssetKind.DATA, workspace)


def special_folder(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "model.pt").write_text("weights")
    entry = folder / "entry"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(entry))
        server.close()
    elif kind == "device":
        try:
            os.mknod(entry, 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null's numbers
        except PermissionError:
            pytest.skip("making a device needs root")
    elif kind == "dangling":
        entry.symlink_to(tmp_path / "gone")
    elif kind == "file-loop":
        entry.symlink_to(folder / "other")
        (folder / "other").symlink_to(entry)
    else:  # a link to a folder that holds it
        (folder / "deep").mkdir()
        (folder / "deep" / "up").symlink_to(folder)
    return folder


@pytest.mark.parametrize(("kind", "said"), [
    ("fifo", "named pipe"), ("socket", "socket"), ("device", "device"),
    ("dangling", "which does not exist"), ("file-loop", "loops")])
def test_a_folder_az_ml_could_not_upload_is_refused_by_name(workspace, tmp_path, kind, said):
    folder = special_folder(tmp_path, kind)
    with pytest.raises(LocalRunError, match=f"model clf: {folder}/.*{said}.*amlignore"):
        workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=folder))
    assert workspace.versions(AssetKind.MODEL, "clf") == []
    (folder / ".amlignore").write_text("entry\nother\n")  # kept out as az ml keeps it
    made = workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=folder))
    assert sorted(p.name for p in made.path.rglob("*")) == [".amlignore", "model.pt"]


def test_a_link_to_a_folder_that_holds_it_is_refused_whatever_the_ignore_file(workspace,
                                                                              tmp_path):
    folder = special_folder(tmp_path, "folder-loop")
    (folder / ".amlignore").write_text("deep/\n")  # az ml matches it on resolved paths
    with pytest.raises(LocalRunError, match=f"{folder}/deep/up links to {folder}, a folder it "
                                            "is in: .* remove the link"):
        workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=folder))


def test_a_job_output_is_registered_whole_whatever_its_ignore_file_says(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / ".gitignore").write_text("*.pt\n")
    (folder / "model.pt").write_text("w")
    assert {r for _, r in upload_files(folder, "x", ignore=False)} == {".gitignore", "model.pt"}
    assert {r for _, r in upload_files(folder, "x")} == {".gitignore"}


def test_the_local_runtimes_state_folder_is_never_part_of_an_upload(repo, monkeypatch):
    """`code: .` at a repository's root: the runs, MLflow store and workspace the local runtime
    keeps in `.azml/` are no part of the snapshot (on Azure they are the service's); each job's
    copy held every earlier run's. A folder of that name is kept where the state lies
    elsewhere, and the state folder's own contents can still be registered."""
    (repo / "train.py").write_text("print(1)\n")
    runs = repo / ".azml" / "runs" / "a" / "wd"
    runs.mkdir(parents=True)
    (runs / "train.py").write_text("print(1)\n")
    (repo / ".azml" / "mlflow.db").write_text("db")
    assert {r for _, r in upload_files(repo, "code")} == {"azml.toml", "train.py"}
    assert {r for _, r in upload_files(repo / ".azml" / "runs", "x")} == {"a/wd/train.py"}
    monkeypatch.setenv("AZML_STATE_DIR", str(repo.parent / "elsewhere"))
    from mlops.project import forget

    forget()
    assert ".azml/mlflow.db" in {r for _, r in upload_files(repo, "code")}


def test_a_workspace_that_cannot_be_written_is_the_machines_error(workspace, tmp_path,
                                                                  monkeypatch):
    source = tmp_path / "a"
    source.mkdir()
    (source / "m.pt").write_text("w")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(source / "m.pt"))

    monkeypatch.setattr("mlops.workspace.uploads.shutil.copyfile", full)
    with pytest.raises(MachineError, match="could not be written: No space left on device "
                                           r"\(the disk is full\); nothing was changed"):
        workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=source))
    assert not list((workspace.root / "models" / "clf").glob(".new-*"))  # nothing half-made


def test_a_damaged_mlflow_store_is_one_line_naming_it(monkeypatch, tmp_path):
    import sqlalchemy.exc

    store = tmp_path / "mlflow.db"
    monkeypatch.setattr("mlops.project.tracking_uri", lambda: f"sqlite:///{store}")
    with pytest.raises(MachineError) as caught, mlflow_models._store():
        raise sqlalchemy.exc.DatabaseError("SELECT", {}, Exception("file is not a database"))
    said = str(caught.value)
    assert "\n" not in said and f"MLflow store {store} cannot be read (file is not a database)" \
        in said and "move it aside" in said


def test_an_mlflow_version_whose_files_are_gone_is_never_taken_in(monkeypatch, tmp_path,
                                                                  capsys):
    workspace = Workspace(tmp_path / "workspace")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "MLmodel").write_text("flavors: {}\n")

    def download(artifact_uri, dst_path, tracking_uri):
        if artifact_uri.endswith("/2"):  # its source folder was deleted: MLflow hands back nothing
            Path(dst_path).mkdir(parents=True)
            return dst_path
        Path(dst_path).mkdir(parents=True)
        (Path(dst_path) / "MLmodel").write_text((kept / "MLmodel").read_text())
        return dst_path

    versions = [SimpleNamespace(version=v, tags={}, source=f"/gone/{v}", description="",
                                run_id="", current_stage="None") for v in ("1", "2")]
    client = SimpleNamespace(search_model_versions=lambda query: versions, tracking_uri="x",
                             get_model_version_download_uri=lambda name, v: f"/gone/{v}")
    monkeypatch.setattr(mlflow_models, "_client", lambda: client)
    monkeypatch.setattr("mlflow.artifacts.download_artifacts", download)
    # the copy's files listed without azure-ai-ml (its import is the other worker's: conftest)
    monkeypatch.setattr("mlops.workspace.uploads.sdk_listing", lambda source, what, ignore: [
        (str(p), str(p.relative_to(source))) for p in sorted(source.rglob("*")) if p.is_file()])
    taken = mlflow_models.take_in(workspace, "clf")
    assert [r.version for r in taken] == ["1"]
    assert workspace.find(AssetKind.MODEL, "clf").version == "1"  # 2 never became @latest
    assert "model clf version 2 has no files here (no files; its source: /gone/2)" in \
        capsys.readouterr().err


def test_an_mlflow_name_azure_refuses_is_left_out_of_the_list(monkeypatch, tmp_path, capsys):
    from mlops.api import registry as actions

    monkeypatch.setattr(mlflow_models, "registered_names", lambda: ["my model", "ok"])
    monkeypatch.setattr(mlflow_models, "take_in", lambda workspace, name: [])
    assert actions.listed(AssetKind.MODEL, None, False) == []
    assert "holds a model named 'my model', a name Azure refuses" in capsys.readouterr().err


def test_a_stray_folder_whose_name_azure_refuses_is_named_and_left_out(workspace, capsys):
    (workspace.root / "data" / "a b").mkdir(parents=True)
    assert workspace.names(AssetKind.DATA) == []
    assert "a b: not a data asset name Azure takes" in capsys.readouterr().err


def test_the_command_line_says_the_rule_for_a_name(capsys):
    from mlops import assets

    code = assets.main(["show", "model", "a" * 300])
    assert code == 2 and "model names are 1 to 255" in capsys.readouterr().err


@pytest.mark.parametrize("linked", ["record", "version", "content", "name"])
def test_a_record_or_folder_that_is_a_link_is_damaged(workspace, tmp_path, linked):
    source = tmp_path / "m"
    source.mkdir()
    (source / "w.pt").write_text("w")
    made = workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=source))
    elsewhere = tmp_path / "elsewhere"
    target = {"record": made.folder / "asset.json", "version": made.folder,
              "content": made.folder / "content", "name": made.folder.parent}[linked]
    for path in [target, *target.rglob("*")] if target.is_dir() else [target]:
        path.chmod(0o755)
    target.rename(elsewhere)
    target.symlink_to(elsewhere)
    with pytest.raises(DamagedRecord, match="is a link to .*the workspace writes none"):
        workspace.versions(AssetKind.MODEL, "clf")


@pytest.mark.parametrize("rest", ["../secret", "a/../../secret", ".."])
def test_a_datastore_path_stays_under_its_mapped_folder(tmp_path, rest):
    from mlops.runtime.uris import AssetMap

    mapping = tmp_path / "local-paths.yml"
    mapping.write_text(f"azureml://datastores/blob/paths/: {tmp_path / 'blob'}\n")
    with pytest.raises(LocalRunError, match="'..' would leave azureml://datastores/blob/paths/"):
        AssetMap(mapping).local_path(f"azureml://datastores/blob/paths/{rest}", "k", tmp_path)


def test_a_long_job_name_is_listed_and_found_by_its_name(workspace, tmp_path):
    name = "j" * 256
    finished_job(workspace, tmp_path, name)
    assert workspace_jobs.job_names(workspace) == [name]
    assert workspace_jobs.job_folder(workspace, name) == tmp_path / "run"
    assert set(workspace_jobs.completed_outputs(workspace, name)) == {"o"}
