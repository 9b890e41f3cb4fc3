"""`azml schedule create|show|list|update|enable|disable|delete|trigger`: the arguments
`az ml schedule` takes (the ml extension's _params/_schedule_params.py; update is az's generic
update), through Session. Schedules are kept in the local workspace; nothing fires them on
their trigger here, and `trigger` runs a schedule's job once, now."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops.api.session import Session
from mlops.cli.common import Verb, add_generic_update, add_sets, note, set_values
from mlops.errors import LocalRunError

VERBS = "create,show,list,update,enable,disable,delete,trigger"


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    group = groups.add_parser("schedule", help="job schedules in the local workspace (kept; "
                              "trigger runs one's job now)").add_subparsers(
        dest="verb", required=True, metavar="{" + VERBS + "}")
    create = verb.add(group, "create", _create, "keep a schedule (its job checked as job "
                      "create checks it); nothing fires it here")
    create.add_argument("-f", "--file", type=Path, required=True, help="its YAML spec")
    create.add_argument("-n", "--name", help="over the spec's name")
    add_sets(create)
    create.add_argument("--no-wait", action="store_true", help="(local: kept when it returns)")
    listing = verb.add(group, "list", _list, "the enabled schedules")
    listing.add_argument("-r", "--max-results", type=int, help="at most this many")
    listing.add_argument("--include-disabled", action="store_true")
    listing.add_argument("--disabled-only", action="store_true")
    update = verb.add(group, "update", _update, "change a schedule's trigger, display_name, "
                      "description, tags or properties (az's generic update)")
    update.add_argument("-n", "--name", required=True)
    add_generic_update(update)
    update.add_argument("--no-wait", action="store_true", help="(local: kept when it returns)")
    for name, handler, what in (("show", _show, "one schedule"),
                                ("enable", _enable, "enable a schedule"),
                                ("disable", _disable, "disable a schedule"),
                                ("delete", _delete, "remove a schedule (its jobs stay)"),
                                ("trigger", _trigger, "run a schedule's job once, now")):
        each = verb.add(group, name, handler, what)
        each.add_argument("-n", "--name", required=True)
        if name in ("enable", "disable", "delete"):
            each.add_argument("--no-wait", action="store_true", help="(local: done when it "
                              "returns)")


def _create(session: Session, args: argparse.Namespace) -> object:
    return session.create_schedule(args.file, name=args.name,
                                   sets=tuple(set_values(args.sets)))


def _show(session: Session, args: argparse.Namespace) -> object:
    return session.show_schedule(args.name)


def _list(session: Session, args: argparse.Namespace) -> object:
    if args.include_disabled and args.disabled_only:  # the extension's get_schedule_list_view_type
        raise LocalRunError("Cannot provide both disabled-only and include-disabled.")
    found = session.list_schedules(None if args.include_disabled else not args.disabled_only)
    if args.max_results:
        note(f"Displaying top {args.max_results} results from the list command.")
        found = found[:max(0, args.max_results)]
    return found


def _update(session: Session, args: argparse.Namespace) -> object:
    return session.update_schedule(args.name, args.edits, force_string=args.force_string)


def _enable(session: Session, args: argparse.Namespace) -> object:
    return session.enable_schedule(args.name, enabled=True)


def _disable(session: Session, args: argparse.Namespace) -> object:
    return session.enable_schedule(args.name, enabled=False)


def _delete(session: Session, args: argparse.Namespace) -> None:
    session.delete_schedule(args.name)


def _trigger(session: Session, args: argparse.Namespace) -> object:
    return session.trigger_schedule(args.name)
