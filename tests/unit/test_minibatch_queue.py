"""The mini-batch queue (mlops/runtime/minibatch.py and its worker): the workers start before
the input is read, so a worker waits while the queue is open, takes each mini-batch once it is
written whole, and stops once the queue is complete and empty."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

from support import until

from mlops.runtime import launch, minibatch
from mlops.runtime.minibatch_worker import next_item


def test_a_worker_waits_for_the_queue_and_stops_once_it_is_complete_and_empty(tmp_path):
    minibatch.open_queue(tmp_path)
    taken: list[str | None] = []

    def worker() -> None:
        while True:
            item = next_item(tmp_path)
            taken.append(item and item.name.split(".")[0])
            if item is None:
                return

    thread = threading.Thread(target=worker)
    thread.start()
    assert thread.is_alive() and taken == []  # nothing queued yet: it waits
    assert minibatch.queue([["a.jpg"], ["b.jpg"]], tmp_path) == 2
    thread.join(timeout=30)
    assert taken == ["000000", "000001", None]
    assert not list((tmp_path / "todo").iterdir())


def test_an_earlier_attempts_queue_is_dropped(tmp_path):
    minibatch.open_queue(tmp_path)
    minibatch.queue([["a.jpg"]], tmp_path)
    minibatch.open_queue(tmp_path)
    assert not (tmp_path / minibatch.QUEUED).exists() and not list((tmp_path / "todo").iterdir())
    found: list[object] = []
    thread = threading.Thread(target=lambda: found.append(next_item(tmp_path)), daemon=True)
    thread.start()
    until(lambda: thread.is_alive(), 5, "the worker to wait")
    minibatch.queue([], tmp_path)  # an empty queue, complete: the worker ends
    thread.join(timeout=30)
    assert found == [None]


def test_the_driver_reads_each_result_once_and_stops_past_azures_thresholds(tmp_path):
    results = minibatch.Results(folder=tmp_path)
    assert results.read().done == 0

    def outcome(name: str, items: int, returned: int, error: str = "") -> None:
        (tmp_path / f"{name}.txt").write_text("row\n" * returned)
        (tmp_path / f"{name}.json.tmp").write_text("{")  # a worker's file not yet in place
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"items": items, "returned": returned, "error": error}))

    outcome("000000", 8, 8)
    outcome("000001", 8, 6)
    assert (results.read().done, results.scored, results.failed) == (2, 16, 2)
    (tmp_path / "000000.json").write_text("read once: never again")
    outcome("000002", 8, 0, "ValueError: no")
    read = results.read()
    assert (read.done, read.scored, read.failed, read.failed_batches) == (3, 24, 10, 1)
    assert minibatch.over_limit(read, minibatch.Limits()) == ""  # -1: never
    assert minibatch.over_limit(read, minibatch.Limits(error_threshold=10)) == ""
    assert "error_threshold 9 exceeded (10 failed files)" in \
        minibatch.over_limit(read, minibatch.Limits(error_threshold=9))
    assert "mini_batch_error_threshold 0 exceeded (1 failed mini-batches)" in \
        minibatch.over_limit(read, minibatch.Limits(mini_batch_error_threshold=0))


def test_the_rows_and_metrics_are_settled_while_the_processes_exit(tmp_path, monkeypatch):
    events: list[str] = []

    class Launch:  # one process: it scores the mini-batch, then exits only once waited for
        procs: list = []  # (none that ended by a signal: nothing to start again)
        fail_fast = True

        def poll(self):
            return 0 if "waited" in events else None

        def nap(self, seconds):
            (tmp_path / "work" / "results" / "000000.json").write_text(
                json.dumps({"items": 2, "returned": 1, "error": ""}))

        def wait(self):
            events.append("waited")
            return 0

    running = SimpleNamespace(task=SimpleNamespace(folder=tmp_path), launch=Launch(),
                              run_id="run-1", guard=None)
    monkeypatch.setattr(minibatch.engine, "start", lambda *a, **k: running)
    monkeypatch.setattr(minibatch.engine, "finish",
                        lambda run, rt, status: events.append(f"finished {status}") or status)
    hooks = minibatch.Hooks(
        announce=lambda run: events.append("announced"),
        settled=lambda run_id, tally, seconds: events.append(
            f"settled {run_id} {tally.scored}/{tally.items}, {tally.failed} failed"))
    driven = minibatch.drive(SimpleNamespace(folder=tmp_path), None, minibatch.Batches(
        batches=[["a.jpg", "b.jpg"]], items=2, limits=minibatch.Limits()), hooks=hooks)
    assert events == ["announced", "settled run-1 1/2, 1 failed", "waited",
                      f"finished {minibatch.Status.COMPLETED}"]
    assert driven.tally == minibatch.Tally(2, 1, 0)


def test_a_run_stopped_by_a_process_that_ended_says_which_and_how():
    assert launch.ending(1) == "exit 1"
    assert launch.ending(137) == "killed by SIGKILL (exit 137)"
    assert launch.ending(255) == "exit 255"  # ssh's, not a signal's
    killed = SimpleNamespace(first_failed=1, first_failure=137)
    assert minibatch.ended_early(killed, 12) == (
        "process 1 ended (killed by SIGKILL (exit 137)) with 12 mini-batches left: stopping")
    quiet = SimpleNamespace(first_failed=None, first_failure=None)
    assert "ended with 3 mini-batches left" in minibatch.ended_early(quiet, 3)


def test_an_entry_script_gets_azures_entry_script_object_from_the_worker(tmp_path, monkeypatch):
    """`from azureml_user.parallel_run import EntryScript` (Azure's parallel driver provides it):
    one instance a process, a logger at the job's level, log_dir, agent_name, output_dir."""
    import logging
    import sys

    from mlops.environments.activation import HELPERS
    from mlops.runtime import entry_script

    assert any(name == "_mlops_entry_script.py" for _, name in HELPERS)
    for name in ("azureml_user", "azureml_user.parallel_run"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(entry_script.EntryScript, "_instance", None)
    monkeypatch.setenv("AZUREML_PARALLEL_LOGGING_LEVEL", "DEBUG")
    monkeypatch.setenv("AZUREML_BI_OUTPUT_PATH", str(tmp_path / "out"))
    work = tmp_path / "work"
    (work / "agents").mkdir(parents=True)
    (work / "agents" / "process000").touch()  # another worker's
    entry_script.install(work)
    from azureml_user.parallel_run import EntryScript

    first = EntryScript()
    assert EntryScript() is first and first.agent_name == "process001"
    assert first.logger.level == logging.DEBUG
    assert first.log_dir == str(tmp_path / "logs" / "user" / "entry_script_log" / "0")
    assert first.output_dir == str(tmp_path / "out")
    for name in ("azureml_user", "azureml_user.parallel_run"):
        sys.modules.pop(name)
