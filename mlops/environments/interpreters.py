"""The Python interpreters an environment can run on: Azure builds an environment's image for the
Python its spec names and runs the job there, so an environment for another Python runs here on
an interpreter of that version.

Where one is looked for, in order (the first that runs and reports that major.minor wins):
1. MLOPS_PYTHON_<major>_<minor> (MLOPS_PYTHON_3_8=/path/to/python3.8), or `[tool.azml.pythons]`
   in pyproject.toml ("3.8" = "/path/to/python3.8");
2. pyenv's versions ($PYENV_ROOT/versions/<X.Y.Z>/bin, newest patch first: a shim answers only
   for the version pyenv selects, so the versions are read directly);
3. uv's managed and system interpreters (`uv python find`, never downloading);
4. `pythonX.Y` on PATH;
5. fetched by uv (`uv python install X.Y`) where the network allows, bounded in time (not with
   MLOPS_FETCH_PYTHON=0). A failed fetch is remembered for an hour (a file in the cache), so
   later runs do not wait on it again.
Where none of these gives one, the caller falls back to this machine's Python and says so.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mlops.project import cache_root, project

ASK = ("import sys, platform; print(platform.python_implementation(), "
       "'.'.join(map(str, sys.version_info[:3])))")
PROBE_TIMEOUT_S = 20
FETCH_TIMEOUT_S = 300  # a CPython build is ~30 MB; nothing waits longer on a download
FETCH_RETRY_S = 3600  # a fetch that failed is not tried again for an hour
UV_DOWNLOADS_FROM = (3, 8)  # the oldest CPython `uv python install` has (python-build-standalone)
OLDEST = (3, 6)  # the oldest Python the runtime's helpers run on (helper_source.py)


@dataclass(frozen=True)
class Python:
    """One interpreter: its executable (real path) and its full version."""

    executable: Path
    version: str  # "3.8.18"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def lib(self) -> str:
        """Its folder name under a virtual environment's lib/: python3.8."""
        return f"python{self.minor}"

    @property
    def info(self) -> tuple[int, int]:
        major, minor = self.minor.split(".")
        return int(major), int(minor)

    def site(self, venv: Path) -> Path:
        """The site-packages of a virtual environment of this interpreter."""
        return venv / "lib" / self.lib / "site-packages"


HERE = Python(Path(os.path.realpath(sys.executable)), platform.python_version())


def minor_of(version: str) -> str:
    """"3.7.5" -> "3.7"; "3.8.*" -> "3.8"; "3.8,<3.11" (a conda range) -> "3.8"."""
    found = re.match(r"(\d+)\.(\d+)", version.strip())
    return f"{found.group(1)}.{found.group(2)}" if found else version.strip()


def probe(executable: Path | str) -> Python | None:
    """The interpreter at `executable` if it runs and is CPython (a failing shim: None)."""
    try:
        done = subprocess.run([str(executable), "-c", ASK], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, env=_quiet_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2 or words[0] != "CPython":
        return None
    return Python(Path(os.path.realpath(executable)), words[1])


def _quiet_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


def _configured(minor: str) -> list[str]:
    variable = f"MLOPS_PYTHON_{minor.replace('.', '_')}"
    found = [os.environ[variable]] if os.environ.get(variable) else []
    configured = project().pythons.get(minor)
    return found + ([configured] if configured else [])


def _pyenv(minor: str) -> list[str]:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    if not root.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(minor)}\.(\d+)$")
    versions = sorted((int(m.group(1)), entry.name) for entry in root.iterdir()
                      if (m := pattern.match(entry.name)))
    return [str(root / name / "bin" / f"python{minor}") for _, name in reversed(versions)]


def _uv(minor: str, *extra: str) -> list[str]:
    uv = Path(sys.executable).parent / "uv"
    if not uv.is_file():
        return []
    env = {**_quiet_env(), "UV_NO_PROGRESS": "1"}
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    try:
        done = subprocess.run([str(uv), "python", *extra, minor], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    lines = done.stdout.strip().splitlines()
    return [lines[-1]] if lines else []


def _on_path(minor: str) -> list[str]:
    return [f"python{minor}"]


def _fetch_marker(minor: str) -> Path:
    return cache_root() / "pythons" / f"fetch-failed-{minor}"


def fetch(minor: str) -> Python | None:
    """`uv python install` of that minor version, where the network allows (None: it did not,
    or uv has no download of it)."""
    if _older_than_uv_downloads(minor):
        return None
    marker = _fetch_marker(minor)
    try:
        if time.time() - marker.stat().st_mtime < FETCH_RETRY_S:
            return None
    except OSError:
        pass
    print(f"looking for Python {minor}: none on this machine; asking uv to fetch it "
          f"(at most {FETCH_TIMEOUT_S} s)", file=sys.stderr, flush=True)
    uv = Path(sys.executable).parent / "uv"
    try:
        done = subprocess.run([str(uv), "python", "install", minor], capture_output=True,
                              text=True, timeout=FETCH_TIMEOUT_S,
                              env={**_quiet_env(), "UV_NO_PROGRESS": "1"})
        ok = done.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    found = next(filter(None, map(probe, _uv(minor, "find", "--managed-python"))), None) \
        if ok else None
    if found is None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return found


def supported(minor: str) -> bool:
    """Whether the runtime's helpers (readonly_inputs, the mini-batch worker, the debug hook)
    run on Python `minor`."""
    try:
        return tuple(map(int, minor.split("."))) >= OLDEST
    except ValueError:
        return False


@cache
def find(minor: str) -> Python | None:
    """An interpreter of Python `minor` ("3.8"): this machine's own when it is that version."""
    if minor == HERE.minor:
        return HERE
    if not supported(minor):
        return None
    for source in (_configured, _pyenv, lambda m: _uv(m, "find"), _on_path):
        for candidate in source(minor):
            found = probe(candidate)
            if found is not None and found.minor == minor:
                return found
    return fetch(minor) if os.environ.get("MLOPS_FETCH_PYTHON", "1") != "0" else None


def how_to_get(minor: str) -> str:
    """What to do to have an interpreter of `minor` found (uv downloads 3.8 and newer only)."""
    named = f"or name it: MLOPS_PYTHON_{minor.replace('.', '_')}=/path/to/python{minor}"
    if _older_than_uv_downloads(minor):
        return (f"install one (`pyenv install {minor}`, or your system's package; uv has no "
                f"download of Python {minor}), {named}")
    return f"install one (`uv python install {minor}`, or `pyenv install {minor}`), {named}"


def _older_than_uv_downloads(minor: str) -> bool:
    try:
        return tuple(map(int, minor.split(".")[:2])) < UV_DOWNLOADS_FROM
    except ValueError:
        return False
