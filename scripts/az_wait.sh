#!/usr/bin/env bash
# Print a submitted job's Studio URL; with WAIT=1 poll it to a terminal state.
# Exit codes: 0 Completed, 1 Failed, 2 other terminal state (Canceled, NotResponding, Paused).
# usage: az_wait.sh <job name> [az workspace args...]
set -u
name="$1"; shift
url=$(az ml job show --name "$name" "$@" --query 'services.Studio.endpoint' --output tsv)
echo "job: $name"
echo "studio: $url"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  printf '### Azure ML job\n- name: `%s`\n- [open in Studio](%s)\n' "$name" "$url" >> "$GITHUB_STEP_SUMMARY"
fi
[ "${WAIT:-0}" = "1" ] || exit 0
while true; do
  status=$(az ml job show --name "$name" "$@" --query status --output tsv) || exit 2
  case "$status" in
    Completed) echo "job $name: Completed"; exit 0 ;;
    Failed) echo "job $name: Failed (make stream AZ_JOB=$name shows the log)"; exit 1 ;;
    Canceled|NotResponding|Paused) echo "job $name: $status"; exit 2 ;;
  esac
  sleep "${POLL_SECONDS:-30}"
done
