"""The local workspace: Azure's rules for registered versions (immutable, the next integer,
`latest`, archive), references resolved from it before the mapping file, and damaged or
hostile input refused by name."""

from __future__ import annotations

import json
import re
import threading

import pytest
from support import copied_store

from mlops.endpoints.models import lay_out, model_source
from mlops.errors import LocalRunError
from mlops.runtime.uris import AssetMap
from mlops.workspace import jobs as workspace_jobs
from mlops.workspace.names import InvalidName
from mlops.workspace.records import RECORD, AssetKind, AssetVersion, DamagedRecord
from mlops.workspace.references import AssetRef, local_path, parse
from mlops.workspace.store import Draft, Workspace


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    return Workspace(tmp_path / "workspace")  # the one tests/unit/conftest.py points at


def folder_with(path, text: str):
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.pt").write_text(text)
    return path


def model(name: str, source, version: str | None = None) -> Draft:
    return Draft(kind=AssetKind.MODEL, name=name, source=source, version=version,
                 type="custom_model")


def test_versions_count_up_latest_moves_archived_is_never_latest(workspace, tmp_path):
    first = workspace.create(model("clf", folder_with(tmp_path / "a", "one")))
    second = workspace.create(model("clf", folder_with(tmp_path / "b", "two")))
    assert (first.version, second.version) == ("1", "2") and first.new
    assert workspace.find(AssetKind.MODEL, "clf").version == "2"
    workspace.set_archived(AssetKind.MODEL, "clf", "2", archived=True)
    assert workspace.find(AssetKind.MODEL, "clf").version == "1"
    assert workspace.find(AssetKind.MODEL, "clf", version="2").archived  # still by number
    workspace.set_archived(AssetKind.MODEL, "clf", None, archived=True)
    with pytest.raises(LocalRunError, match=r"no @latest .* holds versions 1 \(archived\), 2"):
        workspace.find(AssetKind.MODEL, "clf")
    assert workspace.find(AssetKind.MODEL, "other") is None  # not held: the map is next


def test_a_version_is_immutable_the_same_content_is_a_no_op(workspace, tmp_path):
    source = folder_with(tmp_path / "a", "one")
    made = workspace.create(model("clf", source, version="v1"))
    again = workspace.create(model("clf", source, version="v1"))
    assert again.version == "v1" and not again.new
    (source / "model.pt").write_text("changed")
    with pytest.raises(LocalRunError, match="exists with other content; a version is immutable"):
        workspace.create(model("clf", source, version="v1"))
    assert (made.path / "model.pt").read_text() == "one"  # a copy, never the user's file
    assert not (made.path / "model.pt").stat().st_mode & 0o222  # read-only
    assert workspace.create(model("clf", source)).version == "1"  # "v1" is not an integer


def test_damaged_content_and_records_are_named(workspace, tmp_path):
    made = workspace.create(model("clf", folder_with(tmp_path / "a", "one")))
    (made.path / "model.pt").chmod(0o644)
    (made.path / "model.pt").write_text("rot")
    with pytest.raises(DamagedRecord, match="damaged"):
        local_path("azureml:clf:1", AssetKind.MODEL, workspace)
    (made.folder / RECORD).write_text("{not json")
    with pytest.raises(DamagedRecord, match="damaged asset record"):
        workspace.versions(AssetKind.MODEL, "clf")


NAMES_AZURE_REFUSES = ["", "..", "a/b", "x\0y", "a" * 256, "a" * 300, "a\u2010b", "mоdel",
                       "a\u00a0b", "a b", "-lead", "trail.", "_under", "tab\t", "a\n"]


@pytest.mark.parametrize("name", NAMES_AZURE_REFUSES)
def test_names_azure_refuses_are_refused_with_its_rule_before_the_disk(workspace, tmp_path,
                                                                       name):
    source = folder_with(tmp_path / "a", "one")
    with pytest.raises(InvalidName, match="is not one Azure takes: model names are 1 to 255"):
        workspace.create(model(name, source))
    for kind in (AssetKind.DATA, AssetKind.ENVIRONMENT, AssetKind.COMPONENT):
        with pytest.raises(InvalidName, match=f"{kind.noun} name"):
            workspace.create(Draft(kind=kind, name=name, source=source))
    assert not workspace.root.exists()  # refused before anything touched the disk
    assert workspace.find(AssetKind.MODEL, name) is None  # a reference to it: not held here


