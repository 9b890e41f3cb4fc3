"""Run the conformance corpus: published third-party Azure ML specs through the local runtime.

    python scripts/conformance.py [--only ID ...] [--jobs N] [--list] [--render-only]
    make conformance [CASES="id id/"] [CONFORMANCE_JOBS=N]

Each case of conformance/corpus.yml runs from a scratch copy of its repository at its pinned
commit (git from GitHub into the tool's cache; CONFORMANCE_MIRROR=<folder of git directories>
where GitHub is out of reach), and its outcome is compared with what Azure would do. Results go
to conformance/results.json and docs/conformance.md (conformance/README.md). Exit 0 when at
least --min-pass of the runnable cases that ran had Azure's outcome, 1 otherwise, 2 for a bad
manifest or flag.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from corpus import manifest, matrix, session  # scripts/ is on the path (this file's folder)
from corpus.sources import Sources

from mlops import exit_code, exit_with
from mlops.project import cache_root
from mlops.specs import ROOT


@dataclass(frozen=True, kw_only=True)
class Config:
    manifest: Path = ROOT / "conformance" / "corpus.yml"
    only: list[str] = field(default_factory=list)  # case ids, or prefixes ending in /
    jobs: int = max(1, (os.cpu_count() or 2) // 2)  # groups of cases at once
    results: Path = ROOT / "conformance" / "results.json"
    page: Path = ROOT / "docs" / "conformance.md"
    work: Path = field(default_factory=lambda: cache_root() / "conformance" / "work")
    mirror: str = os.environ.get("CONFORMANCE_MIRROR", "")
    min_pass: float = 0.9
    list: bool = False  # print the selected cases and stop
    render_only: bool = False  # rewrite the page from the results file, run nothing


def parse(argv: list[str] | None) -> Config:
    parser = argparse.ArgumentParser(description="Run the conformance corpus.")
    for item in fields(Config):
        flag, default = "--" + item.name.replace("_", "-"), getattr(Config(), item.name)
        if isinstance(default, bool):
            parser.add_argument(flag, dest=item.name, action="store_true")
        elif isinstance(default, list):
            parser.add_argument(flag, dest=item.name, nargs="*", default=[])
        else:
            parser.add_argument(flag, dest=item.name, type=type(default), default=default)
    return Config(**vars(parser.parse_args(argv)))


def run(config: Config) -> int:
    corpus = manifest.load(config.manifest)
    cases = corpus.select([i for item in config.only for i in item.split()])
    if config.list:
        print("\n".join(f"{c.id}\t{c.kind}\t{c.python}\t{c.expect.outcome}" for c in cases))
        return 0
    if config.render_only:
        session.publish_known(corpus, config.results, config.page)
        return 0
    plan = session.Plan(manifest=corpus, cases=cases, jobs=max(1, config.jobs),
                        work=config.work, cache=cache_root(), results=config.results,
                        page=config.page, sources=Sources(
                            cache=cache_root() / "conformance" / "repos",
                            mirror=Path(config.mirror) if config.mirror else None))
    rate = matrix.pass_rate([r for r in session.run(plan) if r.verdict != "not run"])
    print(f"conformance: Azure's outcome on {'no' if rate is None else f'{rate:.0%} of the'} "
          f"runnable case(s) that ran; matrix: {config.page}")
    return 0 if rate is None or rate >= config.min_pass else 1


def main(argv: list[str] | None = None) -> int:
    return exit_code(lambda: run(parse(argv)))


if __name__ == "__main__":
    exit_with(main)
