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

# In GitHub Actions, a wait longer than the cached access tokens logs in again with a fresh
# OIDC assertion from the runner (the first one expired minutes after the job started).
relogin() {
  [ -n "${ACTIONS_ID_TOKEN_REQUEST_URL:-}" ] && [ -n "${AZURE_CLIENT_ID:-}" ] || return 1
  token=$(curl -fsS -H "Authorization: bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN" \
    "$ACTIONS_ID_TOKEN_REQUEST_URL&audience=api://AzureADTokenExchange" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])') || return 1
  az login --service-principal --username "$AZURE_CLIENT_ID" --tenant "$AZURE_TENANT_ID" \
    --federated-token "$token" --output none
}

# A line when the status changes and every PROGRESS_SECONDS while it holds, so a long wait
# (queued for nodes, an image build, hours of training) shows it is alive.
last=""; said=$SECONDS
while true; do
  if ! status=$(az ml job show --name "$name" "$@" --query status --output tsv); then
    relogin && continue
    exit 2
  fi
  if [ "$status" != "$last" ] || [ $((SECONDS - said)) -ge "${PROGRESS_SECONDS:-300}" ]; then
    printf 'job %s: %s (%dm%02ds waited)\n' "$name" "$status" $((SECONDS / 60)) $((SECONDS % 60))
    last="$status"; said=$SECONDS
  fi
  case "$status" in
    Completed) echo "job $name: Completed"; exit 0 ;;
    Failed) echo "job $name: Failed (make stream AZ_JOB=$name shows the log)"; exit 1 ;;
    Canceled|NotResponding|Paused) echo "job $name: $status"; exit 2 ;;
  esac
  sleep "${POLL_SECONDS:-30}"
done
