"""Two gloo processes: a failure on one rank reaches every rank within seconds.

Disjoint shards, identical weights and rank-0 tracking are tested end to end through the local
runtime (tests/e2e/test_local_runs.py), which starts the processes as Azure ML and torchrun do.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from support import SMALL_ARCH, built_once

WHY_NO_PROOF = ("two spawned ranks that import torch and the trainer play every failure (about 20 "
                "CPU s): make test-e2e runs them; make test's proof of DDP is "
                "test_local_runs.py's distributed spec (two gloo ranks, disjoint shards, one "
                "set of weights, rank 0 tracks)")
FAILURES = {"full disk": (OSError, (28, "No space left on device")),
            "onnx exporter": (RuntimeError, ("ONNX export failed: unsupported operator",)),
            "mlflow": ("mlflow", ("RESOURCE_DOES_NOT_EXIST: the registry is gone",))}


def _finalize_failures(rank: int, ports: list[int], results) -> None:
    """For each kind of failure in turn, rank 0's finalize fails as that failure would make it
    (one process group per kind)."""
    from mlflow.exceptions import MlflowException

    import image_classifier.train as trainer
    from image_classifier import distributed

    for failure, port in zip(FAILURES, ports, strict=False):
        ctx = _join(rank, port)
        started = time.monotonic()
        kind, args = FAILURES[failure]
        kind = MlflowException if kind == "mlflow" else kind

        def fail(*ignored, kind=kind, args=args, **keywords):
            raise kind(*args)

        trainer.finalize = fail
        try:
            trainer.finalize_on_rank0(None, ctx, model=None, state=None, bundle=None, tracker=None)
            outcome = "returned"
        except Exception as err:  # noqa: BLE001 - the test reports whatever each rank raised
            outcome = f"{type(err).__name__}: {err}"
        finally:
            distributed.cleanup()
        results.put((f"{failure}|{rank}", (outcome, time.monotonic() - started)))


def _bad_sample(rank: int, port: int, results, data: str) -> None:
    """Both ranks train one epoch over data in which one file breaks after the check."""
    import torch

    from image_classifier import distributed
    from image_classifier.config import TrainConfig
    from image_classifier.engine import train_one_epoch
    from image_classifier.train import setup

    ctx = _join(rank, port)
    started = time.monotonic()
    cfg = TrainConfig(data=data, output_dir=f"{data}/../out-{rank}", arch=SMALL_ARCH,
                      weights="none", image_size=32, batch_size=4, cache_images_mb=0)
    run = setup(cfg, ctx)  # the trainer's own setup: every file checked on both ranks
    torch.distributed.barrier()  # both ranks have checked every file (a slow rank 1 would
    if rank == 0:                # otherwise find the broken file in its check)
        open(run.bundle.train.samples[5][0], "wb").close()
    torch.distributed.barrier()
    run.ddp = torch.nn.parallel.DistributedDataParallel(run.model)
    try:
        train_one_epoch(run, cfg, ctx)
        outcome = "returned"
    except Exception as err:  # noqa: BLE001
        outcome = f"{type(err).__name__}: {err}"
    finally:
        distributed.cleanup()
    results.put((f"bad sample|{rank}", (outcome, time.monotonic() - started)))


def _join(rank: int, port: int):
    import torch

    from image_classifier import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    return distributed.setup()


def _scenarios(rank: int, ports: list[int], results, data: str) -> None:
    """One of two gloo processes: every scenario, one after the other (starting a process that
    imports the trainer costs seconds of CPU)."""
    import gc

    _finalize_failures(rank, ports, results)
    _bad_sample(rank, ports[-1], results, data)
    gc.freeze()  # a spawned process exits through Python's shutdown: nothing left to scan


def _free_ports(count: int) -> list[int]:
    """Distinct free ports: every socket stays bound until all are chosen."""
    import contextlib
    import socket

    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _two_ranks(target, items: int, *args, timeout: float = 60) -> dict:
    """Run target(rank, ports, results, *args) in two spawned processes with a free port for
    each of the `items` (key, value) pairs each puts in results."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ports = _free_ports(items)
    workers = [context.Process(target=target, args=(r, ports, results, *args)) for r in (0, 1)]
    for worker in workers:
        worker.start()
    try:
        return dict(results.get(timeout=timeout) for _ in range(items * len(workers)))
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()


@pytest.fixture(scope="session")
def outcomes(tiny_data, tmp_path_factory) -> dict:
    """What each rank of one pair of processes saw in every scenario: {"scenario|rank":
    [what it raised, seconds from joining the group]}."""

    def play(folder: Path) -> None:
        data = shutil.copytree(tiny_data, folder / "data")  # one file of it gets broken
        found = _two_ranks(_scenarios, len(FAILURES) + 1, str(data), timeout=180)
        (folder / "outcomes.json").write_text(json.dumps(found))

    folder = built_once(tmp_path_factory, "rank-outcomes", play)
    return json.loads((folder / "outcomes.json").read_text())


def test_a_rank0_failure_of_any_kind_reaches_every_rank_within_seconds(outcomes):
    for failure, (_, args) in FAILURES.items():
        (rank0, seconds0), (rank1, seconds1) = outcomes[f"{failure}|0"], outcomes[f"{failure}|1"]
        assert max(seconds0, seconds1) < 20, (failure, seconds0, seconds1)
        assert args[-1] in rank0, (failure, rank0)
        assert rank1.startswith("ModelError: rank 0 failed to write the model"), (failure, rank1)
        assert args[-1] in rank1, (failure, rank1)


def test_a_bad_file_on_one_rank_stops_every_rank_with_its_name(outcomes):
    for rank in (0, 1):
        outcome, seconds = outcomes[f"bad sample|{rank}"]
        assert outcome.startswith("BadSampleError: "), outcomes
        assert "is not a readable image" in outcome and seconds < 60
