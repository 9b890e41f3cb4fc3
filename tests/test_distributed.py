"""Two processes under torchrun with gloo: disjoint shards, identical weights, rank-0 tracking."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
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


FAILURES = {"full disk": (OSError, (28, "No space left on device")),
            "onnx exporter": (RuntimeError, ("ONNX export failed: unsupported operator",)),
            "mlflow": ("mlflow", ("RESOURCE_DOES_NOT_EXIST: the registry is gone",))}


def _finalize_worker(rank: int, port: int, results, failure: str) -> None:
    """One of two gloo processes; rank 0's finalize fails as `failure` would make it."""
    import image_classifier.train as trainer
    from image_classifier import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))
    ctx = distributed.setup()
    kind, args = FAILURES[failure]
    if kind == "mlflow":
        from mlflow.exceptions import MlflowException as kind

    def fail(*ignored):
        raise kind(*args)

    trainer.finalize = fail
    try:
        trainer.finalize_on_rank0(None, ctx, None, None, None, None)
        results.put((rank, "returned"))
    except Exception as err:  # noqa: BLE001 - the test reports whatever each rank raised
        results.put((rank, f"{type(err).__name__}: {err}"))
    finally:
        distributed.cleanup()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _two_ranks(target, *args, timeout: float = 60) -> dict:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    workers = [context.Process(target=target, args=(r, port, results, *args)) for r in (0, 1)]
    for worker in workers:
        worker.start()
    try:
        return dict(results.get(timeout=timeout) for _ in workers)
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_rank0_failure_of_any_kind_reaches_every_rank_within_seconds(failure):
    started = time.monotonic()
    outcome = _two_ranks(_finalize_worker, failure)
    assert time.monotonic() - started < 45
    assert FAILURES[failure][1][-1] in outcome[0]
    assert outcome[1].startswith("ModelError: rank 0 failed to write the model")
    assert FAILURES[failure][1][-1] in outcome[1]


def _bad_sample_worker(rank: int, port: int, results, data: str) -> None:
    """Both ranks train one epoch over data in which one file breaks after the check."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    from image_classifier import distributed
    from image_classifier.data import build_datasets
    from image_classifier.engine import train_one_epoch
    from image_classifier.loading import collate
    from image_classifier.model import build_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    ctx = distributed.setup()
    bundle = build_datasets(data, 32)
    torch.distributed.barrier()  # both ranks have checked every file (a slow rank 1 would
    if rank == 0:                # otherwise find the broken file in its check)
        open(bundle.train.samples[5][0], "wb").close()
    torch.distributed.barrier()
    sampler = DistributedSampler(bundle.train, 2, rank, shuffle=False, drop_last=True)
    loader = DataLoader(bundle.train, batch_size=4, sampler=sampler, collate_fn=collate)
    model = torch.nn.parallel.DistributedDataParallel(build_model("resnet18", 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        train_one_epoch(model, loader, optimizer, torch.nn.CrossEntropyLoss(), ctx)
        results.put((rank, "returned"))
    except Exception as err:  # noqa: BLE001
        results.put((rank, f"{type(err).__name__}: {err}"))
    finally:
        distributed.cleanup()


def test_a_bad_file_on_one_rank_stops_every_rank_with_its_name(tiny_data, tmp_path):
    import shutil

    data = shutil.copytree(tiny_data, tmp_path / "d")
    started = time.monotonic()
    outcome = _two_ranks(_bad_sample_worker, str(data), timeout=120)
    assert time.monotonic() - started < 100
    for rank in (0, 1):
        assert outcome[rank].startswith("BadSampleError: "), outcome
        assert "is not a readable image" in outcome[rank]
