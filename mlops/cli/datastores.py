"""`azml datastore create|show|list|delete`: the arguments `az ml datastore` takes, through
Session; datastores are kept in the local workspace, and reach folders through the asset map."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops.api.session import Session
from mlops.checks.overrides import parse_sets
from mlops.cli.common import Verb, add_sets, set_values


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    group = groups.add_parser("datastore", help="datastores in the local workspace (kept; "
                              "their URIs map to folders)").add_subparsers(
        dest="verb", required=True, metavar="{create,show,list,delete}")
    create = verb.add(group, "create", _create, "keep a datastore in the local workspace")
    create.add_argument("-f", "--file", type=Path, required=True, help="its YAML spec")
    create.add_argument("-n", "--name", help="over the spec's name")
    add_sets(create)
    listing = verb.add(group, "list", _list, "the datastores, the workspace's own among them")
    listing.add_argument("-r", "--max-results", type=int, help="at most this many")
    for name, handler, what in (("show", _show, "one datastore"),
                                ("delete", _delete, "remove a kept datastore")):
        each = verb.add(group, name, handler, what)
        each.add_argument("-n", "--name", required=True)


def _create(session: Session, args: argparse.Namespace) -> object:
    """az's params_override: --set first, then --name (ml_datastore_create)."""
    overrides = parse_sets(set_values(args.sets), Path("--set"))
    return session.create_datastore(args.file, [*overrides, *([{"name": args.name}]
                                                              if args.name else [])])


def _show(session: Session, args: argparse.Namespace) -> object:
    return session.show_datastore(args.name)


def _list(session: Session, args: argparse.Namespace) -> object:
    found = session.list_datastores()
    return found if args.max_results is None else found[:max(0, args.max_results)]


def _delete(session: Session, args: argparse.Namespace) -> None:
    session.delete_datastore(args.name)
