"""A real debugger client (DAP over loopback) attaches to a command job, a pipeline step and the
local endpoint, stops at a breakpoint set on the *source* file, reads the locals, continues, and
the run ends as it does without a debugger."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest
from dap import DapClient
from endpoint_client import use_root
from support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "debug"
TALLY = FIXTURES / "src" / "tally.py"
ADD_LINE = 11  # `subtotal += number`


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def debug_env(mlflow_store):
    """debugpy is installed once into the tools folder of the environment cache local runs use
    (LOCAL_ENVS_DIR, else .cache/envs), as a user's first DEBUG= run installs it."""


def run_local(spec, run_dir, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mlops.run", str(spec), "--run-dir",
                             str(run_dir), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def debugged(job: subprocess.Popen, port: int, source, line: int, wait: float = 60):
    """Attach (within `wait` seconds of the start), stop at the breakpoint, read where and the
    locals, continue to the end: the frame's file, its line, its locals, and what the run
    printed."""
    try:
        client = DapClient(port, wait, alive=lambda: job.poll() is None)
    except OSError:
        job.kill()  # never attached: the debugged process would wait for a client forever
        out, _ = job.communicate(timeout=60)
        raise AssertionError(f"no debugger listened on port {port}; the run printed:\n{out}") \
            from None
    try:
        client.attach_and_break(source, line)
        stopped = client.stopped_locals()
        client.resume()
        out, _ = job.communicate(timeout=180)
    finally:
        client.close()
        job.kill()
    return (*stopped, out)


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_command_job_stops_at_a_breakpoint_on_its_source_file(debug_env, tmp_path):
    port = free_port()
    job = run_local(FIXTURES / "job.yml", tmp_path / "debugged", "--set", "inputs.n=5",
                    "--debug", "1", "--debug-port", str(port))
    # the first DEBUG= run of a machine installs debugpy into the environment cache
    path, line, local, out = debugged(job, port, TALLY, ADD_LINE, wait=180)
    assert (path, line) == (str(TALLY), ADD_LINE)  # the source file, not the snapshot copy
    assert local["numbers"] == "[1, 2, 3, 4, 5]" and local["subtotal"] == "0"
    assert job.returncode == 0, out
    assert f"waits for a debugger on 127.0.0.1:{port}" in out
    # what the job writes without a debugger: 1 + 2 + 3 + 4 + 5
    assert (tmp_path / "debugged" / "outputs/result/total.txt").read_text() == "15"


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_pipeline_step_is_debugged_by_name_and_the_others_run_as_usual(debug_env, tmp_path):
    port = free_port()
    job = run_local(FIXTURES / "pipeline.yml", tmp_path / "run", "--debug", "total",
                    "--debug-port", str(port))
    _, _, local, out = debugged(job, port, TALLY, ADD_LINE)
    assert local["numbers"] == "[1, 2, 3]"  # read from the count step's output
    assert job.returncode == 0, out
    assert (tmp_path / "run" / "steps" / "total" / "outputs" / "summed" / "total.txt"
            ).read_text() == "6"


@pytest.mark.heavy  # a Spark start of its own: make test keeps to one shared Spark run
@pytest.mark.network
def test_the_spark_driver_stops_at_a_breakpoint_on_its_entry_file(debug_env, tmp_path):
    """The driver is the first process that runs the job's code: it takes the debugger, the
    JVM and the executors' Python workers run as usual."""
    spark = ROOT / "tests" / "fixtures" / "spark"
    entry = spark / "src" / "wrangle.py"
    line = next(n for n, text in enumerate(entry.read_text().splitlines(), 1)
                if "totals.write.parquet" in text)
    port = free_port()
    job = run_local(spark / "spark-job.yml", tmp_path / "run", "--assets",
                    str(spark / "local-paths.yml"), "--debug", "1", "--debug-port", str(port))
    # the session's first Spark run may build the Spark layer (minutes on a cold cache)
    path, stopped, local, out = debugged(job, port, entry, line, wait=900)
    assert (path, stopped) == (str(entry), line)
    assert "min_count=10" in local["args"]
    assert job.returncode == 0, out
    assert (tmp_path / "run" / "outputs" / "summary" / "_SUCCESS").is_file()


def test_a_step_name_the_pipeline_lacks_is_refused_with_its_steps(debug_env, tmp_path):
    job = run_local(FIXTURES / "pipeline.yml", tmp_path / "run", "--debug", "totl")
    out, _ = job.communicate(timeout=120)
    assert job.returncode == 2
    assert "DEBUG=totl names no task of this run; its tasks: count, total" in out
    assert not (tmp_path / "run").exists()  # refused before anything ran


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_the_local_endpoint_stops_in_run_and_answers_after(debug_env, tmp_path, monkeypatch):
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    debug_port = free_port()
    debug = ["--debug", "1", "--debug-port", str(debug_port)]  # the serve command's argv
    url = endpoints.start(FIXTURES / "endpoint" / "deployment.yml", *debug)
    client = DapClient(debug_port)
    answers = []
    try:
        client.attach_and_break(FIXTURES / "endpoint" / "score.py", 18)
        call = urllib.request.Request(url, method="POST",
                                      data=json.dumps({"data": [1, 2]}).encode(),
                                      headers={"Content-Type": "application/json",
                                               **endpoints.headers()})
        caller = threading.Thread(target=lambda: answers.append(
            json.loads(urllib.request.urlopen(call, timeout=120).read())))
        caller.start()
        _, line, local = client.stopped_locals()
        assert line == 18 and local["values"] == "[1, 2]"
        client.resume()
        caller.join(timeout=60)
    finally:
        client.close()
        endpoints.stop()
    assert answers == [{"shifted": [11, 12]}]


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_pdb_takes_the_terminal_at_the_first_line_of_the_jobs_code(debug_env, tmp_path):
    """DEBUG=pdb: the job's process under pdb on a (pseudo-)terminal, stopped at its first line;
    a breakpoint, the locals, then on to the end."""
    import os
    import pty
    import select
    import time

    command = [sys.executable, "-m", "mlops.run", str(FIXTURES / "job.yml"), "--run-dir",
               str(tmp_path / "run"), "--debug", "pdb", "--set", "inputs.n=3"]
    pid, terminal = pty.fork()
    if pid == 0:  # the child: the run, on the pseudo-terminal
        os.chdir(ROOT)
        os.execv(command[0], command)
    seen = b""

    def until(text: bytes, seconds: float = 90) -> None:
        nonlocal seen
        deadline = time.monotonic() + seconds
        while text not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")[-2000:]
            if select.select([terminal], [], [], 0.2)[0]:
                seen += os.read(terminal, 65536)

    try:
        until(b"tally.py(1)<module>()")
        os.write(terminal, f"b {ADD_LINE}\nc\n".encode())
        until(b"-> subtotal += number")
        os.write(terminal, b"p numbers\n")
        until(b"[1, 2, 3]")
        os.write(terminal, b"cl 1\nc\n")
        until(b"debug-tally: Completed")
    except BaseException:
        os.killpg(pid, 9)  # the run and its job: the pseudo-terminal's session
        raise
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "run" / "outputs" / "result" / "total.txt").read_text() == "6"


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_batch_worker_holds_a_mini_batch_while_it_waits_for_its_debugger(
        debug_env, tmp_path, tiny_data, model_dir):
    """DEBUG=worker:1: the other worker runs as usual, and cannot take every mini-batch before
    the debugged one starts (here there is only one)."""
    port = free_port()
    job = subprocess.Popen(
        [sys.executable, "-m", "mlops.batch", str(ROOT / "endpoints/batch/deployment.yml"),
         "--input", str(tiny_data / "val"), "--model", str(model_dir), "--run-dir",
         str(tmp_path / "run"), "--max-procs", "2", "--debug", "worker:1", "--debug-port",
         str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    script = ROOT / "src" / "image_classifier" / "batch_score.py"
    line = next(n for n, text in enumerate(script.read_text().splitlines(), 1)
                if "paths, images = [], []" in text)
    _, _, local, out = debugged(job, port, script, line)
    assert "chickens" in local["mini_batch"]
    assert job.returncode == 0 and "16 of 16 files scored" in out, out
