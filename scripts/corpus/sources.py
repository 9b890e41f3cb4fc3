"""A repository at its pinned commit, copied into a scratch folder as a user's checkout.

Where the git objects come from: on a user's machine and in the GitHub workflow, a bare clone per
repository in the tool's cache (`<cache>/conformance/repos/<owner>+<name>.git`), fetched from
https://github.com/<owner>/<name> at exactly the pinned commit (`git fetch --depth 1 <sha>`)
the first time and read from the cache after; where GitHub cannot be reached, a local mirror
folder named by CONFORMANCE_MIRROR, holding one git directory per repository (`<owner>+<name>`,
with or without a `repo/` or `repo/.git` inside, or `<owner>/<name>[.git]`). Either way the
commit is written out with `git archive` and unpacked with tarfile's `data` filter (no link
or path leaves the folder). A commit that is not there is a MachineError that names it.

A mirror may hold a commit without some of its largest files (a snapshot that leaves out files
of 4 MiB and more): there the tree is written blob by blob and the files it lacks are returned,
so a case that needs one is reported as not run, and one that does not runs.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from mlops.errors import MachineError

FETCH_TIMEOUT_S = 600


@dataclass(frozen=True)
class Sources:
    cache: Path  # <cache>/conformance/repos
    mirror: Path | None = None  # CONFORMANCE_MIRROR: local git directories instead of GitHub

    def git_dir(self, repo: str, commit: str) -> Path:
        """A git directory holding `commit` of `repo`."""
        if self.mirror is not None:
            found = mirrored(self.mirror, repo)
            if found is None:
                raise MachineError(f"{repo}: not in the mirror {self.mirror} (CONFORMANCE_MIRROR);"
                                   f" add its git directory as {repo.replace('/', '+')}")
            if not has_commit(found, commit):
                raise MachineError(f"{repo}: the mirror's copy ({found}) has no commit {commit}")
            return found
        return self.cached(repo, commit)

    def cached(self, repo: str, commit: str) -> Path:
        folder = self.cache / (repo.replace("/", "+") + ".git")
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / (folder.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two cases of one repository fetch it once
            if not (folder / "HEAD").is_file():
                git(["init", "--bare", "--quiet", str(folder)], repo)
            if not has_commit(folder, commit):
                git(["--git-dir", str(folder), "fetch", "--quiet", "--depth", "1",
                     f"https://github.com/{repo}", commit], repo, timeout=FETCH_TIMEOUT_S)
            if not has_commit(folder, commit):
                raise MachineError(f"{repo}: GitHub did not hand over commit {commit}")
        return folder

    def checkout(self, repo: str, commit: str, into: Path) -> list[str]:
        """`repo` at `commit`, unpacked into `into` (which must not exist yet); the paths the
        source lacks (only a mirror lacks any)."""
        source = self.git_dir(repo, commit)
        into.mkdir(parents=True)
        try:
            archive(source, commit, into)
            return []
        except MachineError:
            if self.mirror is None:
                raise
        shutil.rmtree(into)
        into.mkdir(parents=True)
        return unpack_blobs(source, commit, into)


def archive(source: Path, commit: str, into: Path) -> None:
    process = subprocess.Popen(["git", "--git-dir", str(source), "archive", "--format=tar",
                                commit], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=process.stdout, mode="r|") as tar:
            tar.extractall(into, filter="data")
    except tarfile.TarError as err:
        process.kill()
        raise MachineError(f"{source}@{commit[:10]}: git archive's output is not a tar file "
                           f"({err})") from None
    finally:
        process.stdout.close()
        error = process.stderr.read().decode(errors="replace").strip()
        process.stderr.close()
        if process.wait() != 0:
            raise MachineError(f"{source}@{commit[:10]}: git archive failed: {error}")


def unpack_blobs(source: Path, commit: str, into: Path) -> list[str]:
    """The commit's regular files written one by one (links and submodules left out); the
    paths whose content the git directory lacks."""
    listing = subprocess.run(["git", "--git-dir", str(source), "ls-tree", "-r", "-z", commit],
                             capture_output=True, check=True).stdout.decode()
    entries = [line.split("\t", 1) for line in listing.split("\0") if line]
    files = [(head.split()[0], head.split()[2], path) for head, path in entries
             if head.split()[0] in ("100644", "100755") and ".." not in path.split("/")]
    missing = []
    with subprocess.Popen(["git", "--git-dir", str(source), "cat-file", "--batch"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as batch:
        for mode, oid, path in files:
            batch.stdin.write(f"{oid}\n".encode())
            batch.stdin.flush()
            header = batch.stdout.readline().split()
            if len(header) < 3:  # "<oid> missing"
                missing.append(path)
                continue
            content = batch.stdout.read(int(header[2]))
            batch.stdout.read(1)  # the newline after each object
            target = into / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(0o755 if mode == "100755" else 0o644)
        batch.stdin.close()
    return missing


def mirrored(mirror: Path, repo: str) -> Path | None:
    owner, name = repo.split("/", 1)
    for base in (mirror / f"{owner}+{name}", mirror / owner / name,
                 mirror / owner / f"{name}.git"):
        for candidate in (base / "repo" / ".git", base / "repo", base / ".git", base):
            if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
                return candidate
    return None


def has_commit(git_dir: Path, commit: str) -> bool:
    result = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "-e",
                             f"{commit}^{{commit}}"], capture_output=True)
    return result.returncode == 0


def git(args: list[str], repo: str, timeout: int = 60) -> None:
    try:
        result = subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise MachineError("git is not installed: install it to fetch the corpus") from None
    except subprocess.TimeoutExpired:
        raise MachineError(f"{repo}: git {args[0]} took over {timeout} s; check the network "
                           "(or set CONFORMANCE_MIRROR to a local mirror)") from None
    if result.returncode != 0:
        raise MachineError(f"{repo}: git {' '.join(args[:3])} failed: "
                           f"{result.stderr.strip().splitlines()[-1:] or result.returncode}")
