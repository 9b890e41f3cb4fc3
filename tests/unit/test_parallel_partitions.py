"""A parallel job's `partition_keys`: one mini-batch for each value of the keys (mini_batch_size
aside), and run(mini_batch, mini_batch_context) is given the batch's partition_key_value, as
Azure's parallel job gives them (many-models training reads its store and brand there)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from support import lazy

from mlops.errors import LocalRunError
from mlops.orchestrators import parallel
from mlops.runtime.minibatch_worker import MiniBatchContext, score, score_item
from mlops.runtime.mltable import partition_batches

# pandas (and pyarrow: 0.8 s of CPU) loads with the first test that needs it, in MLflow's worker
# (tests/unit/conftest.py HEAVY), which imports it anyway
pd = lazy("pandas")


def test_each_value_of_the_keys_is_one_mini_batch_with_its_values(tmp_path):
    frame = pd.DataFrame({"Store": [1001, 1000, 1001, 1000, 1000],
                          "Brand": ["tropicana", "dominicks", "tropicana", "tropicana",
                                    "dominicks"],
                          "Revenue": [1.0, 2.0, 3.0, 4.0, 5.0]})
    batches = partition_batches(frame, ["Store", "Brand"], tmp_path)
    assert [b["partition"] for b in batches] == [
        {"Store": 1000, "Brand": "dominicks"}, {"Store": 1000, "Brand": "tropicana"},
        {"Store": 1001, "Brand": "tropicana"}]
    assert [b["rows"] for b in batches] == [2, 1, 2]
    json.dumps(batches)  # numpy's scalars are Python's: the queue writes them as JSON
    first = pd.read_csv(batches[0]["table"])
    assert list(first.columns) == ["Store", "Brand", "Revenue"]  # the keys' columns stay
    assert first["Revenue"].tolist() == [2.0, 5.0]


def test_run_gets_the_context_where_it_takes_two_arguments_and_only_then():
    seen: list[object] = []
    two = SimpleNamespace(run=lambda batch, context: seen.append(context.partition_key_value)
                          or ["row"])
    one = SimpleNamespace(run=lambda batch: seen.append(len(batch)) or ["row"])
    context = MiniBatchContext({"Store": 1000}, 3)
    assert score(two, ["a"], 0, 5, context=context)["returned"] == 1
    assert score(one, ["a", "b"], 0, 5, context=context)["returned"] == 1
    assert seen == [{"Store": 1000}, 2]


def test_a_claimed_mini_batch_carries_its_partition_and_index_to_run(tmp_path):
    (tmp_path / "results").mkdir()
    table = tmp_path / "000004.csv"
    pd.DataFrame({"Store": [1000], "Revenue": [2.5]}).to_csv(table, index=False)
    item = tmp_path / "000004.json.123"
    item.write_text(json.dumps({"table": str(table), "rows": 1,
                                "types": {"Store": "int64", "Revenue": "float64"},
                                "partition": {"Store": 1000}}))
    got: list[tuple[dict, int, float]] = []

    def run(frame, context):
        got.append((context.partition_key_value, context.minibatch_index,
                    float(frame["Revenue"].iloc[0])))
        return []

    score_item(SimpleNamespace(run=run), item,
               SimpleNamespace(work=tmp_path, retries=0, timeout=5))
    assert got == [({"Store": 1000}, 4, 2.5)]


@pytest.mark.parametrize("keys", ["Store,Brand", ["Store", 3]])
def test_partition_keys_that_are_not_a_list_of_names_are_refused(keys):
    with pytest.raises(LocalRunError, match="partition_keys: a list of column names"):
        parallel.partition_keys({"partition_keys": keys}, "jobs.train")
    assert parallel.partition_keys({}, "jobs.train") == []
