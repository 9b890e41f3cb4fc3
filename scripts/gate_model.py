"""The registration gate for a job trained on Azure: the same bar the pipeline's register step
sets (jobs/pipeline.yml: min_val_acc), applied to the metric the trainer logged.

    MLFLOW_TRACKING_URI=<workspace's> python scripts/gate_model.py --run <job> \
        [--metric best_val_acc] [--min 0.7]

Exits 0 when the run's metric reaches the bar, 1 when it does not (or was never logged), so
`make register` (and the train workflow) registers only a model that passes.
"""

from __future__ import annotations

import argparse
import os
import sys


def decide(metrics: dict, metric: str, minimum: float) -> tuple[bool, str]:
    value = metrics.get(metric)
    if value is None:
        return False, (f"run logged no {metric} (it logged: {', '.join(sorted(metrics)) or 'none'})"
                       ": not registering")
    if value < minimum:
        return False, f"{metric} {value:.4f} is below the gate {minimum}: not registering"
    return True, f"{metric} {value:.4f} passes the gate {minimum}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="the job (MLflow run) whose model it is")
    parser.add_argument("--metric", default="best_val_acc")
    parser.add_argument("--min", type=float, default=0.7, dest="minimum")
    args = parser.parse_args(argv)
    from mlflow.tracking import MlflowClient

    # the workspace's tracking URI, as make register passes it (not a process-wide default)
    metrics = MlflowClient(os.environ.get("MLFLOW_TRACKING_URI")).get_run(args.run).data.metrics
    ok, message = decide(metrics, args.metric, args.minimum)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
