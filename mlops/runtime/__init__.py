"""The one local runtime: every job, trial, step, Spark job, AutoML run, batch worker and
endpoint is started here (engine.py: resolve -> snapshot -> environment -> launch -> collect).

Its public surface is this package: a room above it imports `from mlops.runtime import X`,
X one of `__all__`, never a module below (tests/unit/test_imports.py holds it). Grouped by the
stage each name serves:

  the engine    Runtime (what a run's tasks share), Task and TaskSource (one process group
                and where its spec came from), run_task, start_task + finish_task (a sweep's
                trials side by side), run_step (a pipeline step, reused when it may be),
                Running, Result; start_service, Service, running, alive, stop_service (a
                server left running: endpoints)
  resolve       a spec -> a Task: command_task, spark_task, load_component, experiment_name,
                code_path, include_paths, variables, Workdir; values: Value, OutputSpec,
                DATA_TYPES, input_value, output_spec, job_inputs, job_outputs, fill_scope,
                render_literal; the asset map: AssetMap, is_remote, lookup, candidates, REGISTER; a
                checked job spec: Job; placement: Placement; steps picked and reused:
                Selection, Address, Choice, add_selection_arguments, StepRules, Decision, DONE,
                deterministic, link_step
  snapshot      merged (code: with its additional_includes), checked_code (what create
                uploads), extract_archive (a zip, checked), safe_root (a run folder a shell
                keeps whole)
  environment   (mlops/environments/ builds it; DebugRequest, add_debug_arguments and
                trial_addresses pick the one process a debugger attaches to)
  launch        usable_cores, free_port; signals: install_signal_handlers,
                restore_signal_handlers, check_interrupt, interruptible, signals_held;
                guarding (the watchdog of a sweep or pipeline run); the mini-batch driver:
                Batches, Listing, list_files, Limits, Retry, Tally, Driven, drive_batches,
                BatchHooks, batch_processes, worker_command, write_rows, read_table, row_batches,
                partition_batches, table_files
  collect       Status, RunStatus, TaskRecord, STATUS_FILE (status.json); RunRecord, JobStatus
                and the run folder's run.json: run_folder, locked, job_name, read_record,
                write_record, update_record, end_record; outputs: slot, publish; MLflow:
                Tracking (a run's MLflow runs), Server (the warm tracking server),
                run_artifacts (a job's default artifacts output); the one
                run set-up of jobs and batch jobs (run_setup.py): RunSetup, guarded_run,
                run_in_folder, claim_job_name, and what run.json records: Identity,
                BATCH_JOB, folder_job_name

A few names are not their module's own (run_task is engine.run, extract_archive is
archives.extract, ...): the table below says where each comes from. Importing this package
loads none of its modules (nor MLflow, azure-ai-ml or torch): each name is loaded on first use
(PEP 562), so a process that needs records.py alone (the watchdog) loads only that.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlops.runtime.aliases import safe_root
    from mlops.runtime.archives import extract as extract_archive
    from mlops.runtime.binding import publish, slot
    from mlops.runtime.debugging import DebugRequest, trial_addresses
    from mlops.runtime.debugging import add_arguments as add_debug_arguments
    from mlops.runtime.engine import Result, Running, Runtime, run_step, start_service
    from mlops.runtime.engine import finish as finish_task
    from mlops.runtime.engine import run as run_task
    from mlops.runtime.engine import start as start_task
    from mlops.runtime.job import (
        BATCH_JOB,
        Identity,
        Job,
        end_record,
        folder_job_name,
        job_name,
        locked,
        read_record,
        run_folder,
        update_record,
        write_record,
    )
    from mlops.runtime.launch import (
        check_interrupt,
        free_port,
        install_signal_handlers,
        interruptible,
        restore_signal_handlers,
        signals_held,
        usable_cores,
    )
    from mlops.runtime.minibatch import (
        Batches,
        Driven,
        Limits,
        Listing,
        Retry,
        Tally,
        list_files,
        worker_command,
        write_rows,
    )
    from mlops.runtime.minibatch import Hooks as BatchHooks
    from mlops.runtime.minibatch import drive as drive_batches
    from mlops.runtime.minibatch import processes as batch_processes
    from mlops.runtime.mlflow_runs import Tracking
    from mlops.runtime.mlflow_server import Server
    from mlops.runtime.mlflow_store import run_artifacts
    from mlops.runtime.mltable import partition_batches, read_table, row_batches, table_files
    from mlops.runtime.placement import Placement
    from mlops.runtime.records import STATUS as STATUS_FILE
    from mlops.runtime.records import JobStatus, RunRecord, RunStatus, Status, TaskRecord
    from mlops.runtime.reuse import DONE, Decision, StepRules, deterministic, link_step
    from mlops.runtime.run_setup import Setup as RunSetup
    from mlops.runtime.run_setup import claim as claim_job_name
    from mlops.runtime.run_setup import guarded as guarded_run
    from mlops.runtime.run_setup import run_in_folder
    from mlops.runtime.selection import Address, Choice, Selection
    from mlops.runtime.selection import add_arguments as add_selection_arguments
    from mlops.runtime.service import Service, alive, running, stop_service
    from mlops.runtime.snapshot import checked_code, merged
    from mlops.runtime.spark import spark_task
    from mlops.runtime.tasks import (
        Task,
        TaskSource,
        Workdir,
        code_path,
        command_task,
        experiment_name,
        include_paths,
        load_component,
        variables,
    )
    from mlops.runtime.uris import REGISTER, AssetMap, candidates, is_remote, lookup
    from mlops.runtime.values import (
        DATA_TYPES,
        OutputSpec,
        Value,
        fill_scope,
        input_value,
        job_inputs,
        job_outputs,
        output_spec,
        render_literal,
    )
    from mlops.runtime.watchdog import guarding

# name -> the module below that defines it ("module:its own name" where the surface renames it)
_WHERE: dict[str, str] = {
    "safe_root": "aliases", "extract_archive": "archives:extract",
    "publish": "binding", "slot": "binding",
    "DebugRequest": "debugging", "add_debug_arguments": "debugging:add_arguments",
    "trial_addresses": "debugging",
    **dict.fromkeys(("Result", "Running", "Runtime", "run_step", "start_service"), "engine"),
    "run_task": "engine:run", "start_task": "engine:start", "finish_task": "engine:finish",
    **dict.fromkeys(("Job", "end_record", "job_name", "locked", "read_record", "run_folder",
                     "update_record", "write_record", "Identity", "BATCH_JOB",
                     "folder_job_name"), "job"),
    "RunSetup": "run_setup:Setup", "claim_job_name": "run_setup:claim",
    "guarded_run": "run_setup:guarded", "run_in_folder": "run_setup",
    **dict.fromkeys(("check_interrupt", "free_port", "install_signal_handlers",
                     "interruptible", "restore_signal_handlers", "signals_held",
                     "usable_cores"), "launch"),
    **dict.fromkeys(("Batches", "Driven", "Limits", "Listing", "Retry", "Tally", "list_files",
                     "worker_command", "write_rows"), "minibatch"),
    "drive_batches": "minibatch:drive", "batch_processes": "minibatch:processes",
    "BatchHooks": "minibatch:Hooks",
    "Tracking": "mlflow_runs", "Server": "mlflow_server", "run_artifacts": "mlflow_store",
    "read_table": "mltable", "row_batches": "mltable", "table_files": "mltable",
    "partition_batches": "mltable",
    "Placement": "placement",
    "STATUS_FILE": "records:STATUS",
    **dict.fromkeys(("JobStatus", "RunRecord", "RunStatus", "Status", "TaskRecord"), "records"),
    **dict.fromkeys(("DONE", "Decision", "StepRules", "deterministic", "link_step"), "reuse"),
    **dict.fromkeys(("Address", "Choice", "Selection"), "selection"),
    "add_selection_arguments": "selection:add_arguments",
    **dict.fromkeys(("Service", "alive", "running", "stop_service"), "service"),
    "merged": "snapshot", "checked_code": "snapshot", "spark_task": "spark",
    **dict.fromkeys(("Task", "TaskSource", "Workdir", "code_path", "command_task",
                     "experiment_name", "include_paths", "load_component", "variables"),
                    "tasks"),
    **dict.fromkeys(("AssetMap", "REGISTER", "candidates", "is_remote", "lookup"), "uris"),
    **dict.fromkeys(("DATA_TYPES", "OutputSpec", "Value", "fill_scope", "input_value",
                     "job_inputs", "job_outputs", "output_spec", "render_literal"), "values"),
    "guarding": "watchdog",
}

__all__ = [  # grouped by stage, as the docstring says
    # the engine
    "Runtime", "Task", "TaskSource", "run_task", "start_task", "finish_task", "run_step",
    "Running", "Result", "start_service", "Service", "running", "alive", "stop_service",
    # resolve
    "command_task", "spark_task", "load_component", "experiment_name", "code_path",
    "include_paths", "variables", "Workdir", "Value", "OutputSpec", "DATA_TYPES",
    "input_value", "output_spec", "job_inputs", "job_outputs", "fill_scope", "render_literal",
    "AssetMap", "REGISTER", "is_remote", "lookup", "candidates", "Job", "Placement", "Selection",
    "Address", "Choice", "add_selection_arguments", "StepRules", "Decision", "DONE",
    "deterministic", "link_step",
    # snapshot
    "merged", "checked_code", "extract_archive", "safe_root",
    # environment (a debugger's process)
    "DebugRequest", "add_debug_arguments", "trial_addresses",
    # launch
    "usable_cores", "free_port", "install_signal_handlers", "restore_signal_handlers",
    "check_interrupt", "interruptible", "signals_held", "guarding", "Batches", "Listing",
    "list_files", "Limits", "Retry", "Tally", "Driven", "drive_batches", "BatchHooks",
    "batch_processes", "worker_command", "write_rows", "read_table", "row_batches", "table_files",
    "partition_batches",
    # collect
    "Status", "RunStatus", "TaskRecord", "STATUS_FILE", "RunRecord", "JobStatus",
    "run_folder", "locked", "job_name", "read_record", "write_record", "update_record",
    "end_record", "slot", "publish", "Tracking", "Server", "run_artifacts", "RunSetup",
    "guarded_run",
    "run_in_folder", "claim_job_name", "Identity", "BATCH_JOB", "folder_job_name",
]


def __getattr__(name: str) -> object:
    """A name of the surface, loaded from its module on first use (then kept here)."""
    where = _WHERE.get(name)
    if where is None:  # a submodule's own name: `from mlops.runtime import engine` imports it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, own = where.partition(":")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), own or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