@pytest.mark.parametrize("version", ["", ".", "..", ".hidden", "a/b", "x\0y", "1" * 256,
                                     "1\u00a0", "v 1", "٣"])
def test_versions_that_cannot_be_a_folder_here_are_refused(workspace, tmp_path, version):
    with pytest.raises(InvalidName, match="is not one the local workspace takes"):
        workspace.create(model("ok", folder_with(tmp_path / "a", "one"), version=version))
    assert not workspace.root.exists()


@pytest.mark.parametrize(("kind", "name"), [
    (AssetKind.MODEL, "a" * 255), (AssetKind.MODEL, "v1.2-final_x"), (AssetKind.DATA, "9-d_x"),
    (AssetKind.ENVIRONMENT, "E" * 255), (AssetKind.COMPONENT, "train_step_2")])
def test_names_at_the_limits_azure_takes_are_registered(workspace, tmp_path, kind, name):
    made = workspace.create(Draft(kind=kind, name=name, source=folder_with(tmp_path / "a", "x"),
                                  version="1"))
    assert workspace.find(kind, name).digest == made.digest


@pytest.mark.parametrize(("kind", "name"), [
    (AssetKind.DATA, "has.dot"), (AssetKind.ENVIRONMENT, "AzureML-sklearn-1.0-ubuntu20.04"),
    (AssetKind.COMPONENT, "Train"), (AssetKind.COMPONENT, "train-step")])
def test_each_kind_has_its_own_rule(workspace, tmp_path, kind, name):
    with pytest.raises(InvalidName, match=f"{kind.noun} names are"):
        workspace.create(Draft(kind=kind, name=name, source=folder_with(tmp_path / "a", "x")))
    assert workspace.find(kind, name) is None  # a curated environment's name: not held here


@pytest.mark.parametrize(("change", "wrong"), [
    (lambda r: r.update(tags=["a"]), "'tags' is list"),
    (lambda r: r.update(tags={"a": 1}), "'tags' holds a value that is not text"),
    (lambda r: r.update(sequence="2"), "'sequence' is str"),
    (lambda r: r.update(archived="no"), "'archived' is str"),
    (lambda r: r.update(version=3), "'version' is int"),
    (lambda r: r.pop("kind"), "no 'kind'"),
    (lambda r: r.update(kind="models2"), "not an asset kind"),
    (lambda r: r.update(name="other"), "it names models/other/1 but lies in models/clf/1"),
    (lambda r: r.update(item="../../../etc"), "is not a name inside"),
    (lambda r: r.update(item=".."), "is not a name inside"),
    (lambda r: r.update(digest="forged"), "digest is not a sha256"),
    (lambda r: r.clear() or r.update(a=[[[]]]), "no 'kind'")])
def test_a_record_is_type_checked_on_read_and_named_when_damaged(workspace, tmp_path, change,
                                                                 wrong, capsys):
    from mlops.api import registry as actions

    made = workspace.create(model("clf", folder_with(tmp_path / "a", "one")))
    record = json.loads((made.folder / RECORD).read_text())
    change(record)
    (made.folder / RECORD).write_text(json.dumps(record))
    for action in (lambda: actions.listed(None, "clf", False),
                   lambda: actions.show(actions.Selection(kind=AssetKind.MODEL, name="clf")),
                   lambda: workspace.create(model("clf", tmp_path / "a"))):
        with pytest.raises(DamagedRecord, match=f"asset.json: damaged asset record .*{wrong}"):
            action()
    assert actions.listed(None, None, False) == []  # every name: left out, said on stderr
    assert re.search(f"WARNING: .*asset.json: damaged asset record .*{wrong}.*left out",
                     capsys.readouterr().err)


