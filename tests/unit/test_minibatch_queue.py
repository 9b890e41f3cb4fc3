"""The mini-batch queue (mlops/runtime/minibatch.py and its worker): the workers start before
the input is read, so a worker waits while the queue is open, takes each mini-batch once it is
written whole, and stops once the queue is complete and empty."""

from __future__ import annotations

import threading

from support import until

from mlops.runtime import minibatch
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
