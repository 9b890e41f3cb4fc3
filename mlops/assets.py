"""The local workspace's assets, as `az ml <kind> create|list|show|archive|restore` (make's
asset targets; `azml <kind> <verb>` is the same through the same Session).

    python -m mlops.assets create -f <asset spec> [--kind model] [--version 3]
    python -m mlops.assets create model --name fowl-classifier --path runs/x/outputs/model
    python -m mlops.assets list [model] [--name NAME] [--archived]
    python -m mlops.assets show model fowl-classifier [--version 1 | --label latest]
    python -m mlops.assets archive|restore model fowl-classifier [--version 1]

Each prints what az ml prints (JSON). Exit codes: 0; 2 for a spec or input error; 3 when the
asset is not there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlops import exit_code, exit_with
from mlops.api.session import AssetRequest, Session

ACTIONS = ["create", "list", "show", "archive", "restore"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="The local workspace's assets.")
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("kind", nargs="?", help="model, data, environment or component")
    parser.add_argument("name", nargs="?", help="the asset's name")
    parser.add_argument("-f", "--file", type=Path, help="create: the asset's YAML spec")
    parser.add_argument("-n", "--name", dest="name_option", help="the asset's name")
    parser.add_argument("-k", "--kind", dest="kind_option", help="the kind (over the spec's)")
    parser.add_argument("-v", "--version", help="a version (create: over the spec's)")
    parser.add_argument("-l", "--label", help="show: a label (latest)")
    parser.add_argument("-p", "--path", help="create without a spec: the content")
    parser.add_argument("-t", "--type", default="", help="create without a spec: its type")
    parser.add_argument("-d", "--description", default="", help="create without a spec")
    parser.add_argument("--archived", action="store_true", help="list: archived ones too")
    parser.add_argument("--assets", dest="asset_file", type=Path, default=None)
    return parser


def act(session: Session, args: argparse.Namespace) -> object:
    kind, name = args.kind_option or args.kind, args.name_option or args.name
    if args.action == "create":
        return session.create_asset(AssetRequest(
            kind=kind, spec=args.file, name=name, version=args.version, path=args.path,
            type=args.type, description=args.description,
            overrides=(("version", args.version),) if args.version else ()))
    if args.action == "list":
        return session.list_assets(kind, name=name, archived=args.archived)
    if args.action == "show":
        return session.show_asset(kind, name, version=args.version, label=args.label)
    return session.archive_asset(kind, name, version=args.version,
                                 archived=args.action == "archive")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    session = Session(asset_file=args.asset_file)
    return exit_code(lambda: print(json.dumps(act(session, args), indent=2, default=str))
                     or 0)


if __name__ == "__main__":
    exit_with(main)