def test_content_outside_its_folder_is_refused_whatever_the_digest_says(workspace, tmp_path):
    made = workspace.create(model("clf", folder_with(tmp_path / "a", "one")))
    secret = folder_with(tmp_path / "secret", "private")
    made.path.chmod(0o755)
    (made.path / "model.pt").unlink()
    (made.path / "model.pt").symlink_to(secret / "model.pt")  # the same bytes, the same digest
    with pytest.raises(DamagedRecord, match="is a link"):
        local_path("azureml:clf:1", AssetKind.MODEL, workspace)


@pytest.mark.parametrize("size", [200_000, 2 << 20])
def test_a_huge_or_deeply_nested_record_is_damaged_not_a_crash(workspace, tmp_path, size):
    made = workspace.create(model("clf", folder_with(tmp_path / "a", "one")))
    (made.folder / RECORD).write_text("[" * size)
    with pytest.raises(DamagedRecord, match="damaged asset record"):
        workspace.versions(AssetKind.MODEL, "clf")


def test_two_creates_at_once_get_two_versions(workspace, tmp_path):
    sources = [folder_with(tmp_path / str(n), str(n)) for n in range(4)]
    made = []
    threads = [threading.Thread(target=lambda s=s: made.append(workspace.create(model("clf", s))))
               for s in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(r.version) for r in made) == [1, 2, 3, 4]


@pytest.mark.parametrize(("reference", "expected"), [
    ("azureml:clf:3", AssetRef(kind=None, name="clf", version="3")),
    ("azureml:clf@latest", AssetRef(kind=None, name="clf", label="latest")),
    ("azureml:clf", AssetRef(kind=None, name="clf")),
    ("azureml://locations/westeurope/workspaces/w1/models/clf/versions/2",
     AssetRef(kind=AssetKind.MODEL, name="clf", version="2")),
    ("azureml://subscriptions/s/resourcegroups/g/workspaces/w/data/d/labels/latest",
     AssetRef(kind=AssetKind.DATA, name="d", label="latest")),
    ("azureml://registries/azureml/models/clf/versions/2", None),
    ("azureml://datastores/blob/paths/x", None)])
def test_references_name_the_asset(reference, expected):
    assert parse(reference) == expected


def test_references_resolve_from_the_workspace_before_the_mapping_file(workspace, tmp_path):
    data = tmp_path / "images"
    data.mkdir()
    (data / "a.txt").write_text("a")
    workspace.create(Draft(kind=AssetKind.DATA, name="imgs", source=data, type="uri_folder"))
    mapping = tmp_path / "local-paths.yml"
    mapping.write_text(f"azureml:imgs: {tmp_path}\nazureml:elsewhere: {tmp_path}\n")
    assets = AssetMap(mapping)
    found = assets.local_path("azureml:imgs@latest", "job.yml: inputs.x", tmp_path)
    assert found.name == "images" and (found / "a.txt").read_text() == "a"
    assert assets.local_path("azureml:elsewhere:4", "k", tmp_path) == tmp_path
    with pytest.raises(LocalRunError, match="holds versions 1"):
        assets.local_path("azureml:imgs:9", "k", tmp_path)
    with pytest.raises(LocalRunError, match="neither the local workspace nor"):
        assets.local_path("azureml:nobody@latest", "job.yml: inputs.x", tmp_path)


