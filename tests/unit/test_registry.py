"""A registry folder offline (mlops/workspace/registry.py, runtime/uris.py, runtime/tasks.py):
assets found by their own asset.yaml and spec, the index built once and kept by the files'
state, components with their code and environment, models whose files are in storage."""

from pathlib import Path

import pytest

from mlops.errors import LocalRunError
from mlops.runtime.tasks import load_component
from mlops.runtime.uris import AssetMap
from mlops.workspace import registry
from mlops.workspace.records import AssetKind

REG = "azureml://registries/azureml"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def assets_checkout(root: Path) -> Path:
    """A small folder in azureml-assets' layout."""
    comp = root / "assets/rai/components/create"
    write(comp / "asset.yaml", "type: component\nspec: spec.yaml\n")
    write(comp / "spec.yaml", "$schema: x\ntype: command\nname: rai_create\nversion: 0.22.0\n"
          "code: ../src/\ncommand: python create.py\n"
          f"environment: {REG}/environments/rai-env/versions/28\n")
    write(root / "assets/rai/components/src/create.py", "print('hi')\n")
    env = root / "assets/rai/environments/rai-env"
    write(env / "asset.yaml", "name: rai-env\nversion: auto\ntype: environment\nspec: spec.yaml\n"
          "extra_config: environment.yaml\n")
    write(env / "spec.yaml", 'name: "{{asset.name}}"\nversion: "{{asset.version}}"\n'
          'build:\n  path: "{{image.context.path}}"\n')
    write(env / "environment.yaml", "image:\n  context:\n    dir: context\n")
    own = root / "assets/own/environments/small"
    write(own / "asset.yaml", "name: small-env\nversion: 3\ntype: environment\nspec: spec.yaml\n")
    write(own / "spec.yaml", 'name: "{{asset.name}}"\nversion: "{{asset.version}}"\n'
          "image: python\nconda_file: conda.yml\n")
    model = root / "assets/models/system/tiny-bert"
    write(model / "asset.yaml", "type: model\nspec: spec.yaml\nextra_config: model.yaml\n")
    write(model / "spec.yaml", "name: tiny-bert\nversion: 18\npath: ./\n")
    write(model / "model.yaml", "path:\n  type: azureblob\n  storage_name: store\n"
          "  container_name: models\n  container_path: bert/18\n")
    data = root / "assets/data/labels"
    write(data / "asset.yaml", "name: labels\nversion: 3\ntype: data\nspec: spec.yaml\n")
    write(data / "spec.yaml", 'name: "{{asset.name}}"\nversion: "{{asset.version}}"\n'
          "type: uri_folder\npath: sample/\n")
    write(data / "sample/a.tsv", "a\n")
    write(root / "assets/prompts/p/asset.yaml", "type: prompt\nspec: spec.yaml\n")
    write(root / "assets/broken/asset.yaml", "type: component\nspec: [unclosed\n")
    return root


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("MLOPS_CACHE_DIR", str(tmp_path / "cache"))
    registry.forget()
    yield
    registry.forget()


def asset_map(tmp_path: Path, folder: Path, extra: str = "") -> AssetMap:
    return AssetMap(write(tmp_path / "map.yml", f"{REG}: {folder}\n{extra}"))


def test_uris_parse_as_azure_writes_them():
    ref = registry.parse_ref(f"{REG}/components/rai_create/versions/0.22.0")
    assert (ref.registry, ref.kind, ref.name, ref.version) == \
        ("azureml", AssetKind.COMPONENT, "rai_create", "0.22.0")
    for tail in ("/labels/latest", "@latest", ""):
        assert registry.parse_ref(f"{REG}/models/m{tail}").label == "latest"
    assert registry.parse_ref("azureml:rai_create:1") is None
    assert registry.parse_ref("azureml://datastores/x/paths/y") is None


def test_index_reads_each_asset_by_its_own_files(tmp_path):
    held = registry.index(assets_checkout(tmp_path / "repo"))
    (comp,) = held.versions(AssetKind.COMPONENT, "rai_create")
    assert comp.version == "0.22.0" and comp.spec.name == "spec.yaml"
    (env,) = held.versions(AssetKind.ENVIRONMENT, "rai-env")
    assert env.version is None  # version: auto, numbered at release
    assert held.versions(AssetKind.ENVIRONMENT, "small-env")[0].version == "3"
    assert held.versions(AssetKind.DATA, "labels")[0].version == "3"
    assert len(held) == 5  # the prompt is no asset kind a URI names; the broken one unread
    assert [p.file.parent.name for p in held.problems] == ["broken"]


