"""`azml compute create|show|list|update|delete|start|stop|restart`: the arguments `az ml
compute` takes, through Session; the computes are kept in the local workspace and nothing is
provisioned (an instance's start/stop/restart changes its kept state only)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlops.api.computes import ComputeRequest
from mlops.api.session import Session
from mlops.checks.overrides import parse_sets
from mlops.cli.common import Verb, add_sets, set_values
from mlops.errors import LocalRunError

# az ml compute create's flags (the ml extension's _compute_params.py), each with the field it
# overrides, in the order ml_compute_create appends them after --set
CREATE_FLAGS = (("name", ("-n", "--name")), ("type", ("-t", "--type")),
                ("network_settings.vnet_name", ("--vnet-name",)),
                ("network_settings.subnet", ("--subnet",)),
                ("ssh_settings.admin_username", ("--admin-username",)),
                ("ssh_settings.admin_password", ("--admin-password",)),
                ("ssh_settings.ssh_key_value", ("--ssh-key-value",)), ("size", ("--size",)),
                ("create_on_behalf_of.user_tenant_id", ("--user-tenant-id",)),
                ("create_on_behalf_of.user_object_id", ("--user-object-id",)),
                ("min_instances", ("--min-instances",)), ("max_instances", ("--max-instances",)),
                ("idle_time_before_scale_down", ("-d", "--idle-time-before-scale-down")),
                ("description", ("--description",)), ("identity.type", ("--identity-type",)),
                ("identity.user_assigned_identities", ("-i", "--user-assigned-identities")),
                ("enable_node_public_ip", ("--enable-node-public-ip",)), ("tier", ("--tier",)),
                ("ssh_public_access_enabled", ("-p", "--ssh-public-access-enabled")),
                ("tags", ("--tags",)), ("location", ("-l", "--location")))
UPDATE_FLAGS = ("max_instances", "min_instances", "idle_time_before_scale_down",
                "identity.type", "identity.user_assigned_identities", "tags")


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    group = groups.add_parser("compute", help="computes in the local workspace (kept; jobs "
                              "run on this machine)").add_subparsers(
        dest="verb", required=True,
        metavar="{create,show,list,update,delete,start,stop,restart}")
    create = verb.add(group, "create", _create, "keep a compute in the local workspace")
    create.add_argument("-f", "--file", type=Path, help="its YAML spec")
    _flags(create, [key for key, _ in CREATE_FLAGS])
    show = verb.add(group, "show", _show, "one compute")
    show.add_argument("-n", "--name", required=True)
    listing = verb.add(group, "list", _list, "the computes")
    listing.add_argument("--type", help="only computes of this type")
    listing.add_argument("-r", "--max-results", type=int, help="at most this many")
    update = verb.add(group, "update", _update, "change a kept compute")
    update.add_argument("-n", "--name", required=True)
    _flags(update, list(UPDATE_FLAGS))
    delete = verb.add(group, "delete", _delete, "remove a kept compute")
    delete.add_argument("-n", "--name", required=True)
    delete.add_argument("-y", "--yes", action="store_true", help="do not ask")
    delete.add_argument("--no-wait", action="store_true", help="(local: gone when it returns)")
    for action in ("start", "stop", "restart"):
        power = verb.add(group, action, _power, f"{action} a compute instance (its state, "
                         "kept; jobs run on this machine whatever it is)")
        power.add_argument("-n", "--name", required=True)
        power.add_argument("--no-wait", action="store_true", help="(local: done when it "
                           "returns)")


def _flags(parser: argparse.ArgumentParser, keys: list[str]) -> None:
    """Each flag as az takes it (a string: load_compute's schema converts it), --set, and
    --no-wait."""
    for key, flags in CREATE_FLAGS:
        if key in keys and key != "name":
            parser.add_argument(*flags, dest=key, **({"nargs": "*"} if key == "tags" else {}))
    if "name" in keys:
        parser.add_argument("-n", "--name")
    add_sets(parser)
    parser.add_argument("--no-wait", action="store_true", help="(local: kept when it returns)")


def overrides(args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
    """az's params_override: --set first, then each flag given, in the extension's order
    (--type lowercased, --tags as a mapping, -i as resource ids)."""
    made = [tuple(pair.items())[0] for pair in parse_sets(set_values(args.sets), Path("--set"))]
    for key, _ in CREATE_FLAGS:
        value = getattr(args, key, None) if key != "name" or args.verb == "create" else None
        if not value:
            continue
        if key == "type":
            value = value.lower()
        elif key == "tags":
            value = dict(tag.partition("=")[::2] for tag in value)
        elif key == "identity.user_assigned_identities":
            value = [{"resource_id": each} for each in value.split(",")]
        made.append((key, value))
    return tuple(made)


def _create(session: Session, args: argparse.Namespace) -> object:
    return session.create_compute(ComputeRequest(spec=args.file, overrides=overrides(args)))


def _show(session: Session, args: argparse.Namespace) -> object:
    return session.show_compute(args.name)


def _list(session: Session, args: argparse.Namespace) -> object:
    found = session.list_computes(args.type)
    return found if args.max_results is None else found[:max(0, args.max_results)]


def _update(session: Session, args: argparse.Namespace) -> object:
    return session.update_compute(args.name, overrides(args))


def _delete(session: Session, args: argparse.Namespace) -> None:
    if not args.yes:  # az's confirmation (prompt_y_n); with no terminal it needs --yes
        if not sys.stdin.isatty():
            raise LocalRunError("Unable to prompt for confirmation as no tty available. Use "
                                "--yes.")
        answer = input("Are you sure you want to perform this operation? (y/n): ")
        if answer.strip().lower() not in ("y", "yes"):
            return
    session.delete_compute(args.name)


def _power(session: Session, args: argparse.Namespace) -> None:
    session.power_compute(args.name, args.verb)
