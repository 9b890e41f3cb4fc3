"""Two processes under torchrun with gloo: disjoint shards, identical weights, rank-0 tracking."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import train_args
from mlflow.tracking import MlflowClient


@pytest.mark.slow
def test_two_processes_shard_data_and_agree_on_weights(tiny_data, tmp_path, mlflow_store):
    out = tmp_path / "out"
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "LOG_LEVEL": "DEBUG", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "image_classifier.train",
         *train_args(tiny_data, out, epochs=2)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = result.stdout + result.stderr

    for epoch in (1, 2):
        shards = {}
        for rank in (0, 1):
            match = re.search(rf"epoch {epoch} rank {rank} sample indices (\[.*?\])", log)
            shards[rank] = ast.literal_eval(match.group(1))
        assert set(shards[0]).isdisjoint(shards[1])
        assert sorted(shards[0] + shards[1]) == list(range(48))  # 48 train images, none dropped
    digests = dict(re.findall(r"rank (\d) final weights digest (\w+)", log))
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"]

    client = MlflowClient(mlflow_store)
    runs = client.search_runs([client.get_experiment_by_name("tests").experiment_id])
    assert len(runs) == 1, "only rank 0 tracks"
    history = client.get_metric_history(runs[0].info.run_id, "best_val_acc")
    assert [m.step for m in history] == [1, 2]
    assert (out / "model" / "model.pt").is_file()


def _finalize_worker(rank: int, port: int, results) -> None:
    """One of two gloo processes; rank 0's finalize fails as a full disk would make it."""
    import image_classifier.train as trainer
    from image_classifier import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))
    ctx = distributed.setup()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    trainer.finalize = full_disk
    try:
        trainer.finalize_on_rank0(None, ctx, None, None, None, None)
        results.put((rank, "returned"))
    except Exception as err:  # noqa: BLE001 - the test reports whatever each rank raised
        results.put((rank, f"{type(err).__name__}: {err}"))
    finally:
        distributed.cleanup()


def test_a_rank0_failure_reaches_every_rank_instead_of_hanging():
    import multiprocessing
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_finalize_worker, args=(r, port, results))
               for r in (0, 1)]
    for worker in workers:
        worker.start()
    outcome = dict(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    assert "No space left on device" in outcome[0]
    assert outcome[1].startswith("ModelError: rank 0 failed to write the model")
