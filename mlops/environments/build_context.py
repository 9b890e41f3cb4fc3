"""Where a file a Dockerfile's install reads came from in its build context.

An install names its file by its path in the image (`conda env create -f /tmp/conda.yaml`,
`pip install -r /app/requirements/prod.txt`); the image got it from the context through a
COPY or ADD line, which may rename it (`COPY environment/conda.yaml /tmp/conda.yaml`) or copy a
whole folder (`COPY . /app`). The last copy that put something at that path is the one the
build saw, as Docker layers them.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

WILDCARDS = set("*?[")


@dataclass(frozen=True)
class Copy:
    """A COPY or ADD from the build context: its sources as written (context-relative, maybe
    wildcards), and where they land in the image (absolute; a trailing '/' kept)."""

    sources: tuple[str, ...]
    dest: str


def copied(value: str, workdir: str) -> list[Copy]:
    """A COPY or ADD line's copy from the build context (none: one from another stage or
    image, `--from=`, or of URLs alone); a relative destination is the WORKDIR's."""
    try:
        words = json.loads(value) if value.lstrip().startswith("[") else shlex.split(value)
    except ValueError:
        words = value.split()
    words = [str(word) for word in words]
    if any(word.startswith("--from") for word in words):
        return []
    words = [word for word in words if not word.startswith("--")]
    sources = tuple(word for word in words[:-1] if "://" not in word)
    if not sources:
        return []
    dest = posixpath.join(workdir, words[-1])
    return [Copy(sources, dest + "/" if words[-1].endswith("/") and dest != "/" else dest)]


def in_context(path: str, copies: list[Copy], context: Path) -> Path:
    """The context's file the image holds at `path`: through the last COPY that put one there;
    else the context's file of that name, at its root (a path no COPY explains)."""
    target = PurePosixPath(path)
    for copy in reversed(copies):
        found = _through(copy, target, context)
        if found is not None:
            return found
    return context / target.name


def _through(copy: Copy, target: PurePosixPath, context: Path) -> Path | None:
    dest = PurePosixPath(copy.dest)
    many = len(copy.sources) > 1 or copy.dest.endswith("/")
    for source in copy.sources:
        wild = bool(WILDCARDS & set(source))
        for src in sorted(context.glob(source.lstrip("/"))) if wild else \
                [context / source.lstrip("/")]:
            if src.is_dir() and (target == dest or dest in target.parents):
                held = src / target.relative_to(dest)
                if held.is_file():
                    return held
            elif src.is_file() and target in ({dest / src.name} if many or wild
                                              else {dest, dest / src.name}):
                return src  # a file, to a folder (its name kept) or to that name
    return None