def test_a_job_output_resolves_by_the_jobs_name(workspace, tmp_path):
    out = tmp_path / "run" / "outputs" / "o"
    (out / "sub").mkdir(parents=True)
    with pytest.raises(LocalRunError, match="no finished local job"):
        local_path("azureml://jobs/my-job/outputs/o", AssetKind.DATA, workspace)
    workspace_jobs.claim_name(workspace, "my-job", tmp_path / "run")
    with pytest.raises(LocalRunError, match="has not completed"):
        local_path("azureml://jobs/my-job/outputs/o", AssetKind.DATA, workspace)
    workspace_jobs.claim_name(workspace, "my-job", tmp_path / "run")  # the same run: resumed
    with pytest.raises(LocalRunError, match="is taken by the local run"):
        workspace_jobs.claim_name(workspace, "my-job", tmp_path / "other")
    workspace_jobs.record_job(workspace, ["my-job", "run"], tmp_path / "run", {"o": str(out)})
    assert local_path("azureml://jobs/my-job/outputs/o", AssetKind.DATA, workspace) == out
    assert local_path("azureml://jobs/run/outputs/o/paths/sub", AssetKind.DATA,
                      workspace) == out / "sub"
    with pytest.raises(LocalRunError, match="has no output 'x'"):
        local_path("azureml://jobs/my-job/outputs/x", AssetKind.DATA, workspace)
    with pytest.raises(LocalRunError, match="no finished local job of that name"):
        local_path("azureml://jobs/nobody/outputs/o", AssetKind.DATA, workspace)


def test_a_jobs_default_artifacts_output_is_its_mlflow_runs_artifacts(workspace, tmp_path):
    """`azureml://jobs/<name>/outputs/artifacts/paths/outputs/model.pkl` (az ml model create
    --path on a file the job wrote) is the job's run artifacts; an output the job
    declares under that name wins; a job recorded without them says why."""
    artifacts = tmp_path / "mlruns" / "1" / "abc" / "artifacts"
    (artifacts / "outputs").mkdir(parents=True)
    (artifacts / "outputs" / "model.pkl").write_bytes(b"m")
    workspace_jobs.record_job(workspace, ["trained"], tmp_path / "run", {}, artifacts=artifacts)
    uri = "azureml://jobs/trained/outputs/artifacts"
    assert local_path(f"{uri}/paths/outputs/model.pkl", AssetKind.MODEL, workspace) == \
        artifacts / "outputs" / "model.pkl"
    assert local_path(uri, AssetKind.DATA, workspace) == artifacts
    declared = tmp_path / "declared"
    declared.mkdir()
    workspace_jobs.record_job(workspace, ["own"], tmp_path / "r2", {"artifacts": str(declared)},
                              artifacts=artifacts)
    assert local_path("azureml://jobs/own/outputs/artifacts", AssetKind.DATA,
                      workspace) == declared
    workspace_jobs.record_job(workspace, ["older"], tmp_path / "r3", {})
    with pytest.raises(LocalRunError, match="default artifacts were not recorded"):
        local_path("azureml://jobs/older/outputs/artifacts", AssetKind.DATA, workspace)


def test_named_outputs_register_as_their_kind(workspace, tmp_path):
    out = folder_with(tmp_path / "model", "m")
    declared = {"model": {"type": "custom_model", "name": "clf", "version": 5},
                "data": {"type": "uri_folder", "name": "d"}, "plain": {"type": "uri_folder"}}
    made = workspace_jobs.register_outputs(workspace, declared, {"model": str(out),
                                                                 "data": str(out)}, "job x")
    assert [(r.kind, r.name, r.version) for r in made] == [
        (AssetKind.MODEL, "clf", "5"), (AssetKind.DATA, "d", "1")]


def test_a_registered_model_is_served_under_its_version(workspace, tmp_path):
    workspace.create(model("clf", folder_with(tmp_path / "a" / "model", "one")))
    workspace.create(model("clf", folder_with(tmp_path / "b" / "model", "two")))
    latest = model_source("azureml:clf@latest", tmp_path, "d.yml")
    first = model_source({"path": "azureml:clf:1"}, tmp_path, "d.yml")
    assert (latest.version, first.version) == ("2", "1")
    assert (first.path / "model.pt").read_text() == "one"
    layout = lay_out(first, tmp_path / "app")
    assert layout.root == tmp_path / "app" / "azureml-models" / "clf" / "1"
    assert (layout.root / "model" / "model.pt").read_text() == "one"


