"""Run an Azure ML CLI v2 job spec on this machine, as Azure would run it: no Docker, no Azure.

    python -m mlops.run jobs/train.yml [--set inputs.epochs=1 ...] [--run-dir runs/x]
        [--explain] [--from STEP | --only STEP[,STEP]] [--force-rerun]

The spec is checked as `az ml job create` checks it (azure-ai-ml's own loader and validation,
plus what the service refuses); `--set` works as the CLI's. Command jobs, sweep trials and
pipeline steps then run through one runtime (Session.run_job: mlops/orchestrators/jobs.py,
mlops/runtime/). The exit code is the job's; 2 when the spec cannot run; 128 + the signal
number when interrupted. `azml job run` is the same runner; `azml job create` starts this one
in the background.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from mlops import exit_code, exit_with
from mlops.api.session import Session
from mlops.runtime import DebugRequest, add_debug_arguments, add_selection_arguments, usable_cores


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run a job spec locally (no Docker, no Azure).")
    parser.add_argument("spec", help="a command, sweep or pipeline job spec")
    parser.add_argument("--set", action="append", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override a spec value, as az ml job create --set does")
    parser.add_argument("--sets", default="", metavar="'KEY=VALUE ...'",
                        help="overrides in one string, split as a shell splits words "
                             "(make's SET=\"inputs.title='two words' inputs.epochs=1\")")
    parser.add_argument("--remove", action="append", default=[], metavar="KEY",
                        help="delete a spec key, as az's generic --remove does")
    parser.add_argument("--assets", dest="asset_file", type=Path, default=None,
                        help="mapping of azureml: assets and URLs to local paths")
    parser.add_argument("--envs", dest="env_file", type=Path, default=None,
                        help="mapping of curated, registry and image environments to packages")
    parser.add_argument("--run-dir", type=Path, help="run in this folder: an earlier run's "
                        "resumes there (a pipeline's completed steps reused unless changed)")
    parser.add_argument("--max-procs", type=int, default=usable_cores(),
                        help="cap on processes run at once (default: the cores available)")
    add_debug_arguments(parser)
    add_selection_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        joined = shlex.split(args.sets)
    except ValueError as err:
        parser.error(f"--sets (SET=): {err}: close the quote")
    session = Session(asset_file=args.asset_file, env_file=args.env_file,
                      max_procs=args.max_procs, force_rerun=args.force_rerun,
                      debug=DebugRequest.parse(args.debug, args.debug_port),
                      explain=args.explain, from_step=args.from_step, only_steps=args.only_steps)
    sets = [s for group in args.set for s in group] + joined
    return exit_code(lambda: session.run_job(args.spec, sets=sets, removes=args.remove,
                                             run_dir=args.run_dir))


if __name__ == "__main__":
    exit_with(main)
