"""azure-ai-ml's verdicts as findings at the file, line and key they are about.

The SDK reports in two shapes, both keyed by YAML path: its loader raises marshmallow's
ValidationError, whose `messages` nest like the spec ({"outputs": {"model": {"value": {"mode":
["..."]}}}}, a list of one dict per alternative under a union field); its deeper validation
returns diagnostics carrying a dotted `yaml_path` and, for a component a pipeline loads from
another file, that file's path. Anything else (a missing conda file, a file it cannot read) is
a whole-file finding with its message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mlops.specs import Finding, Spec, SpecError, load_spec, read_yaml

FIX = "fix the field the message names"
# marshmallow's Dict fields wrap each value's errors in {"value": ...}; not a key of the spec
DICT_VALUE = "value"


# what the SDK says of an alternative the value never claimed to be (a registry path, a URL)
GENERIC = re.compile(r"^(In order to specify|Not a valid (URL|integer|number|string|boolean)|"
                     r"Anonymous assets)")
MISSING = "Missing data for required field"


def _size(errors) -> int:
    if isinstance(errors, dict):
        return sum(_size(v) for v in errors.values())
    if isinstance(errors, list) and any(not isinstance(v, str) for v in errors):
        return min(_size(v) for v in errors)
    return 1


def _generic(errors) -> int:
    return sum(bool(GENERIC.match(message)) for _, message in flatten(errors))


def _missing(errors) -> int:
    return sum(message.startswith(MISSING) for _, message in flatten(errors))


def _fewest(alternatives: list) -> object:
    """Under a union field, the alternative that failed least is the one the author meant; of
    equals, the one with the fewest generic complaints, then the fewest keys it wants that the
    value lacks (an inline environment is not the named one: its missing conda file is why)."""
    return min(alternatives,
               key=lambda errors: (_size(errors), _generic(errors), _missing(errors)))


def flatten(messages, prefix: tuple = ()) -> list[tuple[tuple, str]]:
    """(key path, message) for every leaf of marshmallow's nested `messages`."""
    if isinstance(messages, str):
        return [(prefix, messages)]
    if isinstance(messages, list):
        if any(not isinstance(m, str) for m in messages):  # one entry per union alternative
            return flatten(_fewest(messages), prefix)
        return [pair for m in messages for pair in flatten(m, prefix)]
    found = []
    for key, value in (messages or {}).items():
        key = str(key)
        inner = prefix if key in ("_schema", DICT_VALUE) else (*prefix, key)
        found += flatten(value, inner)
    return found


def _clean(message: str) -> str:
    return " ".join(str(message).split()).rstrip(".:")


def _embedded(text: str):
    """azure-ai-ml re-raises the loader's error with its messages rendered as JSON inside prose
    ("Validation for CommandJobSchema failed: {...} Visit this link ..."): that JSON, or None."""
    start = text.find("{")
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else None
    except ValueError:
        return None


def from_loader(spec: Spec, messages) -> list[Finding]:
    if isinstance(messages, str):
        messages = _embedded(messages) or messages
    elif isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], str):
        messages = _embedded(messages[0]) or messages
    found, seen = [], set()
    for path, message in flatten(messages):
        key = ".".join(path)
        if (key, message) not in seen:
            seen.add((key, message))
            found.append(spec.finding(key, f"azure-ai-ml: {_clean(message)}", FIX))
    return found


def _spec_at(local_path, spec: Spec) -> Spec:
    if not local_path or Path(local_path).resolve() == spec.path.resolve():
        return spec
    try:
        return load_spec(local_path)
    except SpecError:
        return spec


UNRESOLVED_BINDING = re.compile(r"Failed to find referenced source for input binding "
                                r"\$\{\{parent\.jobs\.([^.}]+)\.outputs\.")


def needs_workspace(spec: Spec, message: str) -> bool:
    """A binding to an output of a node whose component is registered (`azureml:<name>:<v>`):
    offline, azure-ai-ml cannot see that component's outputs; `az ml job create` fetches the
    component from the workspace before it validates, so Azure does not refuse it here."""
    match = UNRESOLVED_BINDING.search(message)
    if not match:
        return False
    node = (spec.data.get("jobs") or {}).get(match.group(1))
    component = node.get("component") if isinstance(node, dict) else None
    return isinstance(component, str) and component.startswith("azureml:")


def from_diagnostics(spec: Spec, diagnostics) -> list[Finding]:
    found = []
    for diagnostic in diagnostics:
        where = _spec_at(getattr(diagnostic, "local_path", None), spec)
        key = str(getattr(diagnostic, "yaml_path", "") or "")
        key = "" if key in ("*", ".") else key
        found.append(where.finding(key, f"azure-ai-ml: {_clean(diagnostic.message)}", FIX))
    return found


def from_other(spec: Spec, err: Exception) -> list[Finding]:
    if isinstance(err, RecursionError) and (cycle := component_cycle(spec.path)):
        chain = " -> ".join(_display(p, spec.path) for p in cycle)
        return [spec.finding("", "azure-ai-ml: maximum recursion depth exceeded: a component "
                             f"uses itself ({chain})", "a pipeline component cannot contain "
                             "itself: break the cycle")]
    text = str(err)
    for _ in range(3):  # the SDK nests JSON-escaped JSON inside some messages
        text = text.replace('\\"', '"').replace("\\n", " ")
    inner = re.findall(r'"([^"]+)":\s*\[\s*"([^"]+)"', text)  # {field: [msg]} in the text
    if inner:
        return [spec.finding(field, f"azure-ai-ml: {_clean(msg)}", FIX) for field, msg in inner[:3]]
    return [spec.finding(_named_value(spec.data, text),
                         f"azure-ai-ml: {' '.join(text.split())[:300]}", FIX)]


def _leaves(data, prefix: tuple = ()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*prefix, str(key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _leaves(value, (*prefix, str(index)))
    elif isinstance(data, str):
        yield prefix, data


def _named_value(data, text: str) -> str:
    """The key whose value the message quotes (a missing file's name), else "" (the file)."""
    quoted = [(len(value), ".".join(path)) for path, value in _leaves(data)
              if len(Path(value).name) >= 4 and Path(value).name in text]
    return max(quoted)[1] if quoted else ""


def component_cycle(path: Path) -> list[Path] | None:
    """The first chain of local component files that leads back to one of its own (a.yml ->
    b.yml -> a.yml), following every `component:` or `trial:` that names a file; None."""
    cleared: set[Path] = set()  # files none of whose components leads back (each read once)

    def visit(file: Path, chain: list[Path]) -> list[Path] | None:
        if file in chain:
            return [*chain[chain.index(file):], file]
        if file in cleared or len(chain) > 200:
            return None
        for named in _component_files(file):
            if (found := visit(named, [*chain, file])) is not None:
                return found
        cleared.add(file)
        return None

    return visit(Path(path).resolve(), [])


def _component_files(file: Path) -> list[Path]:
    try:
        data = read_yaml(file.read_text(errors="replace"))
    except (OSError, SpecError, ValueError):
        return []
    named = [value for keys, value in _leaves(data) if keys and keys[-1] in ("component",
             "trial") and value.lower().endswith((".yml", ".yaml"))
             and not value.startswith("azureml:")]
    return [(file.parent / value.removeprefix("file:")).resolve() for value in named]


def _display(path: Path, spec: Path) -> str:
    try:
        return str(path.relative_to(Path(spec).resolve().parent))
    except ValueError:
        return str(path)
