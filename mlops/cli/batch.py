"""`azml batch-endpoint ...` and `azml batch-deployment ...`: the arguments az ml takes, through
Session (mlops/api/batch_endpoints.py, batch_jobs.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mlops.api.session import Session
from mlops.cli.common import Verb, add_sets, note, set_values
from mlops.errors import LocalRunError
from mlops.runtime import add_debug_arguments

if TYPE_CHECKING:  # the batch engines are imported by the verbs that use them
    from mlops.api.batch_jobs import Invocation

SETTINGS = ((("-m", "--mini-batch-size"), "mini_batch_size"),
            (("-c", "--instance-count"), "instance_count"),
            (("--output-file-name",), "output_file_name"))  # (local only)


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    endpoint = groups.add_parser("batch-endpoint", help="local batch endpoints") \
        .add_subparsers(dest="verb", required=True,
                        metavar="{create,update,show,list,delete,invoke,list-jobs}")
    for name in ("create", "update"):
        each = verb.add(endpoint, name, _create_endpoint, f"{name} a batch endpoint")
        each.add_argument("-f", "--file", type=Path)
        each.add_argument("-n", "--name", required=name == "update")
        each.add_argument("--no-wait", action="store_true")
        add_sets(each)
        if name == "update":
            each.add_argument("--defaults", metavar="'deployment_name=D'",
                              help="the endpoint's defaults (after --set)")
    for name, handler in (("show", _show_endpoint), ("delete", _delete_endpoint),
                          ("list-jobs", _list_jobs)):
        each = verb.add(endpoint, name, handler, f"{name} a batch endpoint")
        each.add_argument("-n", "--name", required=True)
        if name == "delete":
            each.add_argument("-y", "--yes", action="store_true")
            each.add_argument("--no-wait", action="store_true")
    verb.add(endpoint, "list", _list_endpoints, "the batch endpoints")
    add_invoke(endpoint, verb)
    add_deployments(groups, verb)


def add_invoke(endpoint: argparse._SubParsersAction, verb: type[Verb]) -> None:
    invoke = verb.add(endpoint, "invoke", _invoke, "create a job of the endpoint's (default) "
                      "deployment over an input, run in the background", az_debug=False)
    invoke.add_argument("-n", "--name", required=True)
    invoke.add_argument("-d", "--deployment-name")
    invoke.add_argument("--input", help="a local folder or file, or azureml:<data>@latest, "
                        "a job's output, a mapped URI")
    invoke.add_argument("--input-type", choices=("uri_folder", "uri_file", "mltable"))
    invoke.add_argument("--inputs", help="a JSON object of named inputs")
    invoke.add_argument("-f", "--file", type=Path, help="a YAML of inputs: (and outputs:)")
    invoke.add_argument("--job-name")
    invoke.add_argument("--experiment-name", help="(the job's experiment: the endpoint's here)")
    for flags, dest in SETTINGS:
        invoke.add_argument(*flags, dest=dest)
    invoke.add_argument("--output-path", help="(a datastore path on Azure: outputs stay in "
                        "the run folder here)")
    invoke.add_argument("--outputs", help="(as --output-path)")
    add_sets(invoke, "override a value")
    invoke.add_argument("--max-procs", type=int, help="local only: cap on processes at once")
    invoke.add_argument("--stream", action="store_true", help="local only: follow the job's "
                        "log to its end (its status: azml's exit code)")
    add_debug_arguments(invoke, bare=True)


def add_deployments(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    deployment = groups.add_parser("batch-deployment", help="local batch deployments") \
        .add_subparsers(dest="verb", required=True,
                        metavar="{create,update,show,list,list-jobs,delete}")
    for name in ("create", "update"):
        each = verb.add(deployment, name, _create_deployment, f"{name} a batch deployment: "
                        "checked and recorded in its endpoint")
        each.add_argument("-f", "--file", required=name == "create", type=Path,
                          help="its spec (update: else the one it was made of)")
        each.add_argument("-e", "--endpoint-name")
        each.add_argument("-n", "--name")
        each.add_argument("--set-default", action="store_true",
                          help="make it the endpoint's default deployment")
        each.add_argument("--model", help="local only: run this model folder instead")
        each.add_argument("--no-wait", action="store_true")
        each.add_argument("--skip-script-validation", action="store_true")
        add_sets(each)
    for name, handler in (("show", _show_deployment), ("delete", _delete_deployment),
                          ("list-jobs", _deployment_jobs)):
        each = verb.add(deployment, name, handler, f"{name} a batch deployment"
                        if name != "list-jobs" else "a batch deployment's jobs, newest first")
        each.add_argument("-n", "--name", required=True)
        each.add_argument("-e", "--endpoint-name", required=True)
        if name == "delete":
            each.add_argument("-y", "--yes", action="store_true")
            each.add_argument("--no-wait", action="store_true")
    listing = verb.add(deployment, "list", _list_deployments, "the endpoint's deployments")
    listing.add_argument("-e", "--endpoint-name", required=True)


def _create_endpoint(session: Session, args: argparse.Namespace) -> object:
    sets = set_values(args.sets) + defaults(getattr(args, "defaults", None))
    if args.file is None and args.verb == "update":
        return session.update_batch_endpoint(args.name, sets)
    return session.create_batch_endpoint(args.file, name=args.name, sets=sets)


def defaults(text: str | None) -> list[str]:
    """update --defaults "deployment_name=d" (space-separated, as az's convert_str_to_dict
    reads it): each pair set under defaults."""
    pairs = (text or "").split()
    for pair in pairs:
        if "=" not in pair:
            raise LocalRunError(f"--defaults {text!r}: give KEY=VALUE pairs "
                                "(deployment_name=<deployment>)")
    return [f"defaults.{pair}" for pair in pairs]


def _show_endpoint(session: Session, args: argparse.Namespace) -> object:
    return session.show_batch_endpoint(args.name)


def _list_endpoints(session: Session, args: argparse.Namespace) -> object:  # noqa: ARG001
    return session.list_batch_endpoints()


def _delete_endpoint(session: Session, args: argparse.Namespace) -> None:
    session.delete_batch_endpoint(args.name)


def _list_jobs(session: Session, args: argparse.Namespace) -> object:
    return session.list_batch_jobs(args.name)


def invocation(args: argparse.Namespace) -> Invocation:
    """The invoke's arguments as Session takes them."""
    from mlops.api.batch_jobs import Invocation
    if args.output_path or args.outputs:
        note("--output-path/--outputs name Azure storage; the job's output stays in its run "
             "folder: azml job download -n <job> --output-name score")
    if args.experiment_name:
        note("--experiment-name is ignored: the local job's experiment is its endpoint's")
    debug = [*(["--debug", args.debug] if args.debug else []),
             *(["--debug-port", str(args.debug_port)] if args.debug_port else [])]
    return Invocation(
        endpoint=args.name, deployment=args.deployment_name, input=args.input,
        input_type=args.input_type, inputs=args.inputs, file=args.file,
        sets=set_values(args.sets), job_name=args.job_name,
        settings={dest: str(getattr(args, dest)) for _, dest in SETTINGS
                  if getattr(args, dest) is not None},
        max_procs=max(0, args.max_procs or 0), debug=debug)


def _invoke(session: Session, args: argparse.Namespace) -> object:
    created = session.invoke_batch(invocation(args))
    if args.stream:  # the job as it ended (a job that did not complete: exit 1, as job stream)
        session.stream_job(str(created["name"]), sys.stdout)
        return session.show_job(str(created["name"]))
    return created


def _create_deployment(session: Session, args: argparse.Namespace) -> object:
    from mlops.api.batch_endpoints import DeploymentRequest

    return session.create_batch_deployment(DeploymentRequest(
        spec=args.file, endpoint=args.endpoint_name, name=args.name,
        sets=set_values(args.sets), set_default=args.set_default, model=args.model),
        update=args.verb == "update")


def _deployment_jobs(session: Session, args: argparse.Namespace) -> object:
    return session.list_batch_jobs(args.endpoint_name, args.name)


def _show_deployment(session: Session, args: argparse.Namespace) -> object:
    return session.show_batch_deployment(args.endpoint_name, args.name)


def _list_deployments(session: Session, args: argparse.Namespace) -> object:
    return session.list_batch_deployments(args.endpoint_name)


def _delete_deployment(session: Session, args: argparse.Namespace) -> None:
    session.delete_batch_deployment(args.endpoint_name, args.name)
