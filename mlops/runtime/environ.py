"""The variables every process the runtime starts gets: the one place they are built.

This shell's variables, less what would leak another run's identity (MLflow's, Azure's, a
launcher's ranks); those that select the environment's layers (the environment stage's
Activation); Azure's AZURE_ML_INPUT_/OUTPUT_ paths; the
read-only places (the data inputs, a mounted model) and the output folders (mounted ones
marked); then the spec's own environment_variables,
which win, as on Azure. A job also gets its MLflow run's variables (tracking_env), and the
local authority its environment trusts for the tracking host's HTTPS (trust_store.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from mlops.environments.activation import Activation
from mlops.project import RESOURCE_GROUP, SUBSCRIPTION, WORKSPACE_NAME
from mlops.runtime import readonly_inputs
from mlops.runtime.binding import mounted_outputs, read_only
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.tasks import Task
from mlops.runtime.trust_store import VARIABLE as TRUSTED_CA

# what Azure sets itself, and what would make this shell's modules importable in the job, which
# Azure's image does not have (PYTHONPATH=src in a user's shell: a job that fails on Azure for
# want of a module would pass here)
DROPPED_ENV = re.compile(r"^(MLFLOW_|AZUREML_|AZURE_ML_|OMPI_COMM_WORLD_|MLOPS_DEBUG|TF_CONFIG$|"
                         r"MLOPS_LOCAL_CA$|RANK$|LOCAL_RANK$|WORLD_SIZE$|NODE_RANK$|MASTER_ADDR$|"
                         r"MASTER_PORT$|LOCAL_WORLD_SIZE$|PYTHONPATH$|PYTHONHOME$|PYTHONUSERBASE$|"
                         r"PYTHONSTARTUP$|PYTHONPLATLIBDIR$)")


def process_env(task: Task, activation: Activation, *, inputs: dict[str, str | None],
                outputs: dict[str, str], extra: dict[str, str] | None = None) -> dict[str, str]:
    """The variables Azure sets for the task's processes, over this shell's, under the spec's
    own; `extra`: what the runtime adds for this kind (a job's MLflow run) before the spec's."""
    env = {k: v for k, v in os.environ.items() if not DROPPED_ENV.match(k)}
    env.update(activation.variables)
    env.update(extra or {})
    env.update({f"AZURE_ML_INPUT_{k}": v for k, v in inputs.items() if v is not None})
    env.update({f"AZURE_ML_OUTPUT_{k}": v for k, v in outputs.items()})
    places = read_only(task.inputs, task.folder) + [str(p) for p in task.read_only]
    env[readonly_inputs.VARIABLE] = os.pathsep.join(places)
    env[readonly_inputs.OUTPUTS] = os.pathsep.join(outputs.values())
    env[readonly_inputs.MOUNTED] = os.pathsep.join(mounted_outputs(task.outputs, outputs))
    if task.assets[0]:  # what an SDK v1 script's workspace calls are told (azureml_run.py)
        env["MLOPS_ASSET_FILE"], env["MLOPS_STAND_INS"] = task.assets[0], json.dumps(
            task.assets[1])
    env.update(task.env_vars)
    return env


def tracking_env(task: Task, tracking: Tracking, run_id: str, wd: Path, *,
                 uri: str) -> dict[str, str]:
    """A job's MLflow run, as Azure hands it to the job (azureml-mlflow reads the same names):
    `uri` the store it tracks to (Tracking.serve, in the launch stage)."""
    experiment = tracking.experiment_id(task.experiment)
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": run_id,
           "MLFLOW_EXPERIMENT_NAME": task.experiment, "MLFLOW_EXPERIMENT_ID": experiment,
           "AZUREML_RUN_ID": run_id, "AZUREML_EXPERIMENT_ID": experiment,
           "AZUREML_ARM_PROJECT_NAME": task.experiment, "AZUREML_ARM_SUBSCRIPTION": SUBSCRIPTION,
           "AZUREML_ARM_RESOURCEGROUP": RESOURCE_GROUP,
           "AZUREML_ARM_WORKSPACE_NAME": WORKSPACE_NAME,
           "AZUREML_CR_EXECUTION_WORKING_DIR_PATH": str(wd),
           # MLflow prints a link to every run it ends on an http store; Azure's prints none
           "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
    ca = tracking.trusted_ca()
    if ca:  # the environment trusts the tracking host's HTTPS, as Azure's image its service's
        env[TRUSTED_CA] = ca
    return env
