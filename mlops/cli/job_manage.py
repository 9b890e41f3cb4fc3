"""`azml job update|archive|restore|show-services`: the arguments `az ml job` takes for them
(the ml extension's _params/_job_params.py; update is az's generic update), through Session."""

from __future__ import annotations

import argparse

from mlops.api.session import Session
from mlops.cli.common import Verb, add_generic_update, note

VERBS = "update,archive,restore,show-services"


def add(job: argparse._SubParsersAction, verb: type[Verb]) -> None:
    update = verb.add(job, "update", _update, "change a job's description, tags, display name "
                      "or properties (az's --set/--add/--remove over the job as shown)")
    update.add_argument("-n", "--name", required=True, help="the job's name")
    update.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")
    add_generic_update(update)
    for name, handler, what in (
            ("archive", _archive, "hide a job from job list (--include-archived shows it)"),
            ("restore", _restore, "list an archived job again")):
        each = verb.add(job, name, handler, what)
        each.add_argument("-n", "--name", required=True, help="the job's name")
    services = verb.add(job, "show-services", _services, "a job's interactive services on a "
                        "node (none run with a local job)")
    services.add_argument("-n", "--name", required=True, help="the job's name")
    services.add_argument("-i", "--node-index", type=int, default=0,
                          help="the node's index (zero-based)")
    services.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")


def _web(args: argparse.Namespace) -> None:
    if args.web:
        note("--web opens Azure's Studio; the local job's page is its run folder (shown "
             "under services.Studio)")


def _update(session: Session, args: argparse.Namespace) -> object:
    _web(args)
    return session.update_job(args.name, args.edits, force_string=args.force_string)


def _archive(session: Session, args: argparse.Namespace) -> None:
    session.archive_job(args.name, archived=True)


def _restore(session: Session, args: argparse.Namespace) -> None:
    session.archive_job(args.name, archived=False)


def _services(session: Session, args: argparse.Namespace) -> None:
    _web(args)
    session.job_services(args.name, args.node_index)
