"""YAML read with bounded memory and time, whatever the file holds.

A YAML file can be small and still expand to billions of values: an anchor (`&a`) is a node,
an alias (`*a`) a reference to it, and nine levels of nine aliases are 9**9 values once loaded
(the "billion laughs"). A list nested 20,000 deep is a few kilobytes that overflows a recursive
reader. Before anything is built, the file's events are read once, iteratively (the parser's
event stream never expands an alias): the nesting depth, and the number of values the file
would expand to, counting each alias as the size of the node it names, are checked against
limits, and a file past either is refused at the line where it crosses it. What passes is
built as usual; azure-ai-ml (and PyYAML) would build the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from mlops.errors import LocalRunError

MAX_DEPTH = 256  # nested mappings and lists; Azure's deepest specs nest about a dozen
MAX_VALUES = 1_000_000  # scalars and collections once every alias is expanded
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


@dataclass
class _Scan:
    stack: list[_Frame] = field(default_factory=list)
    anchors: dict[str, int] = field(default_factory=dict)  # anchor -> expanded size
    total: int = 0

    def add(self, size: int, anchor: str | None, line: int) -> None:
        """A finished node of `size` values: into its parent, or the document's total."""
        if anchor:
            self.anchors[anchor] = size
        if self.stack:
            self.stack[-1].size += size
        else:
            self.total += size
        if self.total + sum(f.size for f in self.stack) > MAX_VALUES:
            raise YamlTooLarge(f"it expands to more than {MAX_VALUES:,} values through its "
                               "aliases (*name), which a safe reader refuses; write the values "
                               "out, or use fewer nested aliases", line)


def check(text: str) -> None:
    """Raise YamlTooLarge when the text nests past MAX_DEPTH or expands past MAX_VALUES."""
    scan = _Scan()
    for event in yaml.parse(text, Loader=_LOADER):
        line = event.start_mark.line + 1 if event.start_mark else 0
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
