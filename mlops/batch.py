"""Run a batch deployment spec locally in the foreground, as `az ml batch-endpoint invoke` runs it.

    python -m mlops.batch endpoints/batch/deployment.yml --input <folder|zip|azureml:..>
                          [--input-type mltable] [--model DIR] [--set KEY=VALUE ...]

`azml batch-endpoint invoke` starts this runner in the background (what make batch-local calls);
how it runs: mlops/endpoints/batch_run.py. Exit codes: 0 when every mini-batch completed; 1 when
the run failed; 2 for a spec or input error; 128 + the signal number when interrupted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlops import exit_code, exit_with
from mlops.endpoints.batch_run import BatchRequest, run_local
from mlops.runtime import DebugRequest, add_debug_arguments, usable_cores


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deployment", type=Path, help="a model batch deployment spec")
    parser.add_argument("--input", required=True, help="a folder of images, or a zip; or a "
                        "data asset (azureml:<name>@latest), a job's output, a mapped URI")
    parser.add_argument("--input-type", default="",
                        choices=("uri_folder", "uri_file", "mltable"),
                        help="mltable: score the rows of the MLTable folder --input names "
                        "(default: a data asset's own type, else uri_folder)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a deployment spec value, as az ml batch-deployment "
                        "create --set does")
    parser.add_argument("--model", help="model folder (default: as make serve-local picks it)")
    parser.add_argument("--run-dir", type=Path)
    parser.add_argument("--job-name", help="the job's name (default: its run folder's)")
    parser.add_argument("--endpoint", default="", help="the batch endpoint invoked (its jobs)")
    parser.add_argument("--max-procs", type=int, default=usable_cores())
    parser.add_argument("--envs", dest="env_file", type=Path, default=None)
    parser.add_argument("--assets", dest="asset_file", type=Path, default=None)
    add_debug_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    request = BatchRequest(
        deployment=args.deployment, input=args.input, sets=args.sets, model=args.model,
        run_dir=args.run_dir, job_name=args.job_name, endpoint=args.endpoint,
        max_procs=args.max_procs, env_file=args.env_file, asset_file=args.asset_file,
        debug=DebugRequest.parse(args.debug, args.debug_port), input_type=args.input_type)
    return exit_code(lambda: run_local(request))


if __name__ == "__main__":
    exit_with(main)
