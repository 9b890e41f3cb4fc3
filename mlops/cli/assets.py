"""`azml model|data|environment|component create|list|show|archive|restore`: the arguments
`az ml <kind>` takes, through Session."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops.api.session import AssetRequest, Session
from mlops.cli.common import Verb
from mlops.errors import LocalRunError

KINDS = ("model", "data", "environment", "component")
PLURAL = {"data": "data assets"}


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    for kind in KINDS:
        group = groups.add_parser(kind, help=f"{PLURAL.get(kind, kind + 's')} in the local "
                                                 "workspace").add_subparsers(
            dest="verb", required=True, metavar="{create,list,show,archive,restore}")
        create = verb.add(group, "create", _create, f"register a {kind} version")
        create.add_argument("-f", "--file", type=Path, help="its YAML spec")
        create.add_argument("-n", "--name")
        create.add_argument("-v", "--version")
        if kind in ("model", "data"):
            create.add_argument("-p", "--path", help="its files: a local path, a job's "
                                "output (azureml://jobs/<name>/outputs/<output>), a mapped URI")
            create.add_argument("-t", "--type", default="")
            create.add_argument("-d", "--description", default="")
        listing = verb.add(group, "list", _list, f"the {kind}s: the latest of each name")
        listing.add_argument("-n", "--name", help="every version of this name")
        listing.add_argument("--include-archived", action="store_true")
        listing.add_argument("--archived-only", action="store_true")
        show = verb.add(group, "show", _show, f"one {kind} version")
        show.add_argument("-n", "--name", required=True)
        show.add_argument("-v", "--version")
        show.add_argument("-l", "--label")
        for name, handler in (("archive", _archive), ("restore", _restore)):
            each = verb.add(group, name, handler, f"{name} a {kind} (or one version)")
            each.add_argument("-n", "--name", required=True)
            each.add_argument("-v", "--version")
        for parser in (create, listing, show):
            parser.set_defaults(kind=kind)
        group.choices["archive"].set_defaults(kind=kind)
        group.choices["restore"].set_defaults(kind=kind)


def _create(session: Session, args: argparse.Namespace) -> object:
    if args.file is None and args.kind in ("environment", "component"):
        raise LocalRunError(f"{args.kind} create needs --file <its YAML spec>")
    if args.file is not None and args.name:
        raise LocalRunError("--name with --file: the spec names the asset (az ml takes "
                            "--set name=<name> to change it)")
    return session.create_asset(AssetRequest(
        kind=args.kind, spec=args.file, name=args.name, version=args.version,
        path=getattr(args, "path", None), type=getattr(args, "type", ""),
        description=getattr(args, "description", ""),
        registry=getattr(args, "registry_name", None)))


def _list(session: Session, args: argparse.Namespace) -> object:
    found = session.list_assets(args.kind, name=args.name,
                                archived=args.include_archived or args.archived_only,
                                registry_name=getattr(args, "registry_name", None))
    return found


def _show(session: Session, args: argparse.Namespace) -> object:
    return session.show_asset(args.kind, args.name, version=args.version, label=args.label,
                              registry_name=getattr(args, "registry_name", None))


def _archive(session: Session, args: argparse.Namespace) -> None:
    session.archive_asset(args.kind, args.name, version=args.version,
                          registry_name=getattr(args, "registry_name", None))


def _restore(session: Session, args: argparse.Namespace) -> None:
    session.archive_asset(args.kind, args.name, version=args.version, archived=False,
                          registry_name=getattr(args, "registry_name", None))