def test_records_round_trip(workspace, tmp_path):
    made = workspace.create(Draft(kind=AssetKind.DATA, name="d",
                                  source=folder_with(tmp_path / "x", "1"), tags={"a": "b"},
                                  description="words"))
    again = AssetVersion.read(made.folder)
    assert (again.tags, again.description, again.digest) == ({"a": "b"}, "words", made.digest)
    assert json.loads((made.folder / RECORD).read_text())["kind"] == "data"


def test_a_create_killed_half_way_leaves_no_version_and_is_swept(workspace, tmp_path):
    stale = workspace.root / "models" / "clf" / ".new-killed"
    (stale / "content").mkdir(parents=True)
    assert workspace.versions(AssetKind.MODEL, "clf") == []  # never taken for a version
    source = folder_with(tmp_path / "a", "one")
    (source / "linked.txt").symlink_to(tmp_path / "outside.txt")
    (tmp_path / "outside.txt").write_text("kept as a copy")
    made = workspace.create(model("clf", source))
    assert not stale.exists() and (made.path / "linked.txt").read_text() == "kept as a copy"
    assert not (made.path / "linked.txt").is_symlink()
    assert workspace.create(model("clf", source, version="1")).digest == made.digest


def test_a_model_is_created_from_a_jobs_output_as_az_ml_model_create_path_takes_it(
        workspace, tmp_path):
    from mlops.api import registry as actions

    out = folder_with(tmp_path / "run" / "outputs" / "model", "trained")
    workspace_jobs.record_job(workspace, ["train-7"], tmp_path / "run", {"model": str(out)})
    draft = Draft(kind=AssetKind.MODEL, name="clf", source=None)
    made = actions.create_from(draft, path="azureml://jobs/train-7/outputs/model/")
    assert (made.version, made.type) == ("1", "custom_model")
    assert (workspace.find(AssetKind.MODEL, "clf").path / "model.pt").read_text() == "trained"


def test_a_component_is_registered_with_its_inline_environments_files(tmp_path):
    """`az ml component create` registers the content of an inline environment, so a conda file
    outside the component's folder (`conda_file: ../conda.yml`) still builds it later."""
    import yaml

    from mlops.api.drafts import draft_of

    (tmp_path / "conda.yml").write_text("dependencies:\n  - python=3.10\n  - pip\n")
    folder = tmp_path / "components"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "train.py").write_text("print(1)\n")
    (folder / "train.yml").write_text(yaml.safe_dump({
        "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
        "type": "command", "name": "train", "code": "src", "command": "python train.py",
        "environment": {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04",
                        "conda_file": "../conda.yml"}}))
    with draft_of(folder / "train.yml", kind=None, assets=AssetMap(tmp_path / "map.yml")) as d:
        spec = yaml.safe_load((d.source / "spec.yml").read_text())
        assert spec["environment"]["conda_file"] == "environment-conda.yml"
        assert "python=3.10" in (d.source / "environment-conda.yml").read_text()
        assert spec["code"] == "code" and (d.source / "code" / "train.py").is_file()


@pytest.mark.parametrize("environment, refused", [
    ("azureml:other-env@latest", "az ml component create looks it up and refuses the component: "
                                 "'Asset other-env does not exist in workspace"),
    ("azureml:other-env:3", None), ("azureml:their-env:2", None),
    ("azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu:1", None)])
