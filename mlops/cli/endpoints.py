"""`azml online-endpoint ...` and `azml online-deployment ...`: the arguments az ml takes,
through Session (mlops/api/endpoints.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops.api.session import Session
from mlops.cli.common import Verb, add_sets, add_switch, note, set_values
from mlops.runtime import DebugRequest, add_debug_arguments


def add(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    endpoint = groups.add_parser("online-endpoint", help="local online endpoints").add_subparsers(
        dest="verb", required=True,
        metavar="{create,show,list,update,invoke,get-credentials,regenerate-keys,delete}")
    create = verb.add(endpoint, "create", _create_endpoint, "create (or update) an endpoint")
    create.add_argument("-f", "--file", type=Path, help="(or --name alone: key auth)")
    create.add_argument("-n", "--name")
    create.add_argument("--auth-mode", type=str.lower, choices=("key", "aml_token", "aad_token"),
                        help="over the spec's auth_mode (default key)")
    add_sets(create)
    create.add_argument("--no-wait", action="store_true", help="(local: recorded at once)")
    create.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")
    add_switch(create, "--local", "(Docker: not here)")
    create.add_argument("--port", type=int, help="local only: the port its front listens on "
                        "(default: a free one)")
    create.add_argument("--auth", choices=["none"], help="local only: serve without a key, "
                        "as az ml --local does")
    for name, handler in (("show", _show_endpoint), ("delete", _delete_endpoint),
                          ("get-credentials", _credentials)):
        each = verb.add(endpoint, name, handler, f"{name} an endpoint")
        each.add_argument("-n", "--name", required=True)
        if name != "get-credentials":
            add_switch(each, "--local", "(every endpoint is local here)")
        if name == "show":
            each.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")
        if name == "delete":
            each.add_argument("-y", "--yes", action="store_true")
            each.add_argument("--no-wait", action="store_true")
    add_switch(verb.add(endpoint, "list", _list_endpoints, "the endpoints"), "--local",
               "(every endpoint is local here)")
    regenerate = verb.add(endpoint, "regenerate-keys", _regenerate, "a new primary or "
                          "secondary key")
    regenerate.add_argument("-n", "--name", required=True)
    regenerate.add_argument("--key-type", default="primary", help="primary or secondary")
    regenerate.add_argument("--no-wait", action="store_true", help="(local: at once)")
    add_update_invoke(endpoint, verb)
    add_deployments(groups, verb)


def add_update_invoke(endpoint: argparse._SubParsersAction, verb: type[Verb]) -> None:
    update = verb.add(endpoint, "update", _update_endpoint, "set traffic and mirror traffic")
    update.add_argument("-n", "--name", required=True)
    update.add_argument("-r", "-t", "--traffic", help='"blue=90 green=10"')
    update.add_argument("--mirror-traffic", help='"green=10"')
    update.add_argument("-f", "--file", type=Path, help="(an endpoint spec: create -f updates)")
    add_sets(update, "set a field of the endpoint")
    update.add_argument("--no-wait", action="store_true", help="(local: updated at once)")
    update.add_argument("-e", "--web", action="store_true", help="(Studio: not here)")
    add_switch(update, "--local", "(every endpoint is local here)")
    invoke = verb.add(endpoint, "invoke", _invoke, "send a request to the endpoint")
    invoke.add_argument("-n", "--name", required=True)
    invoke.add_argument("-r", "--request-file", required=True, type=Path)
    invoke.add_argument("-d", "--deployment-name")
    add_switch(invoke, "--local", "(every endpoint is local here)")


def add_deployments(groups: argparse._SubParsersAction, verb: type[Verb]) -> None:
    deployment = groups.add_parser("online-deployment", help="local online deployments") \
        .add_subparsers(dest="verb", required=True,
                        metavar="{create,update,show,list,get-logs,delete}")
    for name in ("create", "update"):
        _deployment_arguments(verb.add(deployment, name, _create_deployment, f"{name} a "
                                       "deployment: its server started in its endpoint",
                                       az_debug=False))
    for name, handler in (("show", _show_deployment), ("get-logs", _logs),
                          ("delete", _delete_deployment)):
        each = verb.add(deployment, name, handler, f"{name} a deployment")
        each.add_argument("-n", "--name", required=True)
        each.add_argument("-e", "--endpoint-name", required=True)
        add_switch(each, "--local", "(every deployment is local here)")
        if name == "show":
            each.add_argument("--web", action="store_true", help="(Studio: not here)")
        if name == "get-logs":
            each.add_argument("-l", "--lines", type=int)
            each.add_argument("-c", "--container", help="(one server here: its log)")
        if name == "delete":
            each.add_argument("-y", "--yes", action="store_true")
            each.add_argument("--no-wait", action="store_true")
    listing = verb.add(deployment, "list", _list_deployments, "the endpoint's deployments")
    listing.add_argument("-e", "--endpoint-name", required=True)
    add_switch(listing, "--local", "(every deployment is local here)")


def _deployment_arguments(each: argparse.ArgumentParser) -> None:
    """online-deployment create|update's arguments: az's, then azml's own (local only)."""
    each.add_argument("-f", "--file", required=each.prog.endswith("create"), type=Path,
                      help="its spec (update: else the one the deployment was made of)")
    each.add_argument("-e", "--endpoint-name")
    each.add_argument("-n", "--name", help="the deployment's name (over the spec's)")
    add_sets(each)
    each.add_argument("--no-wait", action="store_true",
                      help="(local: the server is up when create returns)")
    each.add_argument("--all-traffic", action="store_const", const="1", dest="traffic",
                      default="0")
    add_switch(each, "--vscode-debug", "the server waits for VS Code to attach (as --debug)")
    add_switch(each, "--local", "(Docker: not here)")
    add_switch(each, "--local-enable-gpu", "(the server sees this machine's devices)")
    each.add_argument("--web", action="store_true", help="(Studio: not here)")
    each.add_argument("--package-model", action="store_true",
                      help="(its environment is built from the spec here in any case)")
    each.add_argument("--skip-script-validation", action="store_true")
    each.add_argument("--initial-traffic", choices=["auto", "1", "0"], dest="traffic",
                      default="0", help="local only: auto gives it all traffic when no "
                      "deployment takes any yet")
    each.add_argument("--model", help="local only: serve this model folder instead")
    add_debug_arguments(each, bare=True)


