"""`azml`: the local twin of `az ml`, in any repository (docs/azml.md). Each group's verbs take
the arguments az ml's take and print what az prints (`-o`, `--query`); they act through
`mlops.api.Session`. Exit codes are az's: 0, 1 (the machine, or a job that failed), 2 (the
command line or the input), 3 (no such job, endpoint or asset).

  common   az's global arguments, notes on stderr
  output   --query and -o
  jobs     azml job create|run|show|list|stream|cancel|download (run: local only, the job in
           the foreground, what make's targets call); job_manage: update|archive|restore|
           show-services
  assets   azml model|data|environment|component create|list|show|archive|restore
  endpoints  azml online-endpoint create|show|list|update|invoke|get-credentials|delete,
           online-deployment create|update|show|list|get-logs|delete
  batch    azml batch-endpoint create|update|show|list|delete|invoke|list-jobs,
           batch-deployment create|update|show|list|list-jobs|delete
  computes azml compute create|show|list|update|delete|start|stop|restart (kept in the local
           workspace; an instance's state)
  datastores azml datastore create|show|list|delete (kept; URIs map through the asset map)
  schedules  azml schedule create|show|list|update|enable|disable|delete|trigger (kept; trigger
           runs a schedule's job once)
  workspace  azml workspace show|list: the local workspace (mlflow_tracking_uri: its store)
"""

from __future__ import annotations

import argparse
import sys

from mlops.api.session import Session
from mlops.cli import (
    assets,
    batch,
    computes,
    datastores,
    endpoints,
    jobs,
    schedules,
    workspace,
)
from mlops.cli.common import Verb, Warnings, note
from mlops.cli.output import query, render
from mlops.errors import LocalError, machine_faults_raised
from mlops.project import keep_state_out_of_git

IGNORED = ("resource_group", "workspace_name", "subscription", "registry_name")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="azml", description="az ml's verbs, run on this machine: no Docker, no Azure "
        "(docs/azml.md). Settings: azml.toml or [tool.azml] at the repository's root.")
    groups = parser.add_subparsers(dest="group", required=True, metavar="GROUP")
    jobs.add(groups, Verb)
    assets.add(groups, Verb)
    endpoints.add(groups, Verb)
    batch.add(groups, Verb)
    computes.add(groups, Verb)
    datastores.add(groups, Verb)
    schedules.add(groups, Verb)
    workspace.add(groups, Verb)
    return parser


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    Warnings.shown = not getattr(args, "only_show_errors", False)
    ignored = [n for n in IGNORED if getattr(args, n, None) and not
               (n == "registry_name" and args.group != "job")]  # an asset's: a local registry
    if ignored:
        note("the workspace is the local one: --resource-group, --workspace-name, "
             "--subscription" + (" and a job's --registry-name are" if "registry_name" in ignored
                                 else " are") + " ignored")
    try:
        keep_state_out_of_git()
        result = machine_faults_raised(lambda: args.handler(Session(), args))
        if isinstance(result, int):  # a job run in the foreground: its exit code
            return result
        sys.stdout.write(render(query(result, args.query), args.output))
    except LocalError as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as err:  # 128 + the signal's number, as the front doors end
        return 128 + getattr(err, "signum", 2)
    return 0
