"""A run of the corpus: the selected cases' groups, a bounded number at once, each result
recorded as soon as its group ends (results.json and the matrix stay current if the run is
stopped half-way)."""

from __future__ import annotations

import datetime
import fcntl
import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from corpus import manifest as manifests
from corpus import matrix
from corpus.cases import Group, Ran, run_group, slug
from corpus.sources import Sources
from corpus.verdict import Outcome, classify, got


@dataclass(frozen=True, kw_only=True)
class Plan:
    manifest: manifests.Manifest
    cases: tuple[manifests.Case, ...]
    jobs: int  # groups at once
    work: Path  # the groups' scratch folders
    cache: Path  # the environment caches every case shares (MLOPS_CACHE_DIR)
    sources: Sources
    results: Path
    page: Path


def record(ran: Ran, date: str) -> matrix.Result:
    verdict, reason = classify(ran.case, ran.outcome)
    case = ran.case
    return matrix.Result(id=case.id, repo=case.repo, commit=case.commit, path=case.path,
                         kind=case.kind, python=ran.python, expected=case.expect.outcome,
                         got=got(ran.outcome), verdict=verdict.value, reason=reason,
                         seconds=round(ran.outcome.seconds, 1), date=date)


def run(plan: Plan) -> list[matrix.Result]:
    """Run the plan's cases; their results (also merged into the results file and the page)."""
    lock = threading.Lock()
    fresh: list[matrix.Result] = []
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    groups = [Group(cases=tuple(g), folder=plan.work / slug(g[0].id), sources=plan.sources,
                    cache=plan.cache) for g in manifests.groups(plan.cases)]
    print(f"conformance: {len(plan.cases)} case(s) in {len(groups)} group(s), {plan.jobs} at "
          f"once; scratch folders under {plan.work}", flush=True)
    with ThreadPoolExecutor(max_workers=plan.jobs) as pool:
        futures = {pool.submit(run_group, g): g for g in groups}
        for future in as_completed(futures):
            with lock:
                rans = outcomes(future, futures[future])
                done = [record(ran, date) for ran in rans]
                for result, ran in zip(done, rans, strict=True):
                    print(f"{result.id}: {result.verdict} ({result.got}) {result.reason}"
                          f"  [{result.seconds:.0f} s; log {ran.log}]", flush=True)
                fresh += done
                publish(plan, done)
    return fresh


def outcomes(future: Future, group: Group) -> list[Ran]:
    """The group's runs; a harness error (a bug here, a full disk) is every case's reason."""
    try:
        return future.result()
    except Exception as err:  # noqa: BLE001 - one group's failure must not end the others
        reason = f"harness error: {type(err).__name__}: {err}"
        return [Ran(case=c, outcome=Outcome(code=1, output=reason), python=c.python,
                    log=group.folder) for c in group.cases]


def publish(plan: Plan, done: list[matrix.Result]) -> None:
    """Merge `done` into the results file (another run may have written it meanwhile: the file
    is read again under a lock) and rewrite the page."""
    merge(plan.manifest, plan.results, plan.page, done)


def merge(corpus: manifests.Manifest, results: Path, page: Path,
          done: list[matrix.Result]) -> None:
    with open(results.with_name(results.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = matrix.load(results) | {r.id: r for r in done}
        matrix.save(known, corpus, results)
        matrix.write_atomically(page, matrix.render(corpus, {c.id: known[c.id] for c in
                                                             corpus.cases if c.id in known}))


def publish_known(corpus: manifests.Manifest, results: Path, page: Path) -> None:
    """The page again from the results file alone (after the manifest changed)."""
    merge(corpus, results, page, [])
