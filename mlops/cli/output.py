"""What `az` does with a command's result: `--query` (JMESPath) first, then `-o`/`--output`:
json (the default: indented, keys sorted), jsonc, yaml, tsv (one line per item, tab-separated
scalar values, keys sorted), table (columns of the scalar values), none. As the Azure CLI's
output layer (knack) renders each."""

from __future__ import annotations

import json
from typing import Any

import yaml

from mlops.errors import LocalRunError

FORMATS = ("json", "jsonc", "yaml", "yamlc", "tsv", "table", "none")


def query(result: Any, expression: str | None) -> Any:
    """`--query`: the JMESPath expression applied to the result."""
    if not expression:
        return result
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.search(expression, result)
    except JMESPathError as err:
        raise LocalRunError(f"--query {expression!r}: {err}") from None


def render(result: Any, output: str) -> str:
    """The text az prints for `result` in format `output`."""
    if result is None or output == "none":
        return ""
    if output in ("json", "jsonc"):
        return json.dumps(result, ensure_ascii=False, indent=2, sort_keys=True,
                          separators=(",", ": "), default=str) + "\n"
    if output in ("yaml", "yamlc"):
        return yaml.safe_dump(json.loads(json.dumps(result, default=str)),
                              default_flow_style=False, allow_unicode=True)
    if output == "tsv":
        rows = result if isinstance(result, list) else [result]
        return "".join(_tsv_row(row) + "\n" for row in rows)
    return _table(result)


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return str(len(value))
    if isinstance(value, dict):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _tsv_row(row: Any) -> str:
    if isinstance(row, dict):
        return "\t".join(_scalar(value) for _, value in sorted(row.items()))
    if isinstance(row, list):
        return "\t".join(_scalar(value) for value in row)
    return _scalar(row)


def _table(result: Any) -> str:
    """Columns of each item's scalar values (nested ones left out, as az's table does)."""
    rows = result if isinstance(result, list) else [result]
    items = [r if isinstance(r, dict) else {"Result": r} for r in rows]
    columns = sorted({k for item in items for k, v in item.items()
                      if not isinstance(v, dict | list)})
    if not columns:
        return ""
    cells = [[_scalar(item.get(c)) for c in columns] for item in items]
    heads = [c[:1].upper() + c[1:] for c in columns]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"
