"""A run folder whose path a shell would split (a space, an umlaut, a quote: a checkout in
`~/My Projects/rel 4 ü/`) is seen by its commands through a short link of safe characters.

Azure substitutes input and output paths into a command raw, unquoted, and its paths never need
quoting (/mnt/azureml/cr/j/<id>/...). Here the paths are under the run folder, so a folder with
such characters would split every argument it is in. Its commands get the folder through a
link under the temporary folder instead, named after the folder's own name and a digest of its
path (the same folder always gets the same link, so a rerun resumes as before); the files are
written through it into the real folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path

from mlops.errors import LocalRunError

SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@%=,-]+$")


def is_safe(path: Path) -> bool:
    return bool(SAFE_PATH.match(str(path)))


def _base() -> Path:
    for folder in (Path(tempfile.gettempdir()), Path("/tmp")):
        if is_safe(folder) and os.access(folder, os.W_OK):
            return folder / f"mlops-links-{os.getuid()}"
    raise LocalRunError("no temporary folder with a path a shell keeps whole is writable "
                        "here; set TMPDIR to one (letters, digits and . _ - / only)")


def safe_root(folder: Path) -> Path:
    """`folder` itself when a shell keeps its path whole; else a link to it that it does."""
    folder = folder.resolve()
    if is_safe(folder):
        return folder
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.name).strip("-.") or "run"
    digest = hashlib.sha256(os.fsencode(folder)).hexdigest()[:10]
    base = _base()
    base.mkdir(mode=0o700, exist_ok=True)
    link = base / f"{slug}-{digest}"
    if link.is_symlink() and Path(os.readlink(link)) == folder:
        return link
    tmp = base / f".{slug}-{digest}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder, target_is_directory=True)
    os.replace(tmp, link)
    print(f"note: {folder} has characters a shell would split, and Azure substitutes paths "
          f"into commands unquoted: its commands see it as {link}, a link to it",
          file=sys.stderr, flush=True)
    return link


def shell_path(path: str) -> str:
    """`path` as a command sees it: itself where a shell keeps it whole, else through a link to
    the deepest folder of it whose name a shell would split (an output the asset map sends to a
    folder with a space), as Azure's own paths never need quoting. The names below that folder
    stay real names, so `rm -rf` of an output removes the folder itself, not a link to it: an
    rw_mount output is then made again before the command's next command
    (mlops/runtime/launch.py), as Azure's mount point outlives its `rm -rf`."""
    place = Path(path)
    if is_safe(place):
        return path
    parts = place.parts
    last = max(i for i, part in enumerate(parts) if not is_safe(Path(part)))
    base = Path(*parts[:last + 1])
    if not base.is_dir():  # a file whose own name a shell would split: nothing keeps it whole
        return path
    linked = safe_root(base).joinpath(*parts[len(base.parts):])
    return str(linked) if is_safe(linked) else path
