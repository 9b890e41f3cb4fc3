"""`azml model|data|environment update` (mlops/api/asset_updates.py): az's generic update over
the version as shown; description and tags (a model's stage) change and stay, anything else is
refused before anything is written, as the commands' help says the service allows."""

from __future__ import annotations

import pytest

from mlops.api.generic_update import Edit
from mlops.api.session import AssetRequest, AssetUpdate, Session
from mlops.errors import LocalRunError


def sets(*values: str) -> tuple[Edit, ...]:
    return (Edit(action="set", values=values),)


@pytest.fixture
def model(repo):
    (repo / "m").mkdir()
    (repo / "m" / "w.bin").write_bytes(b"weights")
    Session().create_asset(AssetRequest(kind="model", name="clf", path="m"))
    return repo


def test_description_tags_and_stage_change_and_stay(model):
    session = Session()
    shown = session.update_asset(AssetUpdate(kind="model", name="clf", version="1",
                                             edits=sets("description=x", "tags.n=1"),
                                             stage="Production", description="best"))
    assert (shown["description"], shown["tags"], shown["stage"]) == ("best", {"n": "1"},
                                                                     "Production")
    again = session.show_asset("model", "clf", version="1")
    assert (again["description"], again["tags"], again["stage"]) == ("best", {"n": "1"},
                                                                     "Production")
    removed = session.update_asset(AssetUpdate(
        kind="model", name="clf", label="latest",
        edits=(Edit(action="remove", values=("tags.n",)),)))
    assert removed["tags"] == {} and removed["description"] == "best"


def test_any_other_change_is_refused_and_nothing_is_written(model):
    session = Session()
    before = session.show_asset("model", "clf", version="1")
    with pytest.raises(LocalRunError, match=r"only description, stage, tags can be updated.*"
                                            r"this changes path, type"):
        session.update_asset(AssetUpdate(kind="model", name="clf", version="1",
                                         edits=sets("description=x", "path=/tmp",
                                                    "type=mlflow_model")))
    assert session.show_asset("model", "clf", version="1") == before


def test_a_data_asset_has_no_stage_and_an_environment_keeps_its_definition(repo):
    (repo / "d.csv").write_text("a\n1\n")
    (repo / "env.yml").write_text("name: env\nversion: '2'\nimage: python:3.11\n"
                                  "description: base\ntags: {team: a}\n")
    session = Session()
    session.create_asset(AssetRequest(kind="data", name="rows", path="d.csv", type="uri_file"))
    with pytest.raises(LocalRunError, match="only description, tags can be updated"):
        session.update_asset(AssetUpdate(kind="data", name="rows", version="1",
                                         edits=sets("stage=Production")))
    session.create_asset(AssetRequest(kind="environment", spec=repo / "env.yml"))
    shown = session.update_asset(AssetUpdate(kind="environment", name="env", version="2",
                                             edits=sets("tags.team=b")))
    assert (shown["tags"], shown["description"], shown["image"]) == ({"team": "b"}, "base",
                                                                      "python:3.11")
    with pytest.raises(LocalRunError, match="this changes image"):
        session.update_asset(AssetUpdate(kind="environment", name="env", version="2",
                                         edits=sets("image=python:3.12")))


def test_a_missing_key_is_azure_clis_error(model):
    with pytest.raises(LocalRunError, match="flavors"):
        Session().update_asset(AssetUpdate(kind="model", name="clf", version="1",
                                           edits=sets("flavors.python_function.x=1")))
