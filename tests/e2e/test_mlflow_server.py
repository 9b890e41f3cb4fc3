"""The warm local tracking server (mlops/runtime/mlflow_server.py): the first run starts it,
later runs find it, it stops itself once no run has held it for the idle time, and a server
killed with -9, a damaged record or two runs at once never leave a run without one; a job's
call to Azure's run history over HTTPS on its tracking URI's host reaches its run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from support import ROOT, until

from mlops.runtime.mlflow_serve import IDLE_ENV, Record
from mlops.runtime.mlflow_server import Server, running, server_folder, stop
from mlops.runtime.mlflow_store import ClientStore

HELLO = ROOT / "tests" / "fixtures" / "hello"
GATHER = ROOT / "tests" / "fixtures" / "run_history" / "gather.yml"
IMPORTED = ("import sys\nfrom mlops import run\nassert run.main(sys.argv[1:]) == 0\n"
            "print('imported:', [m for m in ('mlflow', 'azure.ai.ml') if m in sys.modules])")


@pytest.fixture
def store(tmp_path, monkeypatch) -> str:
    """A new store, and MLflow's server code loaded here: servers are forked from this process
    (the processes test below starts them the usual way)."""
    import mlflow.server.handlers  # noqa: F401

    monkeypatch.setenv(IDLE_ENV, "1")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    yield uri
    stop(server_folder(uri))


def healthy(uri: str) -> bool:
    with urllib.request.urlopen(f"{uri}/health", timeout=60) as answer:
        return answer.read() == b"OK"


def test_a_handle_starts_nothing_until_a_run_connects(store, tmp_path):
    server = Server(store)
    server.close()
    assert not server_folder(store).exists() and server.pid is None


@pytest.mark.proof
def test_one_run_starts_it_the_next_finds_it_and_it_stops_once_idle(store):
    first = Server(store)
    uri = first.connect()
    assert first.started and healthy(uri)
    second = Server(store)
    assert second.connect() == uri and not second.started and second.pid == first.pid
    first.close()
    second.close()
    folder = server_folder(store)
    until(lambda: running(folder) is None, 60, "the idle server to stop")
    assert not (folder / "record.json").exists()
    third = Server(store)
    assert healthy(third.connect()) and third.started  # a new one, on demand
    third.close()


def test_a_server_killed_while_a_run_holds_it_starts_again_on_its_port(store):
    """A job was given the port as its tracking URI: the run's keeper starts the server again
    there, and what was logged before is kept."""
    held = Server(store)
    uri = held.connect()
    made = ClientStore(uri).create_run("0", "before", {"kept": "yes"}, 1).run_id
    killed = held.pid
    os.kill(killed, signal.SIGKILL)
    until(lambda: running(server_folder(store)) not in (None, killed), 60,
          "a new server on the port")
    assert Record.read(server_folder(store)).port == held.port
    assert healthy(uri) and ClientStore(uri).get_run(made).tags["kept"] == "yes"
    held.close()


def test_a_server_killed_with_minus_9_or_a_damaged_record_is_replaced(store):
    folder = server_folder(store)
    first = Server(store)
    first.connect()
    first.close()  # killed while no run holds it: the next run starts another
    os.kill(first.pid, signal.SIGKILL)
    until(lambda: running(folder) is None, 30, "the killed server's lock to go")
    second = Server(store)
    assert healthy(second.connect()) and second.started and second.pid != first.pid
    (folder / "record.json").write_text('{"pid": "damaged"')
    third = Server(store)
    assert healthy(third.connect()) and third.started  # the unreadable one was stopped
    until(lambda: not Path(f"/proc/{second.pid}").exists() or
          "Z" in Path(f"/proc/{second.pid}/stat").read_text().split()[2], 30,
          "the server of the damaged record to end")
    for server in (second, third):
        server.close()


def test_runs_started_together_share_one_new_server(store):
    handles = [Server(store) for _ in range(4)]
    gate = threading.Barrier(len(handles))
    uris: list[str] = []

    def connect(server: Server) -> None:
        gate.wait()
        uris.append(server.connect())

    threads = [threading.Thread(target=connect, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(set(uris)) == 1 and sum(h.started for h in handles) == 1
    assert healthy(uris[0])
    for server in handles:
        server.close()


def test_local_runs_in_their_own_processes_keep_it_warm_and_survive_its_death(tmp_path):
    """Three `python -m mlops.run` of the hello job on one store: the first starts the server,
    which is then killed with -9; the second starts another; the third finds it warm. Every
    run's metrics reach the store through it."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    folder = server_folder(store)
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, IDLE_ENV: "120",
           "AZML_STATE_DIR": str(tmp_path / "state")}

    def run(name: str) -> tuple[Record, str]:
        """The run, and which of MLflow and azure-ai-ml its runner imported."""
        argv = [str(HELLO / "hello-command.yml"), "--run-dir", str(tmp_path / name), "--set",
                "inputs.sleep=0"]
        done = subprocess.run([sys.executable, "-c", IMPORTED, *argv], cwd=ROOT, env=env,
                              check=True, capture_output=True, text=True)
        return Record.read(folder), done.stdout.splitlines()[-1]

    try:
        first, _ = run("first")
        os.kill(first.pid, signal.SIGKILL)
        second, _ = run("second")
        third, imported = run("third")
    finally:
        stop(folder)
    assert second.pid != first.pid and third == second
    assert imported == "imported: []"  # a warm run: its verdict kept, the server's API spoken
    client = ClientStore(store)
    runs = client.search_runs(client.experiment_ids(), "attributes.run_name = 'hello-command'",
                              10)
    assert len(runs) == 3 and {r.status for r in runs} == {"FINISHED"}
    assert all(r.metrics.get("accuracy") for r in runs)


def test_a_jobs_run_history_call_over_https_reaches_its_run(tmp_path):
    """What responsible-AI's gather and score-card steps do last (tests/fixtures/run_history:
    azure-core's RequestsTransport, certifi's bundle): PATCH the run's properties to
    https://<the tracking URI's host>/history/v1.0/.../runs/<run id>. The server answers on its
    one port; the job's environment trusts it; the properties land on the job's MLflow run as
    the local Run stand-in keeps them. A user's own REQUESTS_CA_BUNDLE (a company's authority)
    is kept and trusts it too."""
    import certifi

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    bundle = tmp_path / "company bundle.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, IDLE_ENV: "60",
           "AZML_STATE_DIR": str(tmp_path / "state")}
    env.pop("MLOPS_CACHE_DIR", None)  # the certificate is made in this state's empty cache
    try:
        for name, extra in (("certifi", {}), ("own", {"REQUESTS_CA_BUNDLE": str(bundle)})):
            done = subprocess.run(
                [sys.executable, "-m", "mlops.run", str(GATHER), "--run-dir", str(tmp_path / name),
                 "--set", f"inputs.title={name}"], cwd=ROOT, env={**env, **extra},
                capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            assert "run history answered 200" in done.stdout
    finally:
        stop(server_folder(store))
    assert (tmp_path / "state" / "cache" / "local-tls" / "ca.pem").is_file()
    client = ClientStore(store)
    runs = client.search_runs(client.experiment_ids(), "", 10)
    titles = {r.tags.get("properties._azureml.responsibleai.rai_insights.ScoreCardTitle")
              for r in runs}
    assert titles == {"certifi", "own"} and {r.status for r in runs} == {"FINISHED"}