def test_a_components_workspace_environment_is_resolved_after_its_code_as_az_ml_does(
        repo, environment, refused):
    """`az ml component create` resolves the component's code, then its environment
    (azure-ai-ml's _resolve_dependencies_for_component): a label the workspace lacks is looked up
    and refused there, not registered for a run to find nothing; a version is passed on as an
    asset id, and a known name (an environment spec of that name in the repository, a curated
    one) registers."""
    import yaml

    from mlops.api.drafts import draft_of

    (repo / "env.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json\n"
        "name: their-env\nversion: 2\nimage: mcr.microsoft.com/azureml/"
        "openmpi4.1.0-ubuntu22.04:latest\n")
    (repo / "src").mkdir()
    (repo / "src" / "train.py").write_text("print(1)\n")
    component = {"$schema": "https://azuremlschemas.azureedge.net/latest/"
                            "commandComponent.schema.json", "type": "command", "name": "train",
                 "code": "src", "command": "python train.py", "environment": environment}
    (repo / "train.yml").write_text(yaml.safe_dump(component))
    if refused is None:
        with draft_of(repo / "train.yml", kind=None, assets=AssetMap(repo / "map.yml")) as d:
            assert yaml.safe_load((d.source / "spec.yml").read_text())["environment"] == \
                environment
        return
    assets = AssetMap(repo / "map.yml")
    with pytest.raises(LocalRunError, match=re.escape(refused)), \
            draft_of(repo / "train.yml", kind=None, assets=assets):
        pass
    (repo / "train.yml").write_text(yaml.safe_dump({**component, "code": "gone"}))
    with pytest.raises(LocalRunError, match="code 'gone' does not exist"), \
            draft_of(repo / "train.yml", kind=None, assets=assets):  # the code first
        pass


@pytest.mark.parametrize("kind", ["data", "model"])
def test_the_verbs_kind_loads_an_asset_spec_whatever_its_schema_url_says(tmp_path, kind):
    """`az ml data create -f` loads the file as data (azure-ai-ml's load_data reads no
    $schema): a published spec whose $schema names no kind (asset.schema.json) registers."""
    from mlops.api.drafts import draft_of

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.csv").write_text("x\n1\n")
    (tmp_path / "asset.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/asset.schema.json\n"
        "name: diabetes\nversion: 1\npath: files\n")
    with draft_of(tmp_path / "asset.yml", kind=kind, assets=AssetMap(tmp_path / "map.yml")) as d:
        assert d.kind == AssetKind.parse(kind) and d.name == "diabetes"
    no_verb = draft_of(tmp_path / "asset.yml", kind=None, assets=AssetMap(tmp_path / "map.yml"))
    with pytest.raises(LocalRunError, match="names no asset kind"), no_verb:
        pass


def test_an_mlflow_registration_is_fetched_from_the_state_store_from_any_folder(
        tmp_path, monkeypatch, empty_mlflow_store):
    """A job's `register_model` lands in the state folder's store; deploying it from the
    repository's folder (no MLFLOW_TRACKING_URI set, as azml runs there) read the registry
    through MLflow's default store in that folder instead: 'Registered Model ... not found'."""
    from mlflow.tracking import MlflowClient

    from mlops.project import tracking_uri
    from mlops.workspace import mlflow_models

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("AZML_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    assert copied_store(empty_mlflow_store, tmp_path / "state") == tracking_uri()
    model = tmp_path / "state" / "artifacts" / "taxi-model"
    model.mkdir(parents=True)
    (model / "MLmodel").write_text("flavors: {}\n")
    client = MlflowClient(tracking_uri(), registry_uri=tracking_uri())  # as a job registers
    client.create_registered_model("taxi-model")
    version = client.create_model_version("taxi-model", str(model))
    reader = MlflowClient(tracking_uri(), registry_uri=tracking_uri())  # as _client() makes it
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the repository's folder, as azml runs there
    fetched = mlflow_models._fetched(reader, "taxi-model", version, tmp_path / "staging")
    assert fetched is not None and (fetched / "MLmodel").is_file()
    assert not (tmp_path / "elsewhere" / "mlflow.db").exists()


def test_a_damaged_record_leaves_its_name_out_of_a_list_of_every_name(workspace, tmp_path,
                                                                     capsys):
    from mlops.api import registry

    for name in ("good", "bad"):
        workspace.create(model(name, folder_with(tmp_path / name, name)))
    (workspace.root / "models" / "bad" / "1" / RECORD).write_text('{"na')
    assert [v.name for v in registry.listed(AssetKind.MODEL, None, False)] == ["good"]
    assert "model bad is left out of the list" in capsys.readouterr().err
    with pytest.raises(DamagedRecord):  # asked for by name: the error it is
        registry.listed(AssetKind.MODEL, "bad", False)
