"""`azureml_user.parallel_run.EntryScript` in each mini-batch worker (minibatch_worker.py), as
Azure's parallel driver gives it to the entry scripts of parallel jobs and batch deployments:

    from azureml_user.parallel_run import EntryScript
    logger = EntryScript().logger          # one instance a process (a singleton)

What Azure documents of it (how-to-debug-parallel-run-step): `logger` (Azure files it under
logs/user/; here it writes to the step's log, at the job's logging_level), `log_dir`
(logs/user/entry_script_log/<node>/, which the script makes itself: here under the task's
folder, node 0), `agent_name` (the worker's name, "processNNN") and `output_dir` (the job's
output folder: a batch deployment's outputs; a parallel node has no such folder of its own
here, so its task folder's outputs/).

Standard library only, Python 3.7's syntax: copied into each task's top layer as
_mlops_entry_script (environments/activation.py), installed by the worker alone, so no other
job can import `azureml_user`, as on Azure.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from pathlib import Path

LEVEL_VARIABLES = ("AZUREML_PARALLEL_LOGGING_LEVEL", "LOGGING_LEVEL")
_state = {}


def claim_agent(work: Path) -> str:
    """processNNN: the lowest number no other worker of the task holds (an exclusive create)."""
    agents = work / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    number = 0
    while True:
        name = f"process{number:03d}"
        try:
            os.close(os.open(str(agents / name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return name
        except FileExistsError:
            number += 1


def make_logger(agent: str) -> logging.Logger:
    logger = logging.getLogger("azureml_user.parallel_run." + agent)
    level = next((os.environ[v] for v in LEVEL_VARIABLES if os.environ.get(v)), "INFO")
    logger.setLevel(getattr(logging, level.upper(), logging.INFO))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s|%(levelname)s|" + agent + "|%(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    return logger


class EntryScript:
    """One instance a process: every EntryScript() is the first."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            instance = super().__new__(cls)
            work = Path(_state["work"])
            instance.agent_name = _state["agent"]
            instance.log_dir = str(work.parent / "logs" / "user" / "entry_script_log" / "0")
            instance.output_dir = os.environ.get("AZUREML_BI_OUTPUT_PATH") or str(
                work.parent / "outputs")
            instance.logger = make_logger(instance.agent_name)
            cls._instance = instance
        return cls._instance


def install(work: Path) -> None:
    """Make `azureml_user.parallel_run` importable in this worker."""
    _state.update(work=str(work), agent=claim_agent(work))
    package = types.ModuleType("azureml_user")
    package.__path__ = []  # a package, so its submodule imports
    module = types.ModuleType("azureml_user.parallel_run")
    module.EntryScript = EntryScript
    package.parallel_run = module
    sys.modules["azureml_user"] = package
    sys.modules["azureml_user.parallel_run"] = module
