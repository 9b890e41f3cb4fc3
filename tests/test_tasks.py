"""Spec -> Task, the pure builders under every local run (mlops/runtime/tasks.py)."""

import pytest

from mlops.errors import LocalRunError
from mlops.runtime.tasks import command_task, time_limit


@pytest.mark.parametrize("value", ["soon", "PT1H", "0", "-5"])
def test_a_limits_timeout_that_is_not_a_positive_number_of_seconds_is_refused(value):
    with pytest.raises(LocalRunError, match=r"^job\.limits\.timeout: .*seconds"):
        time_limit({"limits": {"timeout": value}}, "job")


def test_limits_timeout_is_seconds_and_no_limit_when_unset(tmp_path):
    assert time_limit({"limits": {"timeout": 7200}}, "job") == 7200.0
    assert time_limit({"limits": {"timeout": "90"}}, "job") == 90.0
    assert time_limit({"limits": {}}, "job") == time_limit({"limits": None}, "job") == 0.0
    data = {"command": "true", "limits": {"timeout": 5}}
    task = command_task(data, tmp_path, tmp_path / "run", None, "job", "job", "Default")
    assert task.timeout == 5.0
