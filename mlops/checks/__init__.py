"""Validation's rules beyond the schemas: lint (specs), lint_assets (what specs point at), skus
(VM sizes), overrides (`--set`/`--unset` on a loaded spec). The entry is mlops.validate."""
