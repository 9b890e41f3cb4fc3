#!/usr/bin/env bash
# Print `live=<deployment with traffic>` and `candidate=<the other of blue/green>` for an
# endpoint (live is empty when nothing serves yet). usage: az_slots.sh <endpoint> [az args...]
set -euo pipefail
endpoint="$1"; shift
traffic=$(az ml online-endpoint show --name "$endpoint" "$@" --query traffic --output json)
live=$(python3 -c 'import json,sys; t=json.load(sys.stdin) or {}; live=[k for k,v in sorted(t.items(), key=lambda kv: -kv[1]) if v > 0]; print(live[0] if live else "")' <<<"$traffic")
if [ "$live" = "blue" ]; then candidate=green; else candidate=blue; fi
[ -n "$live" ] || candidate=blue
echo "live=$live"
echo "candidate=$candidate"