def test_a_version_the_folder_lacks_lists_those_it_has(tmp_path):
    held = registry.index(assets_checkout(tmp_path / "repo"))
    ref = registry.parse_ref(f"{REG}/components/rai_create/versions/0.21.0")
    with pytest.raises(LocalRunError, match=r"0\.21\.0 is not in registry azureml.*holds 0\.22\.0"):
        held.get(ref)
    assert held.get(registry.parse_ref(f"{REG}/components/rai_create@latest")).version == "0.22.0"
    assert held.get(registry.parse_ref(f"{REG}/components/nothing/versions/1")) is None


def test_latest_is_the_highest_version_as_azures_publishing_orders_them(tmp_path):
    root = tmp_path / "export"
    for version in ("0.9.0", "0.10.0", "0.2"):
        folder = root / version
        write(folder / "asset.yaml", "type: component\nspec: spec.yaml\n")
        write(folder / "spec.yaml", f"name: c\nversion: {version}\ntype: command\n")
    held = registry.index(root)
    assert [a.version for a in held.versions(AssetKind.COMPONENT, "c")] == \
        ["0.2", "0.9.0", "0.10.0"]
    assert held.get(registry.parse_ref(f"{REG}/components/c/labels/latest")).version == "0.10.0"


def test_the_folder_is_read_once_per_run_and_again_only_where_it_changed(tmp_path, monkeypatch):
    root = assets_checkout(tmp_path / "repo")
    read = []
    real = registry.read_asset
    monkeypatch.setattr(registry, "read_asset", lambda f: read.append(f) or real(f))
    first = registry.index(root)
    assert len(read) == 7 and registry.index(root) is first  # one walk per process
    registry.forget()
    read.clear()
    registry.index(root)
    assert read == []  # the next run: every asset from the cache
    registry.forget()
    spec = root / "assets/rai/components/create/spec.yaml"
    spec.write_text(spec.read_text().replace("0.22.0", "0.23.0") + "# edited\n")
    held = registry.index(root)
    assert [f.parent.name for f in read] == ["create"]
    assert held.versions(AssetKind.COMPONENT, "rai_create")[0].version == "0.23.0"


def test_a_damaged_cache_is_rebuilt(tmp_path):
    root = assets_checkout(tmp_path / "repo")
    registry.index(root)
    registry.forget()
    for cached in (tmp_path / "cache" / "registry-index").glob("*.json"):
        cached.write_text("{not json")
    assert len(registry.index(root)) == 5


def test_a_registry_component_loads_with_its_code_and_registry(tmp_path):
    assets = asset_map(tmp_path, assets_checkout(tmp_path / "repo"))
    component = load_component(f"{REG}/components/rai_create/versions/0.22.0", tmp_path, assets,
                               "job.yml: jobs.a.component")
    assert component.registry == "azureml"
    assert (component.base / component.data["code"] / "create.py").is_file()
    # an environment the folder holds only as `version: auto`: the curated catalogue's
    assert component.data["environment"] == f"{REG}/environments/rai-env/versions/28"


def test_a_registry_environment_of_a_held_version_is_its_definition(tmp_path):
    root = assets_checkout(tmp_path / "repo")
    write(root / "assets/own/c/asset.yaml", "type: component\nspec: spec.yaml\n")
    write(root / "assets/own/c/spec.yaml", "name: own_c\nversion: 1\ntype: command\n"
          "command: echo\nenvironment: azureml:small-env:3\n")
    component = load_component(f"{REG}/components/own_c/versions/1", tmp_path,
                               asset_map(tmp_path, root), "job.yml")
    env = component.data["environment"]
    assert env["image"] == "python"
    assert Path(env["conda_file"]) == root / "assets/own/environments/small/conda.yml"


def test_a_registry_pipeline_components_short_names_are_its_registrys(tmp_path):
    root = assets_checkout(tmp_path / "repo")
    assets = asset_map(tmp_path, root)
    inner = load_component("azureml:rai_create:0.22.0", tmp_path, assets, "x", registry="azureml")
    assert inner.registry == "azureml" and inner.data["name"] == "rai_create"
    with pytest.raises(LocalRunError, match="rai_create"):  # outside a registry: the workspace's
        load_component("azureml:rai_create:0.22.0", tmp_path, assets, "x")


def test_a_name_the_mapped_registry_lacks_is_an_error_naming_the_folder(tmp_path):
    root = assets_checkout(tmp_path / "repo")
    with pytest.raises(LocalRunError, match=r"holds no component named nope.*could not be read"):
        load_component(f"{REG}/components/nope/versions/1", tmp_path, asset_map(tmp_path, root),
                       "x")


