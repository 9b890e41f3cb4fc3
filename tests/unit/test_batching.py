"""Dynamic batching in the online scoring path: lanes, merging, sharing, errors; no model needed."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from support import lazy, until

from image_classifier.score_config import ScoreConfig

# the scoring module (NumPy and Pillow) loads with the first test (support.lazy)
predict = lazy("image_classifier.predict")


class Recorder:
    """A stand-in for Service: each row is its image's id; every pass is recorded. `hold`: a
    pass waits for it; `meet`: a pass waits until that many passes run at once."""

    def __init__(self, hold: threading.Event | None = None, fail_on: int | None = None,
                 meet: int = 0):
        self.passes: list[tuple[str, list[int]]] = []
        self.alone: list[bool] = []
        self.hold, self.fail_on = hold, fail_on
        self.meeting = threading.Barrier(meet, timeout=10) if meet else None
        self.lock = threading.Lock()

    def probabilities(self, batch: np.ndarray, alone: bool = False) -> np.ndarray:
        ids = [int(v) for v in batch[:, 0]]
        with self.lock:
            self.passes.append((threading.current_thread().name, ids))
            self.alone.append(alone)
        if self.hold is not None:
            self.hold.wait(timeout=10)
        if self.meeting is not None:
            self.meeting.wait()  # BrokenBarrierError if the passes never ran side by side
        if self.fail_on in ids:
            raise RuntimeError("forward pass failed")
        return batch.copy()


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.float32).reshape(-1, 1)


def idle(batcher: predict.Batcher) -> None:
    until(lambda: batcher.idle == batcher.lanes, 10, "every lane idle")


def in_threads(batcher: predict.Batcher, service: Recorder, batches: list[np.ndarray],
               hold: threading.Event | None = None, ready=None) -> list:
    """The first request starts a pass (held there when `hold`), the others queue behind it,
    then, once `ready()` holds too, the hold is let go; each request's result (or error), in
    order."""
    results: list = [None] * len(batches)

    def call(index: int) -> None:
        try:
            results[index] = batcher(batches[index])
        except RuntimeError as err:
            results[index] = err

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(batches))]
    threads[0].start()
    until(lambda: service.passes, 10, "the first request's pass")
    for number, thread in enumerate(threads[1:], start=1):  # each queued before the next
        thread.start()
        until(lambda n=number: len(batcher.waiting) + len(service.passes) - 1 >= n, 10,
              f"request {number} queued or taken")
    if ready is not None:
        until(ready, 10, "the state the test sets up")
    if hold is not None:
        hold.set()
    for thread in threads:
        thread.join(timeout=20)
    return results


def test_a_lone_request_is_shared_by_the_idle_lanes_and_keeps_its_order():
    service = Recorder(meet=2)  # its two passes must run side by side, one per lane
    batcher = predict.Batcher(service, lanes=2)
    idle(batcher)
    rows = batcher(ids(*range(8)))
    assert rows[:, 0].tolist() == list(range(8))
    assert sorted(len(p) for _, p in service.passes) == [4, 4]
    assert len({lane for lane, _ in service.passes}) == 2
    assert service.alone == [False, False]  # each of the two passes shares the cores


def test_a_pass_with_the_other_lanes_idle_runs_alone_on_every_core():
    service = Recorder()
    batcher = predict.Batcher(service, lanes=2)
    idle(batcher)
    batcher(ids(0))
    assert service.alone == [True]
    service.alone.clear()
    service.passes.clear()
    hold = threading.Event()
    service.hold = hold  # the first pass blocks; the next one runs beside it, not alone
    idle(batcher)
    in_threads(batcher, service, [ids(1), ids(2)], hold,
               ready=lambda: len(service.passes) == 2)  # the second taken beside the first
    assert service.alone == [True, False]


def test_waiting_requests_are_merged_into_one_pass_and_each_gets_its_rows():
    hold = threading.Event()
    service = Recorder(hold)
    batcher = predict.Batcher(service, lanes=1)
    results = in_threads(batcher, service, [ids(0), ids(1, 2), ids(3), ids(4, 5, 6)], hold)
    assert [r[:, 0].tolist() for r in results] == [[0], [1, 2], [3], [4, 5, 6]]
    assert [p for _, p in service.passes] == [[0], [1, 2, 3, 4, 5, 6]]


def test_a_pass_never_exceeds_max_images():
    hold = threading.Event()
    service = Recorder(hold)
    batcher = predict.Batcher(service, max_images=3, lanes=1)
    results = in_threads(batcher, service, [ids(0), ids(1, 2), ids(3, 4), ids(5)], hold)
    assert [r[:, 0].tolist() for r in results] == [[0], [1, 2], [3, 4], [5]]
    assert all(len(p) <= 3 for _, p in service.passes)


def test_a_failed_pass_fails_its_requests_only_and_the_lanes_keep_serving():
    service = Recorder(fail_on=1)
    batcher = predict.Batcher(service, lanes=2)
    with pytest.raises(RuntimeError, match="forward pass failed"):
        batcher(ids(0, 1))
    assert batcher(ids(2, 3))[:, 0].tolist() == [2, 3]


@pytest.mark.parametrize("environ, cores, expected", [
    ({}, 2, (2, 1)),                                   # a one-thread lane per core
    ({}, 1, (1, 1)),
    ({"WORKER_COUNT": "2"}, 4, (2, 1)),                # the worker's share of the cores
    ({"WORKER_COUNT": "8"}, 2, (1, 1)),
    ({"SCORE_LANES": "1"}, 4, (1, 4)),                 # one pass on every core
    ({"SCORE_LANES": "2", "SCORE_THREADS": "3"}, 4, (2, 3)),
    ({"SCORE_BATCHING": "0"}, 4, (1, 4)),              # each request runs its own pass
])
def test_lanes_and_threads_follow_the_cores_and_the_settings(environ, cores, expected):
    assert ScoreConfig.from_env(environ).lanes_and_threads(cores) == expected
