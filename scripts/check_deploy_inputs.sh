#!/usr/bin/env bash
# Reject workflow inputs that are not a model reference / a list of percentages, before any of
# them reaches a command line. usage: check_deploy_inputs.sh <model> "<percent> ..."
set -euo pipefail
model="$1"; steps="$2"
if ! [[ "$model" =~ ^azureml:[A-Za-z0-9][A-Za-z0-9._-]{0,254}(@latest|:[A-Za-z0-9._-]+|@[A-Za-z0-9._-]+)$ ]]; then
  echo "model must look like azureml:<name>@latest or azureml:<name>:<version>" >&2
  exit 1
fi
# rising whole percentages ending at 100 (scripts/rollout.py holds the rule; tested there)
checked=$(python3 "$(dirname "$0")/rollout.py" steps "$steps") || exit 1
echo "inputs OK: $model, traffic steps: $checked"
