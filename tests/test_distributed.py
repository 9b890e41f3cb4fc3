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