def _local_note(args: argparse.Namespace) -> None:
    if getattr(args, "local", False):
        note("--local runs Azure's Docker image; here every endpoint is local, without Docker")
    _web_note(args)


def _web_note(args: argparse.Namespace) -> None:
    if getattr(args, "web", False):
        note("--web opens Azure's Studio; a local endpoint has no page: azml online-endpoint "
             "show prints it")


def _create_endpoint(session: Session, args: argparse.Namespace) -> object:
    _local_note(args)
    sets = set_values(args.sets) + ([f"auth_mode={args.auth_mode}"] if args.auth_mode else [])
    return session.create_endpoint(args.file, name=args.name, port=args.port,
                                   auth=args.auth or "", sets=tuple(sets))


def _show_endpoint(session: Session, args: argparse.Namespace) -> object:
    _web_note(args)
    return session.show_endpoint(args.name)


def _list_endpoints(session: Session, args: argparse.Namespace) -> object:  # noqa: ARG001
    return session.list_endpoints()


def _delete_endpoint(session: Session, args: argparse.Namespace) -> None:
    session.delete_endpoint(args.name)


TRAFFIC = ("traffic", "mirror_traffic")


def _update_endpoint(session: Session, args: argparse.Namespace) -> object:
    """az's generic update: the spec (-f) or the endpoint as recorded, --set over it, then
    --traffic and --mirror-traffic (--set traffic.<deployment>=N: over the live traffic)."""
    _local_note(args)
    sets = [s for s in set_values(args.sets) if not s.startswith(("traffic.", "mirror_traffic."))]
    splits = {key: _traffic_over(session, args, key) for key in TRAFFIC}
    updated = None
    if args.file is not None:
        updated = session.create_endpoint(args.file, name=args.name, sets=tuple(sets))
    elif sets:
        updated = session.update_endpoint(args.name, tuple(sets))
    if updated is None or any(splits.values()):
        updated = session.update_traffic(args.name, traffic=splits["traffic"],
                                         mirror=splits["mirror_traffic"])
    return updated


def _traffic_over(session: Session, args: argparse.Namespace, key: str) -> str | None:
    """--traffic (or --mirror-traffic) as given, else the live split with --set key.<d>=N
    over it, as az's generic update sets one entry of the endpoint's dict."""
    given = getattr(args, key)
    pairs = [s[len(key) + 1:] for s in set_values(args.sets) if s.startswith(key + ".")]
    if given or not pairs:
        return given
    split = {str(k): str(v) for k, v in (session.show_endpoint(args.name).get(key) or {})
             .items()}
    split.update(pair.partition("=")[::2] for pair in pairs)
    return " ".join(f"{k}={v}" for k, v in split.items())


def _invoke(session: Session, args: argparse.Namespace) -> object:
    return session.invoke(args.name, args.request_file, deployment=args.deployment_name)


def _regenerate(session: Session, args: argparse.Namespace) -> None:
    session.regenerate_endpoint_key(args.name, args.key_type)


def _credentials(session: Session, args: argparse.Namespace) -> object:
    return session.endpoint_credentials(args.name)


def _create_deployment(session: Session, args: argparse.Namespace) -> object:
    from mlops.api.endpoints import DeploymentRequest  # the engine, for this verb alone

    _local_note(args)
    return session.create_deployment(DeploymentRequest(
        spec=args.file, endpoint=args.endpoint_name, traffic=args.traffic, model=args.model,
        debug=DebugRequest.parse("true" if args.vscode_debug and not args.debug else args.debug,
                                 args.debug_port), name=args.name,
        sets=tuple(set_values(args.sets))))


def _show_deployment(session: Session, args: argparse.Namespace) -> object:
    _web_note(args)
    return session.show_deployment(args.endpoint_name, args.name)


def _list_deployments(session: Session, args: argparse.Namespace) -> object:
    return session.list_deployments(args.endpoint_name)


def _logs(session: Session, args: argparse.Namespace) -> object:
    return session.deployment_logs(args.endpoint_name, args.name, lines=args.lines)


def _delete_deployment(session: Session, args: argparse.Namespace) -> None:
    session.delete_deployment(args.endpoint_name, args.name)
