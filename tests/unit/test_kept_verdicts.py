"""What a local run keeps between runs instead of working it out again (issue 64): the tool's
cache entries (mlops/project.py remember), a spec's verdict (mlops/checks/verdicts.py), the
listing of a code folder (mlops/workspace/uploads.py) and the environment map's parse
(mlops/environments/envspec.py). Each is used only while what it was made from still holds."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from mlops.checks import verdicts
from mlops.checks.validation import check
from mlops.environments import envspec
from mlops.project import remember, remembered
from mlops.specs import load_spec
from mlops.workspace import uploads


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLOPS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(cache: Path, kind: str) -> list[Path]:
    return sorted((cache / kind).glob("*.json"))


# ---- the cache's entries -----------------------------------------------------------------

def test_an_entry_is_found_by_its_key_alone(own_cache):
    remember("kind", ["a", 1], {"answer": [1, 2]})
    assert remembered("kind", ["a", 1]) == {"answer": [1, 2]}
    assert remembered("kind", ["a", 2]) is None
    assert remembered("other", ["a", 1]) is None


def test_a_damaged_entry_is_not_used(own_cache):
    remember("kind", "key", {"answer": 1})
    (entry,) = entries(own_cache, "kind")
    for damage in (b"", b"{not json", entry.read_bytes().replace(b'"answer": 1', b'"answer": 2'),
                   json.dumps({"key": "x", "sum": "y", "value": 1}).encode()):
        entry.write_bytes(damage)
        assert remembered("kind", "key") is None
    remember("kind", "key", {"answer": 1})  # worked out again, kept whole again
    assert remembered("kind", "key") == {"answer": 1}


def test_two_writers_at_once_leave_one_whole_entry(own_cache):
    gate = threading.Barrier(8)

    def write(n: int) -> None:
        gate.wait()
        for _ in range(20):
            remember("kind", "key", {"writer": n, "pad": "x" * 50_000})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert remembered("kind", "key")["writer"] in range(8)
    assert [p.name for p in (own_cache / "kind").iterdir()] == [entries(own_cache, "kind")[0].name]


def test_a_cache_that_cannot_be_written_keeps_nothing_and_fails_nothing(own_cache):
    own_cache.write_text("a file where the cache folder would be")
    remember("kind", "key", 1)
    assert remembered("kind", "key") is None


# ---- a spec's verdict ----------------------------------------------------------------------

def reading_check(calls: list[str]):
    """A stand-in for the checks: it reads the conda file the spec names and looks at its code
    folder, as azure-ai-ml and the lint do, and refuses a spec whose conda file says `bad`."""

    def check_spec(spec):
        calls.append(spec.path.name)
        conda = (spec.path.parent / spec.data["environment"]["conda_file"]).read_text()
        found = [] if (spec.path.parent / spec.data["code"]).is_dir() else \
            [spec.finding("code", "no code folder", "make one")]
        if "bad" in conda:
            found.append(spec.finding("environment", "a bad conda file", "fix it"))
        return found + [spec.warning("compute", "a warning", "it is only a warning")]

    return check_spec


def write_job(folder: Path, *, command: str = "python hello.py", conda: str = "name: x\n") -> Path:
    (folder / "src").mkdir(exist_ok=True)
    (folder / "src" / "hello.py").write_text("print('hello')\n")
    (folder / "conda.yml").write_text(conda)
    spec = folder / "job.yml"
    spec.write_text("$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
                    f"type: command\ncode: src\ncommand: {command}\n"
                    "environment:\n  image: mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04\n"
                    "  conda_file: conda.yml\ncompute: azureml:cpu-cluster\n")
    return spec


def test_a_verdict_is_kept_with_its_warnings_and_used_while_nothing_changed(tmp_path):
    calls: list[str] = []
    spec = write_job(tmp_path)
    first = verdicts.checked(load_spec(spec), reading_check(calls))
    again = verdicts.checked(load_spec(spec), reading_check(calls))
    assert calls == ["job.yml"]  # checked once
    assert [str(f) for f in again] == [str(f) for f in first] and again[0].severity == "warning"


@pytest.mark.parametrize("change", ["spec byte", "set", "conda file", "code folder gone"])
def test_any_change_to_what_the_checks_saw_checks_again(tmp_path, change):
    calls: list[str] = []
    spec = write_job(tmp_path)
    verdicts.checked(load_spec(spec), reading_check(calls))
    loaded = load_spec(spec)
    if change == "spec byte":
        spec.write_text(spec.read_text().replace("hello.py", "hello.pz"))
        loaded = load_spec(spec)
    elif change == "set":
        loaded.data["command"] = "python hello.py --x 1"
    elif change == "conda file":
        (tmp_path / "conda.yml").write_text("name: y\n")
    else:
        (tmp_path / "src" / "hello.py").unlink()
        (tmp_path / "src").rmdir()
    found = verdicts.checked(loaded, reading_check(calls))
    assert calls == ["job.yml", "job.yml"]
    assert any(f.is_error for f in found) == (change == "code folder gone")


def test_a_refused_spec_is_never_kept_and_refused_again(tmp_path, own_cache):
    calls: list[str] = []
    spec = write_job(tmp_path, conda="name: bad\n")
    for _ in range(2):
        assert any(f.is_error for f in verdicts.checked(load_spec(spec), reading_check(calls)))
    assert calls == ["job.yml", "job.yml"] and not entries(own_cache, "verdicts")


def test_a_damaged_or_foreign_verdict_checks_again(tmp_path, own_cache):
    calls: list[str] = []
    spec = write_job(tmp_path)
    verdicts.checked(load_spec(spec), reading_check(calls))
    (entry,) = entries(own_cache, "verdicts")
    kept = json.loads(entry.read_text())
    kept["value"]["seen"] = "not a mapping"  # whole JSON, a valid checksum, the wrong shape
    kept["sum"] = hashlib.sha256(json.dumps(kept["value"], sort_keys=True).encode()).hexdigest()
    entry.write_text(json.dumps(kept))
    verdicts.checked(load_spec(spec), reading_check(calls))
    entry.write_text("{damaged")
    verdicts.checked(load_spec(spec), reading_check(calls))
    assert calls == ["job.yml"] * 3


def test_azure_ai_mls_refusal_holds_on_a_spec_like_one_it_passed(tmp_path, own_cache):
    """The real checks (azure-ai-ml's loader and validation): a passed spec's verdict is kept;
    one byte more (an unknown field) is refused all the same, and so is the passed spec once
    the conda file it names is no longer YAML."""
    spec = write_job(tmp_path, conda="name: x\ndependencies:\n  - python=3.11\n")
    assert not [f for f in check(load_spec(spec), for_run=True) if f.is_error]
    assert len(entries(own_cache, "verdicts")) == 1
    assert not [f for f in check(load_spec(spec), for_run=True) if f.is_error]  # kept
    like = tmp_path / "like.yml"
    like.write_text(spec.read_text() + "instance_cout: 2\n")
    refused = [str(f) for f in check(load_spec(like), for_run=True) if f.is_error]
    assert refused and "instance_cout" in " ".join(refused)
    (tmp_path / "conda.yml").write_text("name: [unclosed\n")
    assert [f for f in check(load_spec(spec), for_run=True) if f.is_error]


# ---- a code folder's listing ----------------------------------------------------------------

@pytest.fixture
def listings(monkeypatch) -> list[str]:
    """How often azure-ai-ml's own listing ran."""
    calls: list[str] = []
    real = uploads.sdk_listing

    def counted(source, what, ignore):
        calls.append(source.name)
        return real(source, what, ignore)

    monkeypatch.setattr(uploads, "sdk_listing", counted)
    return calls


def listed(folder: Path) -> list[str]:
    return sorted(relative for _, relative in uploads.upload_files(folder, "code"))


@pytest.mark.parametrize("change", ["a new file", "the ignore file", "a link's target"])
def test_a_listing_is_kept_until_the_folder_or_its_ignore_file_changes(tmp_path, listings,
                                                                       change):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "a.py").write_text("a")
    (code / "pkg" / "b.py").write_text("b")
    (code / "skip.log").write_text("log")
    (tmp_path / "one.py").write_text("1")
    (tmp_path / "two.py").write_text("2")
    (code / "linked.py").symlink_to(tmp_path / "one.py")
    (code / ".amlignore").write_text("*.log\n")
    first = listed(code)
    assert listed(code) == first and listings == ["code"]
    assert "skip.log" not in first and "linked.py" in first
    if change == "a new file":
        (code / "pkg" / "c.py").write_text("c")
    elif change == "the ignore file":
        (code / ".amlignore").write_text("*.log\npkg/\n")
    else:
        (code / "linked.py").unlink()
        (code / "linked.py").symlink_to(tmp_path / "two.py")
    after = uploads.upload_files(code, "code")
    assert listings == ["code", "code"]
    relative = sorted(r for _, r in after)
    assert ("pkg/c.py" in relative) == (change == "a new file")
    assert ("pkg/b.py" in relative) == (change != "the ignore file")
    assert dict((r, Path(f).name) for f, r in after)["linked.py"] == \
        ("two.py" if change == "a link's target" else "one.py")


