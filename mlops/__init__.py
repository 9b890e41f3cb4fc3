"""The local runtime (the azml tool): validation, local runs and endpoints. Never shipped to Azure.

Front doors (`azml`, `python -m mlops.<name>`: what make and the tests call) are thin: they
parse the command line, call one engine, and turn its outcome into an exit code (errors.py's
rule). The rooms below hold the engines, in this order, bottom to top: a room imports only
the rooms above it in this list (function-level imports included; tests/unit/test_imports.py):

shared: errors, specs (loading, kinds, line numbers), project (the repository, its settings,
        its state folder and MLflow store), yaml_limits; exit_with / exit_code below
  workspace/      the local workspace: records, store, references (`azureml:` names and URIs),
                  jobs (finished jobs by name), mlflow_models (MLflow's registry taken in)
  environments/   envspec, envfiles, dockerfiles, shell_words and build_context (reading
                  environment definitions, a Dockerfile's files through its COPY lines; steps:
                  a Dockerfile's installs in order, as a plan's lines carry them), requirements and
                  pins (what a layer installs), resolve and closures (Azure's resolution of an
                  environment), interpreters (the Python an environment asks for), own_python
                  (an environment of that interpreter), layers (building them), activation
                  (what a task runs in), cache (listing and removing them), catalog/ (the
                  curated environments and the tool's stand-ins)
  runtime/        the one local runtime (engine: resolve -> snapshot -> environment -> launch ->
                  collect, run_step, start_service) and everything a started process needs; the
                  rooms above import only its surface, `from mlops.runtime import X` (its __init__'s
                  __all__, grouped by stage, loaded on first use). Below it: tasks (Task,
                  TaskSource, spec -> Task), records (status.json and run.json, Status), values,
                  binding, snapshot, placement (distribution), launch (the one launcher: processes,
                  signals), environ (a process's variables), service (a server left running),
                  devices, watchdog, readonly_inputs, failures, mlflow_runs (a job's MLflow runs)
                  over mlflow_rest (the warm tracking server's API) or mlflow_store (the store
                  itself), mlflow_server and mlflow_serve (that server, kept warm per store;
                  run_history and model_uploads: the Azure calls it answers), uris (the asset map),
                  reuse (step reuse: keyparts, keydiff and earlier say why a step ran), selection
                  (--from, --only), job (a checked job spec, its run folder and run.json), run_setup
                  (the one set-up of a run: signals, lock, name, run.json), minibatch and
                  minibatch_worker (the mini-batch driver of batch deployments and parallel nodes),
                  mltable and mltable_worker (tables read by Azure's mltable package)
  automl/         translate (an AutoML job or node -> the command that runs it), standin/ (the
                  tabular stand-in: FLAML in its own environment), vision/ (Azure's image runner)
  checks/         validation (schema, azure-ai-ml and lint layers), prepare (a job spec as
                  az ml job create checks it), lint, lint_assets, skus, overrides (--set /
                  --remove), sdk_findings (azure-ai-ml's verdicts at their file and line),
                  verdicts (a passed spec's verdict kept while what it read holds)
  orchestrators/  jobs (a job spec -> its kind's runner), sweep (+ sampling, policies), pipeline
                  (+ graph, subset: each step's reuse rules, --from / --only planned), parallel
  endpoints/      deployment (a deployment spec's kind, code, environment), models (its model and
                  the AZUREML_MODEL_DIR layout), online (the local online endpoint),
                  batch_deployment (a batch deployment over a folder), batch_run (its job
                  in the run set-up), nocode/ (Azure's scoring
                  for MLflow models deployed without code)
  api/            the public surface: Session (each method an az ml verb's local twin), jobs
                  in the background, their views as az prints them, asset registration,
                  online endpoints, batch_endpoints and batch_jobs (invoke, list-jobs)
  cli/            the azml command: az ml's verbs and arguments, -o and --query
front doors: azml, run, validate, serve, batch, assets, envs, workflow_lint
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import NoReturn

from mlops.errors import LocalError, machine_faults_raised


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


def exit_code(call: Callable[[], int]) -> int:
    """The front doors' one exit-code rule: the engine's own code (a job's, a batch run's, a
    server's status); INPUT_ERROR with the message for a spec or input error; 128 + the signal
    number when interrupted; MACHINE_ERROR with what to do when the machine stopped it."""
    try:  # an OSError that is the machine's fault (a full disk): a MachineError, no traceback
        return machine_faults_raised(call)
    except LocalError as err:  # either kind: its message, its exit code (mlops/errors.py)
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as err:
        return 128 + getattr(err, "signum", 2)
