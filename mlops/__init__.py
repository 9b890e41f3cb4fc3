"""Local tooling for the Azure ML specs: validation and local runs. Never shipped to Azure.

Entry modules (`python -m mlops.<name>`, what make and the tests call) stay at the top; each
subsystem lives in its own subpackage:

mlops/            run (any job spec), validate (schema, azure-ai-ml and lint layers), serve (the
                  local online endpoint), batch (batch deployments), envs (the layers an
                  environment needs, and their cache), workflow_lint; shared: specs (loading,
                  kinds, line numbers), errors, project ([tool.mlops]: what the tooling knows
                  about this project); exit_with, below (how the entry modules end)
  runtime/        the one local runtime (its __init__: resolve -> snapshot -> environment ->
                  launch -> collect); tasks (Task, and spec -> Task), values (inputs, outputs,
                  substitution), binding (where inputs and outputs live), snapshot, launch
                  (processes, distribution, signals), devices (GPUs per simulated
                  node), watchdog, readonly_inputs, mlflow_runs and
                  mlflow_server (MLflow), uris (the asset map), reuse (pipeline step reuse)
  orchestrators/  sweep (+ sampling, policies), pipeline (+ graph), parallel (+ mltable)
  checks/         lint, lint_assets, skus, overrides (--set / --remove), sdk_findings
                  (azure-ai-ml's verdicts at their file and line)
  environments/   envspec and envfiles (reading environment definitions), requirements and
                  pins (what a layer installs), layers (building them)
  endpoints/      deployment (a deployment spec's kind, code, environment), models (its model and
                  the AZUREML_MODEL_DIR layout), batch_worker (the driver in each batch process),
                  nocode/ (Azure's scoring for MLflow models deployed without code)

Imports point down or sideways, never up: subpackages import `mlops.specs`/`errors`/`project`,
and the runtime imports `mlops.envs`; nothing below imports an orchestrator or an entry module
(except parallel, which shares the batch entry's mini-batch queue).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import NoReturn


def exit_with(main: Callable[[], int | None]) -> NoReturn:
    """`sys.exit(main())` for the entry modules that load MLflow, azure-ai-ml or torch, without
    the garbage collection of shutdown: Python's exit scans every live object for cycles, and
    theirs cost a second or two of CPU per process (a local run of a hello job, runner and job
    together: 9.5 s of CPU, 8.1 s with this). Frozen objects are never scanned; files, runs and
    child processes are closed by main and atexit as before. The shipped code does the same
    (image_classifier.exit_with); the tooling never imports it."""
    try:
        code = main()
    finally:
        gc.freeze()  # on failure too: the traceback is printed the same
    sys.exit(code)
