"""`azml workspace show|list`: the local workspace, as `az ml workspace` prints one. Every
workspace argument (-n, -w, -g, --subscription) names the local one here: a note says so."""

from __future__ import annotations

import argparse

from mlops.api.session import Session
from mlops.cli.common import Verb, note


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    group = groups.add_parser("workspace", help="the local workspace").add_subparsers(
        dest="verb", required=True, metavar="{show,list}")
    show = verb.add(group, "show", _show, "the local workspace (its mlflow_tracking_uri is the "
                    "local store)")
    show.add_argument("-n", "--name", help="(the workspace is the local one)")
    listing = verb.add(group, "list", _list, "the workspaces: the local one")
    listing.add_argument("--filtered-kinds", help="(the local workspace is the only one)")
    listing.add_argument("-r", "--max-results", type=int, help="(one)")


def _show(session: Session, args: argparse.Namespace) -> object:
    if args.name and args.name != "local":
        note(f"workspace {args.name}: the workspace is the local one")
    return session.show_workspace()


def _list(session: Session, args: argparse.Namespace) -> object:
    return [session.show_workspace()]
