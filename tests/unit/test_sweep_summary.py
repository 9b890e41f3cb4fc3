"""How a sweep ends, from its trials (Azure's HyperDrive rules), and what it says."""
from pathlib import Path

import pytest

from mlops.orchestrators.sweep import SweepSummary, TrialRow, print_table
from mlops.runtime import Status


def row(n: int, status: Status, metric: float | None = None) -> TrialRow:
    return TrialRow(trial=n, params={"lr": 0.1 * (n + 1)}, metric=metric, status=status,
                    intervals=0 if metric is None else 1, run_id=f"r{n}",
                    folder=Path(f"/runs/t{n}"), seconds=1.0, log=Path(f"/runs/t{n}/log.txt"))


def summary(*rows: TrialRow) -> SweepSummary:
    scored = [r for r in rows if r.metric is not None and r.status == Status.COMPLETED]
    return SweepSummary(primary_metric="training_roc_auc_score", goal="maximize",
                        trials=list(rows), best=max(scored, key=lambda r: r.metric, default=None),
                        metrics_logged=["training_roc_auc", "training_score"])


@pytest.mark.parametrize("rows, completed", [
    ((row(0, Status.COMPLETED, 0.9), row(1, Status.FAILED)), True),
    ((row(0, Status.COMPLETED), row(1, Status.COMPLETED)), True),  # no metric: no best trial
    ((row(0, Status.COMPLETED), row(1, Status.FAILED)), True),
    ((row(0, Status.FAILED), row(1, Status.FAILED)), False),
    ((row(0, Status.CANCELED),), False),
])
def test_a_sweep_completes_when_a_trial_completed_with_or_without_a_best_one(rows, completed):
    assert summary(*rows).completed is completed


def test_a_sweep_with_no_best_trial_warns_and_names_the_metrics_logged(capsys):
    print_table(summary(row(0, Status.COMPLETED), row(1, Status.FAILED)))
    err = capsys.readouterr().err
    assert "1 of 2 trials failed" in err
    assert ("warning: no completed trial logged the primary metric 'training_roc_auc_score' "
            "(the trials logged: training_roc_auc, training_score). The sweep completes with "
            "no best trial") in err


def test_a_sweep_whose_every_trial_failed_does_not_warn_of_the_metric(capsys):
    print_table(summary(row(0, Status.FAILED)))
    err = capsys.readouterr().err
    assert "every trial failed (1 of 1)" in err and "primary metric" not in err


def test_a_step_reading_a_sweep_with_no_best_trial_is_refused_with_the_reason(tmp_path):
    from mlops.errors import LocalRunError
    from mlops.orchestrators.graph import Scope, bind
    from mlops.runtime.uris import AssetMap

    here = Scope(inputs={}, outputs={}, folder=tmp_path, run_id="r", experiment="e",
                 assets=AssetMap(tmp_path / "none.yml"), base=tmp_path)
    here.steps["tune"] = {}
    here.unproduced["tune"] = "its sweep has no best trial: no completed trial logged ..."
    with pytest.raises(LocalRunError, match=r"node tune gave no outputs: its sweep has no best"):
        bind("${{parent.jobs.tune.outputs.model}}", {"type": "uri_folder"}, here, "inputs.m")


def test_random_sampling_with_azures_sobol_rule_is_a_seeded_sobol_sequence():
    """sampling_algorithm: {type: random, rule: sobol, seed: N}: Azure's Sobol variant of random
    sampling (reproducible, more evenly spread); the rule was ignored (plain random)."""
    import optuna

    from mlops.orchestrators.sampling import make_study, sample

    space = {"lr": {"type": "uniform", "min_value": 0.0, "max_value": 1.0}}

    def values(algorithm) -> list[float]:
        study = make_study(algorithm, space, maximize=True)
        drawn = []
        for _ in range(9):
            trial = study.ask()
            drawn.append(sample(trial, "lr", space["lr"]))
            study.tell(trial, 0.0)
        return drawn

    sobol = {"type": "random", "rule": "sobol", "seed": 7}
    assert isinstance(make_study(sobol, space, True).sampler, optuna.samplers.QMCSampler)
    assert values(sobol) == values(dict(sobol))  # seeded: the same sequence again
    assert len({int(v * 8) for v in values(sobol)[1:]}) == 8  # 8 points, one in each eighth
    assert not isinstance(make_study({"type": "random", "seed": 7}, space, True).sampler,
                          optuna.samplers.QMCSampler)


@pytest.mark.parametrize("logbase, expected", [(None, 0.01), ("e", 0.01), (10, 1e-3),
                                               ("2", 0.125)])
def test_random_samplings_logbase_is_the_base_of_the_log_types(logbase, expected):
    """loguniform(min, max) is logbase ** uniform(min, max), e when unset (azure-ai-ml's
    RandomSamplingAlgorithm.logbase, sent to the service as it is)."""
    import math

    import optuna

    from mlops.orchestrators.sampling import log_base, sample

    algorithm = {"type": "random", **({} if logbase is None else {"logbase": logbase})}
    exponent = math.log(0.01) if logbase in (None, "e") else -3
    trial = optuna.trial.FixedTrial({"lr": exponent, "w__u": 0.5})
    space = {"type": "loguniform", "min_value": exponent, "max_value": 0}
    assert sample(trial, "lr", space, log_base(algorithm)) == pytest.approx(expected)
    assert sample(trial, "w", {"type": "lognormal", "mu": 0, "sigma": 1},
                  log_base(algorithm)) == pytest.approx(1.0)


@pytest.mark.parametrize("logbase", [0, 1, -2, "ten", float("inf")])
def test_a_logbase_no_power_can_have_is_refused_before_the_sweep(logbase):
    from mlops.errors import LocalRunError
    from mlops.orchestrators.sampling import make_study

    with pytest.raises(LocalRunError, match="sampling_algorithm.logbase: .* is not \"e\" or a "
                                            "positive number other than 1"):
        make_study({"type": "random", "logbase": logbase}, {}, maximize=True)


def test_a_trial_gets_each_sampled_value_as_azureml_sweep_variable(tmp_path):
    """HyperDrive gives a trial its parameters as AZUREML_SWEEP_<name> (azure-ai-ml's SweepJob
    says so; published trials read os.environ["AZUREML_SWEEP_solver"]), beside the command."""
    from mlops.orchestrators.sweep import TrialContext, trial_factory
    from mlops.runtime.uris import AssetMap

    trial = {"command": "python t.py --lr ${{search_space.lr}}", "code": ".",
             "environment": "azureml:AzureML-sklearn-1.5@latest",
             "environment_variables": {"MINE": "1", "AZUREML_SWEEP_lr": "mine"}}
    ctx = TrialContext(folder=tmp_path, assets=AssetMap(tmp_path / "none.yml"), where="s.yml",
                       name="tune", experiment="e", parent="p")
    task = trial_factory(trial, tmp_path, inputs={}, outputs={}, ctx=ctx)(
        3, {"lr": 0.25, "solver": "lbfgs"})
    assert task.env_vars == {"MINE": "1", "AZUREML_SWEEP_lr": "0.25",
                             "AZUREML_SWEEP_solver": "lbfgs"}
    assert task.command.endswith("--lr 0.25") and task.name == "tune_3"
