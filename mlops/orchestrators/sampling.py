"""Azure's search space types and sampling algorithms on Optuna.

loguniform(min, max) is exp(uniform(min, max)); q* types round to multiples of q; normal and
lognormal are sampled through the inverse normal CDF of a uniform Optuna variable (so TPE can
model them). random -> RandomSampler, grid -> every combination in order (choice only),
bayesian -> TPESampler.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator
from statistics import NormalDist

import optuna

from mlops.errors import LocalRunError
from mlops.specs import SpecData

_EPS = 1e-9


def _q(value: float, q) -> float:
    return round(value / float(q)) * float(q) if q else value


def sample(trial: optuna.Trial, name: str, p: SpecData, base: float = math.e):
    """One value of search space `p`; `base`: the log-based types' (random sampling's logbase)."""
    kind = p["type"]
    if kind == "choice" and any(isinstance(v, dict) for v in p["values"]):
        return nested(trial, name, list(p["values"]), base)
    if kind == "choice":
        return trial.suggest_categorical(name, list(p["values"]))
    if kind == "randint":
        return trial.suggest_int(name, 0, int(p["upper"]) - 1)
    low, high = (float(p.get("min_value", 0)), float(p.get("max_value", 0)))
    if kind in ("uniform", "quniform"):
        return _q(trial.suggest_float(name, low, high), p.get("q"))
    if kind in ("loguniform", "qloguniform"):
        return _q(base ** trial.suggest_float(name, low, high), p.get("q"))
    if kind in ("normal", "qnormal", "lognormal", "qlognormal"):
        u = trial.suggest_float(f"{name}__u", _EPS, 1 - _EPS)
        value = NormalDist(float(p["mu"]), float(p["sigma"])).inv_cdf(u)
        return _q(base ** value if "lognormal" in kind else value, p.get("q"))
    raise LocalRunError(f"search_space.{name}: type {kind} is not an Azure search space type")


def nested(trial: optuna.Trial, name: str, spaces: list, base: float) -> dict[str, object]:
    """A choice of search spaces (Azure's nested choice): one picked, then each of its entries
    sampled (a fixed value as it is)."""
    index = trial.suggest_categorical(f"{name}__space", list(range(len(spaces))))
    picked = spaces[index] if isinstance(spaces[index], dict) else {}
    return {key: sample(trial, f"{name}.{index}.{key}", p, base)
            if isinstance(p, dict) and "type" in p else p for key, p in picked.items()}


def log_base(algorithm) -> float:
    """Random sampling's `logbase` ("e" or a positive number other than 1): the base its
    loguniform and lognormal values are powers of; e otherwise."""
    given = algorithm.get("logbase") if isinstance(algorithm, dict) else None
    if given is None or str(given).strip().lower() == "e":
        return math.e
    try:
        base = float(given)
    except (TypeError, ValueError):
        base = 0.0
    if not math.isfinite(base) or base <= 0 or base == 1:
        raise LocalRunError(f"sampling_algorithm.logbase: {given!r} is not \"e\" or a positive "
                            "number other than 1")
    return base


def make_study(algorithm, space: SpecData, maximize: bool) -> optuna.Study:
    kind = str(algorithm.get("type") if isinstance(algorithm, dict) else algorithm).lower()
    seed = algorithm.get("seed") if isinstance(algorithm, dict) else None
    samplers = {"random": optuna.samplers.RandomSampler, "grid": optuna.samplers.RandomSampler,
                "bayesian": optuna.samplers.TPESampler}
    if kind not in samplers:
        raise LocalRunError(f"sampling_algorithm {kind}: Azure knows random, grid and bayesian")
    seed = None if seed is None else int(seed)
    log_base(algorithm)  # a logbase no power can have is refused before the sweep starts
    sampler = samplers[kind](seed=seed)
    rule = algorithm.get("rule") if isinstance(algorithm, dict) else None
    if kind == "random" and str(rule).lower() == "sobol":  # a low-discrepancy sequence, seeded
        with warnings.catch_warnings():  # optuna's "experimental" note: not the user's
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.QMCSampler(qmc_type="sobol", seed=seed, scramble=True,
                                                 independent_sampler=sampler,
                                                 warn_independent_sampling=False)
    study = optuna.create_study(direction="maximize" if maximize else "minimize",
                                sampler=sampler)
    if kind == "grid":
        grid_points(space)  # refused here, before the sweep starts, if grid cannot sample it
    return study


def is_grid(algorithm) -> bool:
    kind = algorithm.get("type") if isinstance(algorithm, dict) else algorithm
    return str(kind).lower() == "grid"


def grid_points(space: SpecData) -> Iterator[dict[str, object]]:
    """Grid sampling's combinations, every one once, in order, made one at a time as trials
    start (GridSampler cannot ask/tell): a grid of 10^10 points, or max_total_trials 10^9,
    costs the memory of the trials run, not of the grid."""
    if any(isinstance(v, dict) for p in space.values() for v in p.get("values") or []):
        raise LocalRunError("sampling_algorithm grid: a choice of several search spaces is "
                            "sampled here with random or bayesian only")
    names = list(space)
    return (dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(space[n]["values"] for n in names)))
