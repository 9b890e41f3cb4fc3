"""YAML read with bounded memory and time, whatever the file holds.

A YAML file can be small and still expand to billions of values: an anchor (`&a`) is a node,
an alias (`*a`) a reference to it, and nine levels of nine aliases are 9**9 values once loaded
(the "billion laughs"). A list nested 20,000 deep is a few kilobytes that overflows a recursive
reader. Before anything is built, the file's events are read once, iteratively (the parser's
event stream never expands an alias): the nesting depth, the number of values the file writes
and the number it would expand to (each alias counting as the size of the node it names) are
checked against limits, and a file past one is refused at the line where it crosses it, with
the limit it crossed: a file that writes too many values is told so, not about aliases it does
not have. Every key, list item, scalar and collection is one value: a mapping of 750,000 keys
holds 1.5 million. What passes is built as usual; azure-ai-ml (and PyYAML) would build the
same data.

The limits are this reader's, not Azure's: MAX_VALUES (a million values, about a gigabyte once
built, with its line map) is eighty times the largest spec in the conformance corpus; MAX_CHARS
(64 MiB) bounds what is read before a value is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from mlops.errors import LocalRunError

MAX_DEPTH = 256  # nested mappings and lists; Azure's deepest specs nest about a dozen
MAX_VALUES = 1_000_000  # keys, items, scalars and collections, written or through aliases
MAX_CHARS = 64 * 2**20  # a spec's text, read before its values are counted
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlTooLarge(LocalRunError):
    """The file would nest too deep, or expand to too many values, to be read safely."""

    def __init__(self, what: str, line: int):
        super().__init__(what)
        self.line = line


@dataclass
class _Frame:
    anchor: str | None
    size: int = 1  # the collection itself


@dataclass(kw_only=True)
class _Scan:
    stack: list[_Frame] = field(default_factory=list)
    anchors: dict[str, int] = field(default_factory=dict)  # anchor -> expanded size
    total: int = 0  # values finished, aliases expanded
    written: int = 0  # values the text itself holds (an alias is one)

    def add(self, size: int, anchor: str | None, line: int) -> None:
        """A finished node of `size` values: into its parent, or the document's total."""
        if anchor:
            self.anchors[anchor] = size
        if self.stack:
            self.stack[-1].size += size
        else:
            self.total += size
        if self.total + sum(f.size for f in self.stack) > MAX_VALUES:
            raise YamlTooLarge(self.too_many(), line)

    def too_many(self) -> str:
        if self.written > MAX_VALUES:
            return (f"it holds more than {MAX_VALUES:,} values (every key, list item and "
                    "scalar counts), more than this reader takes for one spec; keep data in "
                    "a file the job reads (an input), not in the spec")
        return (f"it expands to more than {MAX_VALUES:,} values through its aliases (*name), "
                f"from {self.written:,} it writes itself: a safe reader refuses that; use fewer "
                "nested aliases")


def check(text: str) -> None:
    """Raise YamlTooLarge when the text is longer than MAX_CHARS, nests past MAX_DEPTH, or
    holds or expands to more than MAX_VALUES."""
    if len(text) > MAX_CHARS:
        raise YamlTooLarge(f"it is {len(text) / 2**20:.0f} MiB, more than the "
                           f"{MAX_CHARS // 2**20} MiB this reader takes for one spec; keep data "
                           "in a file the job reads (an input), not in the spec", 0)
    scan = _Scan()
    for event in yaml.parse(text, Loader=_LOADER):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, (yaml.CollectionStartEvent, yaml.ScalarEvent, yaml.AliasEvent)):
            scan.written += 1
        if isinstance(event, yaml.CollectionStartEvent):
            scan.stack.append(_Frame(event.anchor))
            if len(scan.stack) > MAX_DEPTH:
                raise YamlTooLarge(f"it nests more than {MAX_DEPTH} levels deep, which a safe "
                                   "reader refuses", line)
        elif isinstance(event, yaml.CollectionEndEvent):
            frame = scan.stack.pop()
            scan.add(frame.size, frame.anchor, line)
        elif isinstance(event, yaml.ScalarEvent):
            scan.add(1, event.anchor, line)
        elif isinstance(event, yaml.AliasEvent):
            scan.add(scan.anchors.get(event.anchor, 1), None, line)
