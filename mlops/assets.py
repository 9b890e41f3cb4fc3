"""The local workspace's twins of `az ml model|data|environment|component create|list|show|
archive|restore` (docs/workspace.md):

    python -m mlops.assets create -f SPEC [--kind model] [--version 3]
    python -m mlops.assets create model --name NAME --path FOLDER [--type custom_model]
    python -m mlops.assets list [KIND] [--name NAME] [--archived]
    python -m mlops.assets show KIND NAME [--version V | --label latest]
    python -m mlops.assets archive|restore KIND NAME [--version V]

Exit codes: 0; 2 for a spec or input error (an unknown name, a version that exists with other
content).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops import exit_code, exit_with
from mlops.workspace import actions
from mlops.workspace.records import AssetKind
from mlops.workspace.store import Draft

ACTIONS = ["create", "list", "show", "archive", "restore"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="The local workspace's assets.")
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("kind", nargs="?", help="model, data, environment or component")
    parser.add_argument("name", nargs="?", help="the asset's name")
    parser.add_argument("-f", "--file", type=Path, help="create: the asset's YAML spec")
    parser.add_argument("-n", "--name", dest="name_option", help="the asset's name")
    parser.add_argument("-v", "--version", help="a version (create: over the spec's)")
    parser.add_argument("-l", "--label", help="show: a label (latest)")
    parser.add_argument("-p", "--path", help="create without a spec: the content (a local "
                        "path, azureml://jobs/<name>/outputs/<output>, a mapped URI)")
    parser.add_argument("-t", "--type", help="create without a spec: custom_model, uri_folder..")
    parser.add_argument("-d", "--description", default="", help="create without a spec")
    parser.add_argument("--archived", action="store_true", help="list: archived ones too")
    parser.add_argument("--assets", dest="asset_file", type=Path, default=None)
    return parser


def _kind(text: str | None, parser: argparse.ArgumentParser) -> AssetKind | None:
    if not text:
        return None
    try:
        return AssetKind.parse(text)
    except ValueError as err:
        parser.error(str(err))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    kind, name = _kind(args.kind, parser), args.name_option or args.name
    if args.action == "create":
        if args.file is not None:
            return exit_code(lambda: actions.create(args.file, kind=args.kind,
                                                    version=args.version,
                                                    asset_file=args.asset_file))
        if kind not in (AssetKind.MODEL, AssetKind.DATA) or not name or args.path is None:
            parser.error("create needs -f <asset spec>, or a kind (model or data), --name and "
                         "--path")
        draft = Draft(kind, name, None, version=args.version, type=args.type or "",
                      description=args.description, origin=args.path)
        return exit_code(lambda: actions.create_from(draft, path=args.path,
                                                     asset_file=args.asset_file))
    if args.action == "list":
        return exit_code(lambda: actions.listed(kind, name, args.archived))
    if kind is None or not name:
        parser.error(f"{args.action} needs a kind and a name")
    selection = actions.Selection(kind, name, args.version, args.label)
    if args.action == "show":
        return exit_code(lambda: actions.show(selection))
    return exit_code(lambda: actions.archive(selection, args.action == "archive"))


if __name__ == "__main__":
    exit_with(main)
