"""Azure ML early-termination policies as pure functions over metric histories.

Semantics, as Azure ML documents them:
- an *interval* is one report of the primary metric by a trial (its N-th value is interval N);
- a policy is evaluated for a trial at interval N when N is a multiple of evaluation_interval and
  N >= delay_evaluation;
- the trial is compared only with other trials' values up to interval N, so young trials are not
  punished for having run less;
- bandit: stop when the trial's best so far is outside slack_factor (ratio) or slack_amount
  (absolute) of the best trial's best up to N;
- median stopping: stop when the trial's best so far is worse than the median of the other
  trials' running averages over intervals 1..N;
- truncation selection: stop when the trial is among the lowest truncation_percentage percent of
  trials at interval N (finished trials count unless exclude_finished_jobs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlops.specs import flag

History = Sequence[float]  # the primary metric, one value per interval, in report order


@dataclass(frozen=True, kw_only=True)
class Policy:
    type: str = "none"
    evaluation_interval: int = 1
    delay_evaluation: int = 0
    slack_factor: float | None = None
    slack_amount: float | None = None
    truncation_percentage: int = 0
    exclude_finished_jobs: bool = False

    @classmethod
    def from_spec(cls, spec: Mapping | None) -> Policy:
        spec = dict(spec or {})
        kind = str(spec.pop("type", "none")).lower()
        # `--set` passes strings ("1"); the SDK converts them, and so do we
        types = {"evaluation_interval": int, "delay_evaluation": int, "slack_factor": float,
                 "slack_amount": float, "truncation_percentage": int,
                 "exclude_finished_jobs": flag}
        return cls(type=kind, **{k: types[k](v) for k, v in spec.items()
                                 if k in types and v is not None})

    def applies_at(self, interval: int) -> bool:
        every = max(1, int(self.evaluation_interval or 1))
        return interval >= 1 and interval % every == 0 and interval >= int(self.delay_evaluation)


def _best(values: History, maximize: bool) -> float:
    return max(values) if maximize else min(values)


def _worse(a: float, b: float, maximize: bool) -> bool:
    return a < b if maximize else a > b


def bandit(trial: History, others: Sequence[History], *, interval: int, policy: Policy,
           maximize: bool) -> bool:
    peers = [h[:interval] for h in [trial, *others] if h]
    leader = _best([_best(h, maximize) for h in peers], maximize)
    mine = _best(trial[:interval], maximize)
    if policy.slack_factor is not None:
        factor = 1 + float(policy.slack_factor)
        limit = leader / factor if maximize else leader * factor
    else:
        amount = float(policy.slack_amount or 0)
        limit = leader - amount if maximize else leader + amount
    return _worse(mine, limit, maximize)


def median_stopping(trial: History, others: Sequence[History], interval: int,
                    maximize: bool) -> bool:
    averages = [statistics.fmean(h[:interval]) for h in others if h]
    if not averages:
        return False
    return _worse(_best(trial[:interval], maximize), statistics.median(averages), maximize)


def truncation_selection(trial: History, others: Sequence[History], *, interval: int,
                         percentage: float, maximize: bool) -> bool:
    """Others must have reached the interval; each trial ranks by its value at it."""
    values = [h[interval - 1] for h in others if len(h) >= interval]
    if not values:
        return False
    cut = math.floor((len(values) + 1) * float(percentage) / 100)
    strictly_worse = sum(1 for v in values if _worse(v, trial[interval - 1], maximize))
    return strictly_worse < cut  # the trial is among the `cut` lowest


def should_stop(policy: Policy, trial: History, *, others: Sequence[History],
                finished: Sequence[History] = (), maximize: bool = True) -> bool:
    """Decide at the trial's latest interval; `others` are running trials, `finished` done."""
    interval = len(trial)
    if policy.type == "none" or not policy.applies_at(interval):
        return False
    if policy.type == "bandit":
        return bandit(trial, [*others, *finished], interval=interval, policy=policy,
                      maximize=maximize)
    if policy.type == "median_stopping":
        return median_stopping(trial, [*others, *finished], interval, maximize)
    if policy.type == "truncation_selection":
        peers = list(others) if policy.exclude_finished_jobs else [*others, *finished]
        return truncation_selection(trial, peers, interval=interval,
                                    percentage=policy.truncation_percentage, maximize=maximize)
    raise ValueError(f"early_termination type '{policy.type}' is not supported locally: use "
                     "bandit, median_stopping or truncation_selection")
