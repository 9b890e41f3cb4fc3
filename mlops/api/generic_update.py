"""az's generic update (`az <group> update --set/--add/--remove [--force-string]`), over the
JSON-ready object the verb's `show` prints, as azure-cli's own (azure/cli/core/commands/arm.py:
set_properties, add_properties, remove_properties) applies it: each argument in the order given;
a value parsed as JSON (else a Python literal, else kept as text) unless --force-string; a path
of dotted names and `[index]` or `[key=value]` selectors; a name the object lacks refused with
the names it has. Its refusals are the input's (exit 2), in azure-cli's words."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from mlops.errors import LocalRunError

SET_USAGE = "`--set property1.property2=<value>`"
ADD_USAGE = "`--add property.listProperty <key=value, string or JSON string>`"
REMOVE_USAGE = "`--remove property.list <indexToRemove>` OR `--remove propertyToRemove`"
SELECTOR = re.compile(r"\[(.*)\]")
SEGMENT = re.compile(r"(\[.*?\])|([^.]+)")
Target = dict[str, object]  # the object as `show` printed it (JSON-ready)


@dataclass(frozen=True)
class Edit:
    """One of az's generic update arguments: `--set a=1 b=2`, `--add path v...`, `--remove
    path [index]`."""

    action: str  # "set", "add", "remove"
    values: tuple[str, ...]


def apply(target: Target, edits: list[Edit], *, force_string: bool = False) -> Target:
    """`target` with every edit applied in order (it is changed in place and returned)."""
    for edit in edits:
        try:
            if edit.action == "set":
                for expression in edit.values:
                    _set(target, expression, force_string)
            elif edit.action == "add":
                _add(target, list(edit.values), force_string)
            else:
                _remove(target, list(edit.values))
        except ValueError:
            usage = {"set": SET_USAGE, "add": ADD_USAGE}.get(edit.action, REMOVE_USAGE)
            raise LocalRunError(f"invalid syntax: {usage}") from None
    return target


def _parsed(value: str, force_string: bool) -> object:
    """azure-cli's shell_safe_json_parse, falling back to the text: `1` is a number, `true` a
    boolean, `{"a": 1}` a mapping, `hello` (or anything else) the text itself."""
    if force_string:
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def _split(expression: str) -> tuple[str, str]:
    """KEY=VALUE at the first `=` outside [brackets]."""
    depth = False
    for at, char in enumerate(expression):
        if char == "[":
            depth = True
        elif char == "]":
            depth = False
        elif char == "=" and (not depth or expression.count("=") == 1):
            return expression[:at], expression[at + 1:]
    return expression, ""


def _path(text: str) -> list[str]:
    text = text.replace(".[", "[").replace("[", ".[")
    return [a or b for a, b in SEGMENT.findall(text)]


def _camel(name: object) -> object:
    if not isinstance(name, str):
        return name
    parts = name.split("_")
    return parts[0].lower() + "".join(p.capitalize() for p in parts[1:]) if len(parts) > 1 \
        else name


def _missing(instance: object, part: str, path: list[str]) -> LocalRunError:
    parent = ".".join(path[:-1]).replace(".[", "[")
    said = f"Couldn't find '{part}' in '{parent}'."
    if isinstance(instance, dict):
        return LocalRunError(f"{said} Available options: {sorted(map(_camel, instance))}")
    if isinstance(instance, list):
        return LocalRunError(f"{said} Available options: index into the collection "
                             f"'{parent}' with [<index>] or [<key=value>]")
    return LocalRunError(f"{said} '{parent}' does not support further indexing.")


def _step(instance: object, part: str, path: list[str]) -> object:
    selector = SELECTOR.match(part)
    if selector and not isinstance(instance, list):
        raise _missing(instance, part, path)
    if selector and "=" in selector.group(1):
        key, wanted = selector.group(1).split("=", 1)
        value = _parsed(wanted, False)
        found = [x for x in instance if isinstance(x, dict) and x.get(key) == value]
        if len(found) > 1:
            raise LocalRunError(f"non-unique key '{key}' found multiple matches on "
                                f"{path[-2] if len(path) > 1 else ''}. Key must be unique.")
        if not found:
            raise LocalRunError(f"item with value '{value}' doesn't exist for key '{key}' on "
                                f"{path[-2] if len(path) > 1 else ''}")
        return found[0]
    if selector:
        index = int(selector.group(1))
        try:
            return instance[index]
        except IndexError:
            raise LocalRunError(f"index {index} doesn't exist on "
                                f"{path[-2] if len(path) > 1 else ''}") from None
    if isinstance(instance, dict) and part in instance:
        return instance[part]
    raise _missing(instance, part, path)


def _find(instance: object, path: list[str]) -> object:
    for part in path:
        instance = _step(instance, part, path)
    return instance


def _set(root: Target, expression: str, force_string: bool) -> None:
    key, text = _split(expression)
    if not key.strip():
        raise LocalRunError("usage error: Empty key in --set. Correct syntax: --set KEY=VALUE "
                            "[KEY=VALUE ...]")
    value = _parsed(text, force_string)
    *path, name = _path(key)
    instance = _find(root, path)
    if instance is None:  # a key that holds null becomes a mapping, as azure-cli makes it
        _set(_find(root, path[:-1]), f"{path[-1]}={{}}", force_string)
        instance = _find(root, path)
    selector = SELECTOR.match(name)
    if selector and isinstance(instance, list):
        index = int(selector.group(1))
        if index >= len(instance):
            raise LocalRunError(f"index {index} doesn't exist on {name}")
        instance[index] = value
    elif isinstance(instance, dict) and not selector:
        instance[name] = value
    else:
        raise _missing(instance, name, key.split("."))


def _add(root: Target, values: list[str], force_string: bool) -> None:
    path = _path(values.pop(0))
    target = _find(root, path)
    if target is None:
        _set(_find(root, path[:-1]), f"{path[-1]}=[]", force_string)
        target = _find(root, path)
    if not isinstance(target, list):
        raise ValueError(path)
    entry: dict[str, str] = {}
    for value in values:
        if "=" in value:  # key=value pairs in a row make one mapping
            key, _, text = value.partition("=")
            entry[key] = text
            continue
        if entry:
            target.append(entry)
            entry = {}
        target.append(_parsed(value, force_string))
    if entry:
        target.append(entry)


def _remove(root: Target, values: list[str]) -> None:
    path = _path(values.pop(0))
    index = values.pop(0) if values else None
    if not index:
        _find(root, path)  # a name it lacks: refused with the names it has
        parent = _find(root, path[:-1])
        if not isinstance(parent, dict):
            raise ValueError(path)
        del parent[path[-1]]
        return
    target = _find(root, path)
    if not isinstance(target, list):
        raise LocalRunError(f"{path[-1]} doesn't exist")
    try:
        target.pop(int(index))
    except IndexError:
        raise LocalRunError(f"index {index} doesn't exist on {path[-1]}") from None
