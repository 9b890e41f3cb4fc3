"""A mini-batch worker killed by a signal, as Azure's batch driver treats one (mlops/runtime/
minibatch_recovery.py): the process started again, the mini-batch it held queued again with a
try spent, failed past its tries; a process that ended by itself is not started again."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

from mlops.runtime.minibatch_recovery import Recovery

DEAD = 2**22 + 12345  # above Linux's pid_max: no process has it
PIDS = itertools.count(100)  # each fake process its own pid


class Launch:
    """Processes that ended with `codes`; restart() gives each a fresh, running one."""

    def __init__(self, *codes: int | None):
        self.procs = [SimpleNamespace(returncode=c, pid=next(PIDS)) for c in codes]
        self.restarted: list[int] = []

    def poll(self):
        return None

    def restart(self, rank: int) -> int:
        self.restarted.append(rank)
        self.procs[rank] = SimpleNamespace(returncode=None, pid=next(PIDS))
        return self.procs[rank].pid


def work_folder(tmp_path):
    for name in ("todo", "claimed", "results"):
        (tmp_path / name).mkdir()
    (tmp_path / "claimed" / f"000001.json.{DEAD}").write_text(json.dumps(["a", "b"]))
    (tmp_path / "claimed" / f"000000.json.{DEAD}").write_text(json.dumps(["c"]))
    (tmp_path / "results" / "000000.json").write_text("{}")  # done before the kill
    return tmp_path


def test_a_killed_workers_mini_batch_is_queued_again_and_the_process_started_again(
        tmp_path, capsys):
    work = work_folder(tmp_path)
    job = Launch(137, None)
    assert Recovery(work=work, max_retries=2).after_deaths(job, done=1) == ""
    assert job.restarted == [0]
    assert [p.name for p in (work / "todo").iterdir()] == ["000001.json"]
    assert (work / "claimed" / f"000000.json.{DEAD}").exists()  # done: not scored again
    assert "process 0 ended (killed by SIGKILL (exit 137)); mini-batch 000001 queued again " \
        "(try 2 of 3); started again" in capsys.readouterr().out


def test_past_its_tries_the_mini_batch_fails_and_its_files_count_as_failed(tmp_path):
    work = work_folder(tmp_path)
    recovery = Recovery(work=work, max_retries=0)
    assert recovery.after_deaths(Launch(-9), done=1) == ""  # (-9: killed, as Popen says it)
    outcome = json.loads((work / "results" / "000001.json").read_text())
    assert (outcome["items"], outcome["returned"]) == (2, 0)
    assert (work / "results" / "000001.txt").read_text() == ""
    assert not list((work / "todo").iterdir())


def test_a_process_that_ended_by_itself_is_not_started_again(tmp_path):
    job = Launch(1, 0)  # init() raised; the other found no work left
    assert Recovery(work=work_folder(tmp_path), max_retries=3).after_deaths(job, 0) == ""
    assert job.restarted == []


def test_deaths_in_a_row_without_a_mini_batch_done_stop_the_run(tmp_path):
    recovery = Recovery(work=work_folder(tmp_path), max_retries=1)
    for _ in range(2):
        assert recovery.after_deaths(Launch(139), done=1) == ""
    assert "3 times without a mini-batch done in between: stopping" in \
        recovery.after_deaths(Launch(139), done=1)
    assert recovery.after_deaths(Launch(139), done=2) == ""  # progress: counted afresh


def test_the_watchdog_stops_the_groups_named_on_its_pipe_after_it_started(monkeypatch):
    """A worker started again is a process group the task's watchdog was not started with:
    the launcher names it on the pipe, and a watchdog that takes over stops it too."""
    import io

    from mlops.runtime import watchdog

    taken = {}
    monkeypatch.setattr(watchdog, "take_over", lambda folder, run_id, **kw: taken.update(kw))
    monkeypatch.setattr(watchdog.time, "sleep", lambda s: None)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"pgid 41\npgid 42\n")))
    assert watchdog.main(["folder", "run", "store", "7"]) == 0
    assert taken["pgids"] == [7, 41, 42]
    taken.clear()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"pgid 41\n" + watchdog.DONE)))
    assert watchdog.main(["folder", "run", "store", "7"]) == 0 and not taken
