#!/usr/bin/env bash
# Fetch and cache access tokens right after an OIDC login: the GitHub OIDC assertion expires
# within minutes, the access tokens it buys last about an hour (az_wait.sh logs in again with a
# fresh assertion when a longer wait outlives them).
set -euo pipefail
for resource in https://management.azure.com/ https://ml.azure.com/ https://storage.azure.com/; do
  az account get-access-token --resource "$resource" --output none
done
echo "cached access tokens for ARM, Azure ML and Storage"
