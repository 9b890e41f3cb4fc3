"""`azml model|data|environment|component create|list|show|archive|restore`: the arguments
`az ml <kind>` takes, through Session."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops.api.session import AssetRequest, AssetUpdate, Session
from mlops.checks.overrides import parse_sets
from mlops.cli.common import Verb, add_generic_update, add_sets, note, set_values
from mlops.errors import LocalRunError

KINDS = ("model", "data", "environment", "component")
UPDATED = ("model", "data", "environment")  # az ml component has no update
PLURAL = {"data": "data assets"}


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    for kind in KINDS:
        group = groups.add_parser(kind, help=f"{PLURAL.get(kind, kind + 's')} in the local "
                                                 "workspace").add_subparsers(
            dest="verb", required=True, metavar="{create,list,show,"
            + ("update," if kind in UPDATED else "") + "archive,restore"
            + (",download}" if kind == "model" else "}"))
        create = verb.add(group, "create", _create, f"register a {kind} version")
        _create_arguments(create, kind)
        listing = verb.add(group, "list", _list, f"the {kind}s: the latest of each name")
        listing.add_argument("-n", "--name", help="every version of this name")
        listing.add_argument("--include-archived", action="store_true")
        listing.add_argument("--archived-only", action="store_true")
        listing.add_argument("-r", "--max-results", type=int, help="at most this many")
        if kind == "model":
            listing.add_argument("-s", "--stage", help="only the versions in this stage")
        if kind == "component":
            listing.add_argument("-v", "--version", help="(az lists every version of --name)")
        show = verb.add(group, "show", _show, f"one {kind} version")
        show.add_argument("-n", "--name", required=True)
        show.add_argument("-v", "--version")
        show.add_argument("-l", "--label")
        if kind in UPDATED:
            _update_arguments(verb.add(group, "update", _update,
                                       f"change a {kind} version's description or tags"), kind)
        for name, handler in (("archive", _archive), ("restore", _restore)):
            each = verb.add(group, name, handler, f"{name} a {kind} (or one version)")
            each.add_argument("-n", "--name", required=True)
            each.add_argument("-v", "--version")
            each.add_argument("-l", "--label", help="the version this label names (latest)")
        if kind == "model":
            download = verb.add(group, "download", _download, "copy a model version's files")
            download.add_argument("-n", "--name", required=True)
            download.add_argument("-v", "--version", required=True)
            download.add_argument("-p", "--download-path", type=Path, default=Path("."))
        for parser in (create, listing, show):
            parser.set_defaults(kind=kind)
        group.choices["archive"].set_defaults(kind=kind)
        group.choices["restore"].set_defaults(kind=kind)


def _create_arguments(create: argparse.ArgumentParser, kind: str) -> None:
    """az ml <kind> create's arguments (the ml extension's ml_<kind>_create): --file, and what
    each flag sets over it (or, without --file, makes: a model or data asset, an environment).
    Short names are az's for that kind: -d is data's --description, a model's
    --default-deployment-template, an environment's --dockerfile-path; -s a model's --stage."""
    create.add_argument("-f", "--file", type=Path, help="its YAML spec")
    create.add_argument("-n", "--name")
    create.add_argument("-v", "--version")
    create.add_argument(*(["-d"] if kind == "data" else []), "--description", default="")
    create.add_argument("--tags", nargs="*", default=[], metavar="KEY[=VALUE]")
    add_sets(create)
    create.add_argument("--no-wait", action="store_true", help="(local: made when it returns)")
    if kind in ("model", "data"):
        create.add_argument("-p", "--path", help="its files: a local path, a job's "
                            "output (azureml://jobs/<name>/outputs/<output>), a mapped URI")
        create.add_argument("-t", "--type", default="", **(
            {"choices": ("uri_file", "uri_folder", "mltable")} if kind == "data" else {}))
    if kind == "model":
        create.add_argument("-s", "--stage")
        create.add_argument("-d", "--default-deployment-template", metavar="ASSET_ID",
                            help="its default_deployment_template's asset_id")
    if kind == "environment":
        create.add_argument("-i", "--image", help="its Docker image")
        create.add_argument("-c", "--conda-file", help="its conda file")
        create.add_argument("-b", "--build-context", help="its Docker build context")
        create.add_argument("-d", "--dockerfile-path", default="/Dockerfile",
                            help="the Dockerfile in the build context")
        create.add_argument("--os-type")
        create.add_argument("-p", "--path", help="(with --registry-name on Azure: a workspace "
                            "environment to copy; ignored here, as az ignores it without one)")
    if kind in ("model", "data", "environment"):
        create.add_argument("--datastore")
    if kind in ("data", "component"):
        create.add_argument("--skip-validation", action="store_true",
                            help="(accepted; the spec is checked as Azure checks it)")


def overrides(args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
    """What az's ml_<kind>_create passes to load_<kind> as params_override: --set first, then
    each flag given, in its order."""
    made = [tuple(pair.items())[0] for pair in parse_sets(set_values(args.sets), Path("--set"))]
    tags = dict(tag.partition("=")[::2] for tag in args.tags)
    build = getattr(args, "build_context", None)
    template = getattr(args, "default_deployment_template", None)
    for key, value in (("name", args.name), ("version", args.version), ("tags", tags),
                       ("description", args.description),
                       ("path", getattr(args, "path", None) if args.kind != "environment"
                        else None),
                       ("type", getattr(args, "type", None)),
                       ("stage", getattr(args, "stage", None)),
                       ("default_deployment_template", template and {"asset_id": template}),
                       ("image", getattr(args, "image", None)),
                       ("conda_file", getattr(args, "conda_file", None)),
                       ("build", build and {"path": build,
                                            "dockerfile_path": args.dockerfile_path}),
                       ("os_type", getattr(args, "os_type", None)),
                       ("datastore", getattr(args, "datastore", None))):
        if value:
            made.append((key, value))
    return tuple(made)


def _create(session: Session, args: argparse.Namespace) -> object:
    if args.file is None and args.kind == "component":
        raise LocalRunError("component create needs --file <its YAML spec>")
    if getattr(args, "default_deployment_template", None):
        note("--default-deployment-template: checked, but not kept by the local workspace "
             "(a registry's deployment template: model show prints none)")
    return session.create_asset(AssetRequest(
        kind=args.kind, spec=args.file, name=args.name, version=args.version,
        path=getattr(args, "path", None) if args.kind != "environment" else None,
        type=getattr(args, "type", ""),
        description=args.description, registry=getattr(args, "registry_name", None),
        overrides=overrides(args)))


def _list(session: Session, args: argparse.Namespace) -> object:
    found = session.list_assets(args.kind, name=args.name,
                                archived=args.include_archived or args.archived_only,
                                registry_name=getattr(args, "registry_name", None))
    for key in ("stage", "version"):  # model list --stage, component list --version
        if getattr(args, key, None):
            found = [each for each in found if str(each.get(key)) == getattr(args, key)]
    return found if args.max_results is None else found[:max(0, args.max_results)]


def _show(session: Session, args: argparse.Namespace) -> object:
    return session.show_asset(args.kind, args.name, version=args.version, label=args.label,
                              registry_name=getattr(args, "registry_name", None))


def _update_arguments(update: argparse.ArgumentParser, kind: str) -> None:
    """az ml <kind> update's: the version (az's getter, <kind> show's), the generic update."""
    update.add_argument("-n", "--name", required=True)
    update.add_argument("-v", "--version")
    update.add_argument("-l", "--label")
    if kind == "model":
        update.add_argument("-s", "--stage", help="the model's stage (e.g. Production)")
    update.add_argument("-d", "--description", help="its new description")
    add_generic_update(update)
    update.set_defaults(kind=kind)


def _update(session: Session, args: argparse.Namespace) -> object:
    return session.update_asset(AssetUpdate(
        kind=args.kind, name=args.name, version=args.version, label=args.label,
        registry=getattr(args, "registry_name", None), edits=tuple(args.edits),
        force_string=args.force_string, stage=getattr(args, "stage", None),
        description=args.description))


def _labelled(session: Session, args: argparse.Namespace) -> str | None:
    """archive|restore -l <label>: the version the label names."""
    if not args.label or args.version:
        return args.version
    return str(session.show_asset(args.kind, args.name, label=args.label,
                                  registry_name=getattr(args, "registry_name", None))["version"])


def _download(session: Session, args: argparse.Namespace) -> None:
    """az prints nothing (ml_model_download returns None)."""
    session.download_model(args.name, args.version, args.download_path,
                           registry_name=getattr(args, "registry_name", None))


def _archive(session: Session, args: argparse.Namespace) -> None:
    session.archive_asset(args.kind, args.name, version=_labelled(session, args),
                          registry_name=getattr(args, "registry_name", None))


def _restore(session: Session, args: argparse.Namespace) -> None:
    session.archive_asset(args.kind, args.name, version=_labelled(session, args),
                          archived=False, registry_name=getattr(args, "registry_name", None))
