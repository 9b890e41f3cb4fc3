"""`--set` and `--remove` exactly as `az ml job create` applies them.

The ml extension splits each `--set KEY=VALUE` at the first `=` and passes the value through as a
string (`--set inputs.epochs=1` gives the string "1"; `--set inputs.flag=true` the string "true");
azure-ai-ml then sets it on the YAML dict with pydash's dotted paths, refusing a path that runs
through a reference string (`inputs.data.path` when `inputs.data` is `azureml:x@latest`).
The same list goes to azure-ai-ml's validator (`params_override`), so both see one spec.
apply_sets is azure-ai-ml's own hook (PathAwareSchema.add_param_overrides) restated, because
importing the SDK's schema package costs seconds on every rerun that validation skips;
tests/test_local_runtime.py runs both on the same cases, so a change in the SDK fails a test.
"""

from __future__ import annotations

from pathlib import Path

from mlops.errors import LocalRunError
from mlops.specs import SpecData


def parse_sets(items: list[str], spec: Path) -> list[dict[str, str]]:
    """["a.b=1", "c=x=y"] -> [{"a.b": "1"}, {"c": "x=y"}], as the CLI's OverridePropertiesBySet."""
    overrides = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LocalRunError(f"{spec}: --set {item!r} is not KEY=VALUE "
                                "(example: --set inputs.epochs=1)")
        overrides.append({key.strip(): value})
    return overrides


def apply_sets(data: SpecData, overrides: list[dict[str, str]], spec: Path) -> SpecData:
    if not overrides:
        return data
    import pydash  # a tenth of a second of imports: only where a value is set

    for override in overrides:
        for key, value in override.items():
            layer = data
            for token in key.split("."):
                if isinstance(layer, str):
                    raise LocalRunError(f"{spec}: Cannot use '--set' on properties defined by "
                                        f"reference strings: --set {key} (replace the whole "
                                        f"value instead, e.g. --set {key.rsplit('.', 1)[0]}=...)")
                if isinstance(layer, list):  # azure-ai-ml fails here ('list' has no 'get')
                    raise LocalRunError(f"{spec}: --set {key}: az ml cannot set a value inside "
                                        "a list (azure-ai-ml fails with \"'list' object has no "
                                        "attribute 'get'\"); edit the YAML instead")
                layer = layer.get(token) if isinstance(layer, dict) else None
            try:
                pydash.objects.set_(data, key, value)
            except (AttributeError, TypeError) as err:
                raise LocalRunError(f"{spec}: --set {key}: a part of this path is not a mapping "
                                    f"({err})") from None
    return data


def apply_removals(data: SpecData, keys: list[str], spec: Path) -> SpecData:
    """`--remove early_termination`, as az's generic update arguments take it."""
    for key in keys:
        node, parts = data, key.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            raise LocalRunError(f"{spec}: --remove {key}: no such key in the spec")
        del node[parts[-1]]
    return data
