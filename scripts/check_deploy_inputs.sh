#!/usr/bin/env bash
# Reject workflow inputs that are not a model reference / a list of percentages, before any of
# them reaches a command line. usage: check_deploy_inputs.sh <model> "<percent> ..."
set -euo pipefail
model="$1"; steps="$2"
if ! [[ "$model" =~ ^azureml:[A-Za-z0-9][A-Za-z0-9._-]{0,254}(@latest|:[A-Za-z0-9._-]+|@[A-Za-z0-9._-]+)$ ]]; then
  echo "model must look like azureml:<name>@latest or azureml:<name>:<version>" >&2
  exit 1
fi
for percent in $steps; do
  if ! [[ "$percent" =~ ^[0-9]{1,3}$ ]] || [ "$percent" -gt 100 ]; then
    echo "steps must be percentages from 0 to 100, got '$percent'" >&2
    exit 1
  fi
done
echo "inputs OK: $model, traffic steps: $steps"
