"""Sweep benchmark: the repo's sweep spec run locally with and without its bandit policy.

Both sweeps run the real trainer on a real ImageFolder (default: ../shared's hymenoptera_data)
with the same seeded random sampler, so trial k gets the same parameters in both; each trial is
deterministic on CPU, so a trial that runs to the end scores the same in both. Prints the compute
seconds of each sweep (sum over trials), the saving, and whether the best trial is the same.

    python scripts/bench_sweep.py --data ../shared/data/hymenoptera_data
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def sweep(args, run_dir: Path, with_policy: bool, env: dict) -> dict:
    sets = [f"inputs.data.path={Path(args.data).resolve()}", "inputs.data.type=uri_folder",
            f"inputs.epochs={args.epochs}", f"inputs.image_size={args.image_size}",
            "inputs.batch_size=16", "inputs.weights=none", f"limits.max_total_trials={args.trials}",
            "limits.max_concurrent_trials=2"]
    if args.delay is not None:
        sets.append(f"early_termination.delay_evaluation={args.delay}")
    # --set passes strings, as the CLI does: a seeded sampler needs the spec itself changed
    spec = yaml.safe_load((ROOT / "jobs/sweep.yml").read_text())
    spec["sampling_algorithm"] = {"type": "random", "seed": args.seed}
    spec["trial"]["code"] = str(ROOT / "src")
    seeded = run_dir.parent / f"{run_dir.name}-sweep.yml"
    seeded.write_text(yaml.safe_dump(spec, sort_keys=False))
    command = [sys.executable, "-m", "mlops.run", str(seeded), "--run-dir", str(run_dir),
               *[a for s in sets for a in ("--set", s)]]
    if not with_policy:
        command += ["--remove", "early_termination"]
    label = "bandit" if with_policy else "no policy"
    print(f"running the sweep ({label}) ...", flush=True)
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads((run_dir / "sweep_summary.json").read_text())


def report(label: str, summary: dict) -> float:
    seconds = sum(t["seconds"] for t in summary["trials"])
    print(f"\n{label}: {seconds:.1f} compute seconds")
    for t in summary["trials"]:
        params = ", ".join(f"{k}={v:.5g}" for k, v in t["params"].items())
        print(f"  trial {t['trial']}: {params}  best_val_acc={t['metric']}  "
              f"{t['status']} after {t['intervals']} epoch(s), {t['seconds']:.1f}s")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/hymenoptera_data"))
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=10, help="the spec's own value")
    parser.add_argument("--delay", type=int, help="override the spec's delay_evaluation")
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
        policy = sweep(args, Path(tmp) / "bandit", True, env)
        baseline = sweep(args, Path(tmp) / "none", False, env)
    base_s = report("without early termination", baseline)
    policy_s = report("with the spec's bandit policy", policy)
    same_params = [t["params"] for t in baseline["trials"]] == \
        [t["params"] for t in policy["trials"]]
    best_base, best_policy = baseline["best_trial"], policy["best_trial"]
    same_best = best_base and best_policy and best_base["trial"] == best_policy["trial"]
    print(f"\nsame sampled parameters in both sweeps: {same_params}")
    print(f"compute saved by the bandit policy: {1 - policy_s / base_s:.0%} "
          f"({base_s:.1f}s -> {policy_s:.1f}s)   target >= 30%")
    print(f"same best trial: {bool(same_best)} (without: trial {best_base and best_base['trial']}"
          f", with: trial {best_policy and best_policy['trial']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