def test_a_model_in_storage_needs_its_url_mapped(tmp_path):
    root = assets_checkout(tmp_path / "repo")
    url = "https://store.blob.core.windows.net/models/bert/18"
    with pytest.raises(LocalRunError, match=f"in storage \\({url}\\).*'{url}: <local folder>'"):
        asset_map(tmp_path, root).local_path(f"{REG}/models/tiny-bert/versions/18", "x",
                                             tmp_path, must_exist=False, kind="model")
    local = tmp_path / "bert"
    local.mkdir()
    mapped = asset_map(tmp_path, root, f"{url}: {local}\n")
    assert mapped.local_path(f"{REG}/models/tiny-bert/labels/latest", "x", tmp_path,
                             kind="model") == local


def test_a_registry_data_asset_is_its_specs_path(tmp_path):
    root = assets_checkout(tmp_path / "repo")
    path = asset_map(tmp_path, root).local_path(f"{REG}/data/labels/versions/3", "x", tmp_path)
    assert path == root / "assets/data/labels/sample"


def test_an_unmapped_registry_keeps_the_maps_own_lines(tmp_path):
    assets = AssetMap(write(tmp_path / "map.yml", f"{REG}/components/x/versions/1: c.yml\n"))
    assert assets.registry_asset(f"{REG}/components/x/versions/1") is None


def test_a_registry_may_map_to_several_folders_the_first_wins(tmp_path):
    new = assets_checkout(tmp_path / "new")
    old = tmp_path / "old" / "create"
    write(old / "asset.yaml", "type: component\nspec: spec.yaml\n")
    write(old / "spec.yaml", "name: rai_create\nversion: 0.21.0\ntype: command\ncommand: x\n")
    (tmp_path / ".git").mkdir()  # the old folder inside a git checkout: the error says how
    assets = AssetMap(write(tmp_path / "map.yml", f"{REG}:\n  - {new}\n  - {tmp_path / 'old'}\n"))
    assert assets.registry_asset(f"{REG}/components/rai_create/versions/0.21.0").spec == \
        old / "spec.yaml"
    assert assets.registry_asset(f"{REG}/components/rai_create@latest").version == "0.22.0"
    with pytest.raises(LocalRunError, match=r"holds 0\.21\.0, 0\.22\.0\).*git -C .* log "
                                            r"--reverse .*-S 'version: 0\.20\.0'.*"
                                            r"the first published it"):
        assets.registry_asset(f"{REG}/components/rai_create/versions/0.20.0")


def test_what_create_registers_with_a_registry_name_resolves_as_that_registrys(tmp_path):
    from mlops.api import registry as api

    write(tmp_path / "src/run.py", "print('hi')\n")
    spec = write(tmp_path / "comp.yml", "$schema: https://azuremlschemas.azureedge.net/latest/"
                 "commandComponent.schema.json\ntype: command\nname: shared_step\nversion: 2\n"
                 "code: src\ncommand: python run.py\nenvironment:\n  image: python\n")
    made = api.create(spec, kind="component", overrides=(), asset_file=None, registry="my-reg")
    assert made.version == "2" and "registries" in str(made.folder)
    with pytest.raises(LocalRunError, match="registry's name is 3 to 33"):
        api.create(spec, kind="component", overrides=(), asset_file=None, registry="../x")
    assets = AssetMap(tmp_path / "none.yml")
    component = load_component("azureml://registries/my-reg/components/shared_step/labels/latest",
                               tmp_path, assets, "x")
    assert component.registry == "my-reg"
    assert (component.base / component.data["code"] / "run.py").is_file()
    assert api.listed(AssetKind.COMPONENT, None, False, "my-reg")[0].name == "shared_step"
    assert api.listed(AssetKind.COMPONENT, None, False) == []  # not the workspace's


def test_a_pipeline_node_is_checked_against_the_registry_component_the_folder_holds(
        tmp_path, monkeypatch):
    from mlops.checks import lint_assets
    from mlops.specs import load_spec

    root = assets_checkout(tmp_path / "repo")
    write(root / "assets/rai/components/create/spec.yaml",
          "name: rai_create\nversion: 0.22.0\ntype: command\ncommand: x\n"
          "inputs:\n  title: {type: string}\n")
    monkeypatch.setattr(lint_assets, "AssetMap", lambda: asset_map(tmp_path, root))
    job = write(tmp_path / "job.yml", "type: pipeline\njobs:\n  a:\n    type: command\n"
                f"    component: {REG}/components/rai_create/versions/0.22.0\n"
                "    inputs:\n      titel: x\n  b:\n    type: command\n"
                f"    component: {REG}/components/rai_create/versions/0.1.0\n")
    found = {(f.key, f.severity, f.problem.split(":")[0]) for f in
             lint_assets.check_pipeline(load_spec(job))}
    assert ("jobs.a.inputs.titel", "warning", "component rai_create 0.22.0 has no input 'titel' "
            "(Azure ignores the binding)") in found
    assert any(k == "jobs.a.inputs" and s == "error" for k, s, _ in found)
    assert any(k == "jobs.b.component" and s == "warning" for k, s, _ in found)
