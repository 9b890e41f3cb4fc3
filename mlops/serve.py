"""The local online endpoint, without Docker or Azure (make serve-local and its twins).

    python -m mlops.serve start [--deployment endpoints/blue.yml] [--endpoint-spec FILE]
                                [--model DIR] [--port 5001] [--auth none] [--all-traffic auto]
    python -m mlops.serve invoke [--request FILE] [--deployment-name green] [--endpoint NAME]
    python -m mlops.serve traffic "blue=90 green=10" [--mirror-traffic "green=0"]
    python -m mlops.serve mirror "green=10" [--endpoint NAME]
    python -m mlops.serve credentials | show | stop | latest [--endpoint NAME]

How it runs: mlops/endpoints/local_endpoint.py. Exit codes: 0; 1 when a server failed or a
request was refused; 2 for a spec or input error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops import exit_code, exit_with
from mlops.endpoints import endpoint_actions as actions
from mlops.endpoints import endpoint_stop, online
from mlops.runtime import DebugRequest, add_debug_arguments
from mlops.specs import ROOT

ACTIONS = ["start", "stop", "invoke", "traffic", "mirror", "credentials", "show", "latest"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Local online endpoint (no Docker).")
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("weights", nargs="?", default="", help="traffic/mirror: blue=90 green=10")
    parser.add_argument("--deployment", type=Path, default=ROOT / "endpoints" / "blue.yml")
    parser.add_argument("--endpoint-spec", type=Path, help="the endpoint's spec (default: the "
                        "one beside the deployment that its endpoint_name names)")
    parser.add_argument("--endpoint", help="a running local endpoint's name (default: the one)")
    parser.add_argument("--mirror-traffic", help="traffic: set the mirror traffic in the same "
                        "update (as --traffic with --mirror-traffic)")
    parser.add_argument("--deployment-name", help="invoke: send to this deployment by header")
    parser.add_argument("--model", help="model folder (default: the newest local run's)")
    parser.add_argument("--request", type=Path,
                        default=ROOT / "endpoints" / "sample-request.json")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--auth", choices=["", "none"], default="")
    parser.add_argument("--all-traffic", choices=["auto", "1", "0"], default="auto")
    parser.add_argument("--assets", dest="asset_file", type=Path, default=None)
    parser.add_argument("--envs", dest="env_file", type=Path, default=None)
    add_debug_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    request = online.ServeRequest(
        deployment=args.deployment, model=args.model, port=args.port,
        endpoint=args.endpoint_spec, auth=args.auth, all_traffic=args.all_traffic,
        asset_file=args.asset_file, env_file=args.env_file,
        debug=DebugRequest.parse(args.debug, args.debug_port))
    name = args.endpoint or None
    run = {"start": lambda: actions.start(request),
           "stop": lambda: endpoint_stop.stop(name),
           "invoke": lambda: actions.invoke(args.request, name=name,
                                            deployment=args.deployment_name),
           "traffic": lambda: actions.update(name, traffic=args.weights,
                                                  mirror=args.mirror_traffic),
           "mirror": lambda: actions.update(name, traffic=None, mirror=args.weights),
           "credentials": lambda: actions.credentials(name),
           "show": lambda: actions.show(name),
           "latest": lambda: print(online.latest_model()) or 0}
    return exit_code(run[args.action])


if __name__ == "__main__":
    exit_with(main)
