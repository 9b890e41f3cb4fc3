"""A local online endpoint from a deployment spec, without Docker (make serve-local).

    python -m mlops.serve start  [--deployment endpoints/blue.yml] [--model DIR] [--port 5001]
    python -m mlops.serve invoke [--request endpoints/sample-request.json] [--port 5001]
    python -m mlops.serve stop | latest

How the server runs: mlops/endpoints/online.py. Exit codes: 0; 1 when the server failed or a
request was refused; 2 for a spec or input error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops import exit_code, exit_with
from mlops.endpoints import online
from mlops.environments.envspec import ENV_MAP
from mlops.runtime.debugging import DebugRequest, add_arguments
from mlops.runtime.uris import ASSET_MAP
from mlops.specs import ROOT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Local online endpoint (no Docker).")
    parser.add_argument("action", choices=["start", "stop", "invoke", "latest"])
    parser.add_argument("--deployment", type=Path, default=ROOT / "endpoints" / "blue.yml")
    parser.add_argument("--model", help="model folder (default: the newest local run's)")
    parser.add_argument("--request", type=Path,
                        default=ROOT / "endpoints" / "sample-request.json")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--assets", dest="asset_file", type=Path, default=ASSET_MAP)
    parser.add_argument("--envs", dest="env_file", type=Path, default=ENV_MAP)
    add_arguments(parser)
    return parser


def latest() -> int:
    print(online.latest_model())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = DebugRequest.parse(args.debug, args.debug_port)
    request = online.ServeRequest(deployment=args.deployment, model=args.model, port=args.port,
                                  asset_file=args.asset_file, env_file=args.env_file,
                                  debug=debug)
    actions = {"start": lambda: online.start(request),
               "invoke": lambda: online.invoke(args.request, args.port),
               "stop": online.stop, "latest": latest}
    return exit_code(actions[args.action])


if __name__ == "__main__":
    exit_with(main)
