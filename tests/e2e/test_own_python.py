"""Environments for another Python run on an interpreter of that version, as Azure runs them on
the Python their image holds: the shapes that failed when moved to .venv's 3.11 (an old wrapt,
cloudpickle 1.1.1 in a parallel step, pandas 1.2.1 on exactly Python 3.7.5), and the runtime's
own behaviours once more on Python 3.8 (MLflow runs through the environment's own client,
signals, read-only inputs, step reuse, a debugger). Each skips, with the reason, where this
machine has no interpreter of that version (tests/unit/test_interpreters.py covers the search).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import ROOT, lazy

from mlops import run as local
from mlops.environments import interpreters
from mlops.environments.interpreters import find, how_to_get

tracking = lazy("mlflow.tracking")

FIXTURES = ROOT / "tests" / "fixtures"
PYTHONS = FIXTURES / "pythons"
pytestmark = [pytest.mark.usefixtures("sources_unchanged", "mlflow_store"),
              pytest.mark.network]  # a cold cache: the environment from the registry


def needs(minor: str) -> interpreters.Python:
    found = find(minor)
    if found is None:
        pytest.skip(f"no Python {minor} on this machine: {how_to_get(minor)}")
    return found


def on_python_38(folder: Path, tmp: Path, *beside: Path) -> Path:
    """A copy of a fixture folder (and of the folders `beside` it that its specs name) whose
    specs' environments, wherever they are declared, are one conda file for Python 3.8 with the
    MLflow client (the newest for 3.8: 2.17.2), shared by every test here."""
    needs("3.8")
    for other in beside:
        shutil.copytree(other, tmp / other.name)
    copy = shutil.copytree(folder, tmp / folder.name)
    conda = tmp / "py38-conda.yml"
    conda.write_text("name: py38\ndependencies:\n  - python=3.8\n  - pip\n  - pip:\n"
                     "      - mlflow-skinny\n")
    py38 = {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04:latest",
            "conda_file": str(conda)}
    for spec in copy.rglob("*.yml"):
        data = yaml.safe_load(spec.read_text())
        if _environments_to(data, py38):
            spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def _environments_to(data: object, environment: dict[str, str]) -> bool:
    """Every `environment:` under `data` set to `environment`; whether there was one."""
    found = False
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "environment":
                data[key], found = dict(environment), True
            else:
                found = _environments_to(value, environment) or found
    elif isinstance(data, list):
        for item in data:
            found = _environments_to(item, environment) or found
    return found


def test_the_probe_takes_pyenvs_interpreter_and_refuses_a_shim_that_cannot_answer():
    found = needs("3.8")
    assert interpreters.probe(found.executable) == found and found.minor == "3.8"
    shim = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims" / "python3.8"
    if shim.is_file() and subprocess.run([str(shim), "-V"], capture_output=True).returncode:
        assert interpreters.probe(shim) is None  # pyenv selects another version: it fails


def test_an_old_wrapt_imports_on_the_python_38_it_was_made_for(tmp_path, capsys):
    """wrapt 1.12.1 imports inspect.formatargspec, gone from 3.11: on 3.8 it imports."""
    py38 = needs("3.8")
    assert local.main([str(PYTHONS / "wrapt-py38.yml"), "--run-dir", str(tmp_path / "r")]) == 0
    assert f"python {py38.version} wrapt 1.12.1" in (tmp_path / "r/log.txt").read_text()
    assert f"runs on Python {py38.version} ({py38.executable})" in capsys.readouterr().err


def test_python_3_7_5_is_resolved_for_3_7_5_where_pandas_1_2_1_installs(tmp_path, capsys,
                                                                        monkeypatch):
    py37 = needs("3.7")
    monkeypatch.setenv("LOCAL_ENVS_DIR", str(tmp_path / "envs"))  # resolved here, not cached
    assert local.main([str(PYTHONS / "pandas-py375.yml"), "--run-dir", str(tmp_path / "r")]) \
        == 0
    assert "pandas 1.2.1 sum 3" in (tmp_path / "r/log.txt").read_text()
    out, err = capsys.readouterr()
    assert "for Python 3.7.5, as Azure's image build does" in out
    assert f"runs on Python {py37.version}" in err and "fails too" not in err


def test_a_parallel_step_on_python_37_pickles_with_cloudpickle_1_1_1(tmp_path, capsys):
    """The mini-batch worker runs in the environment's own Python 3.7; a read-only input there
    is said to be unguarded (no audit hooks before 3.8)."""
    py37 = needs("3.7")
    spec = PYTHONS / "cloudpickle-py37-parallel.yml"
    assert local.main([str(spec), "--run-dir", str(tmp_path / "r")]) == 0
    step = tmp_path / "r/steps/count"
    assert f"python {py37.version} cloudpickle 1.1.1" in (step / "log.txt").read_text()
    rows = (step / "outputs/counts/parallel_run_step.txt").read_text().split("\n")
    assert sorted(filter(None, rows)) == ["one.txt 1", "three.txt 3", "two.txt 2"]
    assert "Python 3.7 has no audit hooks" in capsys.readouterr().err


@pytest.mark.proof
def test_a_job_on_python_38_logs_its_mlflow_run_through_its_own_client(tmp_path, monkeypatch):
    """The environment's MLflow 2.17 client (nothing of .venv's MLflow 3 beside it) logs to the
    local tracking server."""
    import importlib.metadata

    hello = on_python_38(FIXTURES / "hello", tmp_path)
    monkeypatch.setenv("KEEP_ENV", "1")
    assert local.main([str(hello / "hello-command.yml"), "--run-dir", str(tmp_path / "r")]) == 0
    experiment = tracking.MlflowClient().get_experiment_by_name("hello-command")
    (run,) = tracking.MlflowClient().search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics
    top = tmp_path / "r/env/lib/python3.8/site-packages"
    (below,) = re.findall(r"addsitedir\('([^']+)'\)", (top / "zz_lower_layers.pth").read_text())
    held = {dist.metadata["Name"].lower(): dist.version
            for dist in importlib.metadata.distributions(path=[below])}
    assert held["mlflow-skinny"].startswith("2.") and "mlflow" not in held
    assert "torch" not in held  # nothing of .venv's


def test_a_debugger_stops_a_job_on_python_38_at_its_source_line(tmp_path):
    """debugpy for Python 3.8 (the newest release for it, not .venv's) in the debugged process."""
    from test_debugging import ADD_LINE, debugged, free_port, run_local

    debug = on_python_38(FIXTURES / "debug", tmp_path)
    port = free_port()
    argv = ["--set", "inputs.n=3", "--debug", "1", "--debug-port", str(port)]
    job = run_local(debug / "job.yml", tmp_path / "run", *argv)
    path, line, local_vars, out = debugged(job, port, debug / "src/tally.py", ADD_LINE,
                                           wait=300)
    assert (path, line) == (str(debug / "src/tally.py"), ADD_LINE)
    assert local_vars["numbers"] == "[1, 2, 3]" and job.returncode == 0, out
    from mlops.environments.layers import cache_dir

    tools = cache_dir() / "tools" / "debugpy-upto-1.8.22-py3.8"
    assert list(tools.glob("debugpy-1.8.21.dist-info"))  # 1.8.22 wants Python 3.10


def test_signals_stop_a_job_on_python_38_and_mark_it_killed(tmp_path):
    hello = on_python_38(FIXTURES / "hello", tmp_path)
    runner = subprocess.Popen(
        [sys.executable, "-m", "mlops.run", str(hello / "hello-command.yml"), "--run-dir",
         str(tmp_path / "run"), "--set", "inputs.steps=200", "--set", "inputs.sleep=0.2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file, deadline = tmp_path / "run/outputs/result/pid", time.monotonic() + 300
    while not (pid_file.is_file() and pid_file.read_text().strip().isdigit()):
        assert time.monotonic() < deadline and runner.poll() is None, "the job never started"
        time.sleep(0.1)
    child = int(pid_file.read_text())
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=60) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert json.loads((tmp_path / "run/status.json").read_text())["status"] == "Canceled"


def test_a_job_on_python_38_cannot_write_into_its_mounted_inputs(tmp_path):
    third = on_python_38(FIXTURES / "thirdparty", tmp_path)
    assert local.main([str(third / "readonly-inputs.yml"), "--run-dir", str(tmp_path / "r")]) \
        == 1
    log = (tmp_path / "r/log.txt").read_text()
    for attempt in ("append", "create", "os.open", "remove", "rename", "rmtree"):
        assert f"{attempt} refused 30 Read-only file system" in log
    assert sorted(p.name for p in (third / "ro-data").iterdir()) == ["notes.txt"]


def test_an_unchanged_pipeline_on_python_38_reuses_every_step(tmp_path, capsys):
    hello = on_python_38(FIXTURES / "hello", tmp_path, FIXTURES / "thirdparty")
    for folder in ("first", "again"):
        assert local.main([str(hello / "hello-pipeline.yml"), "--run-dir",
                           str(tmp_path / folder), "--max-procs", "2"]) == 0
    assert "reused 3 step(s): prep, train, register" in capsys.readouterr().out


@pytest.mark.parametrize(("spec", "minor"), [("py37.yml", "3.7"), ("py38.yml", "3.8")])
def test_the_jobs_own_mlflow_client_logs_and_registers_as_azures_store_takes_it(
        tmp_path, spec, minor):
    """MLflow 1.30 (Python 3.7) registers through /api/2.0/preview/mlflow/...; 1.30 and 2.17
    log under an absolute artifact path, kept under the run's artifacts without its `/`."""
    needs(minor)
    run_dir = tmp_path / "r"
    assert local.main([str(FIXTURES / "mlflow-clients" / spec), "--run-dir", str(run_dir)]) == 0
    assert "registered client-compat" in (run_dir / "log.txt").read_text()
    client = tracking.MlflowClient()
    run_id = json.loads((run_dir / "status.json").read_text())["mlflow_run_id"]
    logged = str(run_dir.resolve() / "wd" / "model").lstrip("/")
    assert [f.path for f in client.list_artifacts(run_id, logged)] == [f"{logged}/weights.txt"]
    versions = client.search_model_versions("name='client-compat'")
    assert any(v.run_id == run_id for v in versions)


SERVING = PYTHONS / "serving"


def test_an_online_deployment_on_python_38_serves_from_its_own_server(tmp_path, monkeypatch):
    """The inference server is the release Azure's image build takes for Python 3.8, in the
    deployment's own environment; the scorer runs there."""
    from endpoint_client import post, use_root

    py38 = needs("3.8")
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    try:
        endpoints.start(SERVING / "online-deployment.yml")
        answer = post(f"http://127.0.0.1:{endpoints.port}/score",
                      json.dumps({"data": [[1, 2, 3], [0, 0, 0]]}).encode(), endpoints.headers())
        assert answer.status == 200 and answer.body == [18, 4]
        log = endpoints.log("py38")
    finally:
        endpoints.stop()
    assert f"scoring on python {py38.version}" in log and f"Python {py38.version})" in log


@pytest.mark.parametrize(("spec", "minor", "release"), [
    ("online-py37-defaults.yml", "3.7", "0.4."),  # azureml-defaults 1.42: its entry:app line
    ("online-py38-defaults.yml", "3.8", "0.7."),  # azureml-defaults 1.48
], ids=["server-0.4-py37", "server-0.7-py38"])
def test_old_inference_servers_start_as_their_release_starts(tmp_path, monkeypatch, spec, minor,
                                                             release):
    """azureml-defaults 1.3x-1.4x pin azureml-inference-server-http 0.x, which starts through
    its own azmlinfsrv (0.1-0.6: gunicorn on `entry:app`), not on the 1.x app path."""
    from endpoint_client import post, use_root

    python = needs(minor)
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    name = spec.removeprefix("online-").removesuffix(".yml")
    try:
        endpoints.start(SERVING / spec)
        answer = post(f"http://127.0.0.1:{endpoints.port}/score",
                      json.dumps({"data": [[1, 2, 3], [0, 0, 0]]}).encode(), endpoints.headers())
        assert answer.status == 200 and answer.body == [18, 4]
        log = endpoints.log(name)
    finally:
        endpoints.stop()
    assert f"Azure ML Inferencing HTTP server v{release}" in log
    assert "started as azmlinfsrv on 127.0.0.1" in log and python.version in log


def test_a_batch_deployment_on_python_38_scores_in_its_own_python(tmp_path, capsys):
    from mlops import batch

    py38 = needs("3.8")
    assert batch.main([str(SERVING / "batch-deployment.yml"), "--input", str(SERVING / "input"),
                       "--run-dir", str(tmp_path / "run"), "--max-procs", "2"]) == 0
    rows = (tmp_path / "run/outputs/predictions.txt").read_text().splitlines()
    assert rows == ["part-1.csv 0 18", "part-1.csv 1 4", "part-2.csv 0 13.5"]
    assert f"batch scoring on python {py38.version}" in (tmp_path / "run/log.txt").read_text()


BUILD = """
import sys
from pathlib import Path
from mlops.environments.activation import Environments
from mlops.environments.envspec import EnvironmentRef
stack = Environments().layers(EnvironmentRef(value={"conda_file": "conda.yml"},
                                           base=Path(sys.argv[1])), "x")
print("stack", stack.layers[0], stack.python.version)
"""


def build_in(folder: Path, envs: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILD, str(folder)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "LOCAL_ENVS_DIR": str(envs)})


def test_two_first_builds_at_once_build_once_and_a_killed_build_is_built_again(tmp_path):
    py38 = needs("3.8")
    (tmp_path / "conda.yml").write_text("dependencies:\n- python=3.8\n- pip\n- pip:\n"
                                        "  - six==1.16.0\n")
    envs = tmp_path / "envs"
    killed = build_in(tmp_path, envs)
    deadline = time.monotonic() + 120
    while not list(envs.glob("py3.8-*/bin")):  # the build has started writing
        assert time.monotonic() < deadline and killed.poll() is None, killed.communicate()[0]
        time.sleep(0.02)
    killed.kill()
    killed.wait()
    assert not list(envs.glob("py3.8-*/layer.json"))  # left half-built
    first, second = build_in(tmp_path, envs), build_in(tmp_path, envs)
    outs = [job.communicate(timeout=300)[0] for job in (first, second)]
    assert first.returncode == second.returncode == 0, outs
    assert sum(out.count("environment ready") for out in outs) == 1  # one built, one waited
    stacks = {line for out in outs for line in out.splitlines() if line.startswith("stack ")}
    (stack,) = stacks
    assert stack.endswith(py38.version)
    six = subprocess.run([stack.split()[1] + "/bin/python", "-c",
                          "import six, sys; print(six.__version__, sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    assert six.stdout.strip() == "1.16.0 (3, 8)"
