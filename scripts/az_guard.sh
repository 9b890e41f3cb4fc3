#!/usr/bin/env bash
# Fail fast, with one line saying what to do, unless `az` + the ml extension + a login are there.
# usage: az_guard.sh <pinned ml extension version>
set -u
pinned="${1:-}"
if ! command -v az >/dev/null 2>&1; then
  echo "az-guard: the Azure CLI is not installed: see https://aka.ms/installazurecli, then run: az extension add --name ml --version ${pinned}" >&2
  exit 4
fi
version=$(az extension show --name ml --query version --output tsv 2>/dev/null) || version=""
if [ -z "$version" ]; then
  echo "az-guard: the Azure CLI 'ml' extension is missing: run: az extension add --name ml --version ${pinned}" >&2
  exit 4
fi
if [ -n "$pinned" ] && [ "$version" != "$pinned" ]; then
  echo "az-guard: note: ml extension $version installed, this repo is tested with $pinned (az extension update --name ml --version $pinned)" >&2
fi
if ! az account show --output none 2>/dev/null; then
  echo "az-guard: not logged in to Azure: run: az login (in GitHub Actions: azure/login with OIDC)" >&2
  exit 4
fi
