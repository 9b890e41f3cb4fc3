"""The warm tracking server's bookkeeping without a server (mlops/runtime/mlflow_serve.py,
mlflow_server.py): its record is trusted only whole, it never stops while a run holds it, it
stops once idle or once its record names another, and a live one is told by its lock."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict

import pytest

from mlops.runtime.mlflow_serve import Record, Watch
from mlops.runtime.mlflow_server import running, server_folder


def record(**changes) -> Record:
    fields = {"pid": os.getpid(), "port": 5000, "store": "sqlite:////x/mlflow.db",
              "artifacts": "/x/mlruns", "python": "/x/bin/python", "mlflow": "m", **changes}
    return Record(**fields)


def test_the_server_of_a_store_lives_beside_it():
    assert server_folder("sqlite:////a/b/mlflow.db").as_posix() == "/a/b/mlflow.db.server"
    assert server_folder("http://127.0.0.1:5000") is None  # a remote store: jobs get its URI


@pytest.mark.parametrize("text", ["", "{", "[]", '{"pid": 1}', json.dumps(
    {**asdict(record()), "port": "5000"}), json.dumps({**asdict(record()), "port": 0}),
    json.dumps({**asdict(record()), "extra": 1})])
def test_a_damaged_record_is_none(tmp_path, text):
    (tmp_path / "record.json").write_text(text)
    assert Record.read(tmp_path) is None


def test_a_record_is_written_whole_and_read_back(tmp_path):
    record().write(tmp_path)
    assert Record.read(tmp_path) == record()
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def held(path, how=fcntl.LOCK_SH) -> int:
    handle = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(handle, how)
    return handle


def test_the_server_waits_while_a_run_holds_its_lease_and_stops_once_idle(tmp_path):
    record().write(tmp_path)
    watch = Watch(tmp_path, idle=0.0)
    lease = os.open(tmp_path / "lease", os.O_RDWR | os.O_CREAT)
    run = held(tmp_path / "lease")
    assert not watch.should_stop(lease)
    os.close(run)
    assert watch.should_stop(lease)  # idle for 0 s, held by none
    with pytest.raises(BlockingIOError):  # and it keeps the lease while it leaves
        held(tmp_path / "lease", fcntl.LOCK_SH | fcntl.LOCK_NB)


def test_a_server_whose_record_names_another_stops_at_once(tmp_path):
    watch = Watch(tmp_path, idle=3600.0)
    lease = os.open(tmp_path / "lease", os.O_RDWR | os.O_CREAT)
    record().write(tmp_path)
    assert not watch.should_stop(lease)  # its own, not idle yet
    record(pid=os.getpid() + 1).write(tmp_path)
    assert watch.should_stop(lease)
    os.close(lease)
    lease = os.open(tmp_path / "lease", os.O_RDWR | os.O_CREAT)
    (tmp_path / "record.json").unlink()  # its folder deleted
    assert Watch(tmp_path, idle=3600.0).should_stop(lease)


def test_a_live_server_is_told_by_its_lock_not_its_pid(tmp_path):
    assert running(tmp_path) is None  # no server ever
    alive = held(tmp_path / "alive", fcntl.LOCK_EX)
    os.pwrite(alive, b"4242\n", 0)
    assert running(tmp_path) == 4242
    os.close(alive)  # what its death does (kill -9 included)
    assert running(tmp_path) is None


def test_the_stores_a_server_opens_are_its_own_not_those_its_process_opened_first(
        tmp_path, monkeypatch, empty_mlflow_store):
    """A server forked from a process that served MLflow's app in-process (the test suite)
    inherits MLflow's cached stores: open_stores opens the server's own store all the same."""
    import shutil

    from mlflow.server import handlers

    from mlops.runtime.mlflow_serve import open_stores

    first, second = tmp_path / "first.db", tmp_path / "second.db"
    for path in (first, second):
        shutil.copyfile(empty_mlflow_store, path)
    for cached in ("_tracking_store", "_model_registry_store"):  # restored after the test
        monkeypatch.setattr(handlers, cached, None)
    monkeypatch.setattr(handlers.utils, "_tracking_uri", None, raising=False)
    # MLflow's set_tracking_uri, which opening a store calls, also sets the variable
    monkeypatch.setenv("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI", ""))
    open_stores(f"sqlite:///{first}", str(tmp_path / "a"))
    open_stores(f"sqlite:///{second}", str(tmp_path / "b"))
    assert str(second) in str(handlers._get_tracking_store().db_uri)


def test_the_servers_layers_go_on_an_app_that_has_served_already(tmp_path):
    """A forked server's copy of MLflow's app may have served requests in the process it was
    forked from: Flask then refuses new hooks, so the server's layers are WSGI ones."""
    from flask import Flask
    from werkzeug.test import Client

    from mlops.runtime.mlflow_serve import wire

    app = Flask("served-before")
    app.add_url_rule("/health", "health", lambda: "OK")
    assert Client(app).get("/health").status_code == 200  # Flask's setup is now finished
    watch = Watch(tmp_path, 60.0)
    watch.last_request = 0.0
    wire(app, watch, str(tmp_path / "mlruns"))
    assert Client(app).get("/health").status_code == 200
    assert watch.last_request > 0.0


def test_a_server_whose_folder_is_gone_as_it_starts_ends(tmp_path, monkeypatch):
    """Its watch cannot open the lease of a deleted folder: no run can find the server again,
    so it ends rather than serving on with no watch (a test's folder removed as it passed)."""

    class Ended(Exception):
        pass

    def exit_(code):
        raise Ended(code)

    monkeypatch.setattr(os, "_exit", exit_)
    with pytest.raises(Ended):
        Watch(tmp_path / "gone", idle=3600.0).run()