def test_a_kept_listing_still_refuses_what_an_upload_cannot_take(tmp_path, listings):
    code = tmp_path / "code"
    code.mkdir()
    (code / "a.py").write_text("a")
    listed(code)
    os.mkfifo(code / "pipe")
    with pytest.raises(Exception, match="named pipe"):
        uploads.upload_files(code, "code")


# ---- the environment map -------------------------------------------------------------------

def test_the_environment_map_is_parsed_once_per_content(tmp_path, monkeypatch):
    parsed: list[int] = []
    real = envspec.read_yaml
    monkeypatch.setattr(envspec, "read_yaml", lambda text: parsed.append(1) or real(text))
    path = tmp_path / "envs.yml"
    path.write_text("azureml:a: [numpy==1.26.4]\n")
    assert envspec._load_map(path) == {"azureml:a": ["numpy==1.26.4"]}
    assert envspec._load_map(path) == {"azureml:a": ["numpy==1.26.4"]}
    path.write_text("azureml:a: [numpy==2.0.0]\n")
    assert envspec._load_map(path) == {"azureml:a": ["numpy==2.0.0"]}
    assert parsed == [1, 1]


# ---- MLflow's registry, taken into the workspace -------------------------------------------

def test_mlflows_registry_is_asked_again_only_once_its_store_or_the_workspace_changed(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from mlops.workspace import mlflow_models
    from mlops.workspace.records import AssetKind
    from mlops.workspace.store import Draft, Workspace

    store = tmp_path / "mlflow.db"
    store.write_bytes(b"SQLite format 3\0" + bytes(84) + b"pages")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    asked: list[str] = []
    client = SimpleNamespace(search_model_versions=lambda query: asked.append(query) or [])
    monkeypatch.setattr(mlflow_models, "_client", lambda: client)
    workspace = Workspace(tmp_path / "workspace")
    model = tmp_path / "model.pt"  # a file: its upload is listed without azure-ai-ml
    model.write_text("weights")
    workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=model))
    for _ in range(2):
        mlflow_models.take_in(workspace, "clf")
    assert len(asked) == 1
    header = bytearray(store.read_bytes())
    header[24:28] = (1).to_bytes(4, "big")  # SQLite's file change counter: a write committed
    store.write_bytes(bytes(header))
    mlflow_models.take_in(workspace, "clf")
    assert len(asked) == 2
    workspace.create(Draft(kind=AssetKind.MODEL, name="clf", source=model, version="7"))
    mlflow_models.take_in(workspace, "clf")
    mlflow_models.take_in(workspace, "clf")
    assert len(asked) == 3
