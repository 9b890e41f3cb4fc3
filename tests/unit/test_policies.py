"""Azure's early-termination policies on deterministic metric curves."""

import pytest

from mlops.orchestrators.policies import Policy, should_stop


def first_stop(policy, trial, others=(), finished=(), maximize=True):
    """The interval at which the trial is stopped when it reports its curve one value at a time,
    the other trials having reported theirs already; None if it runs to the end."""
    for n in range(1, len(trial) + 1):
        if should_stop(policy, trial[:n], others=others, finished=finished, maximize=maximize):
            return n
    return None


LEADER = [0.5, 0.7, 0.8, 0.85, 0.9, 0.9]


def test_schedule_is_every_interval_multiple_at_or_after_the_delay():
    policy = Policy(type="bandit", evaluation_interval=2, delay_evaluation=3, slack_factor=0.1)
    assert [n for n in range(1, 11) if policy.applies_at(n)] == [4, 6, 8, 10]
    assert Policy(type="bandit", evaluation_interval=1, delay_evaluation=0).applies_at(1)


def test_bandit_slack_factor_stops_at_the_first_evaluation_outside_the_slack():
    policy = Policy(type="bandit", evaluation_interval=1, delay_evaluation=2, slack_factor=0.15)
    weak = [0.5, 0.55, 0.6, 0.6, 0.6, 0.6]  # 0.55 < 0.7/1.15 = 0.609 at interval 2
    assert first_stop(policy, weak, others=[LEADER]) == 2


def test_bandit_does_not_stop_a_trial_within_the_slack():
    policy = Policy(type="bandit", evaluation_interval=1, delay_evaluation=1, slack_factor=0.15)
    close = [0.45, 0.65, 0.75, 0.8, 0.8, 0.8]  # always within 15% of the leader
    assert first_stop(policy, close, others=[LEADER]) is None


def test_bandit_compares_only_up_to_the_same_interval():
    # The leader becomes strong late; a young trial is judged against its early values only.
    policy = Policy(type="bandit", evaluation_interval=1, delay_evaluation=1, slack_amount=0.1)
    late_leader = [0.3, 0.3, 0.3, 0.9]
    young = [0.25, 0.25, 0.25, 0.25]
    assert first_stop(policy, young, others=[late_leader]) == 4


def test_bandit_evaluation_interval_delays_the_stop_to_the_next_evaluation():
    policy = Policy(type="bandit", evaluation_interval=3, delay_evaluation=0, slack_factor=0.1)
    weak = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    assert first_stop(policy, weak, others=[LEADER]) == 3


def test_bandit_minimize_goal():
    policy = Policy(type="bandit", evaluation_interval=1, delay_evaluation=1, slack_amount=0.2)
    leader_loss = [1.0, 0.8, 0.6]
    assert first_stop(policy, [1.1, 1.05, 1.0], others=[leader_loss], maximize=False) == 2
    assert first_stop(policy, [1.1, 0.9, 0.7], others=[leader_loss], maximize=False) is None


def test_median_stopping_against_running_averages():
    policy = Policy(type="median_stopping", evaluation_interval=1, delay_evaluation=2)
    others = [[0.5, 0.6, 0.7], [0.4, 0.5, 0.6], [0.6, 0.7, 0.8]]
    # running averages at 2: 0.55, 0.45, 0.65 -> median 0.55; best 0.5 < 0.55
    assert first_stop(policy, [0.3, 0.5, 0.9], others=others) == 2
    assert first_stop(policy, [0.5, 0.6, 0.9], others=others) is None


def test_truncation_selection_cuts_the_lowest_percentage():
    policy = Policy(type="truncation_selection", evaluation_interval=1, delay_evaluation=1,
                    truncation_percentage=25)
    others = [[0.5, 0.6], [0.6, 0.7], [0.7, 0.8]]
    assert first_stop(policy, [0.4, 0.9], others=others) == 1  # lowest of 4 at interval 1
    assert first_stop(policy, [0.55, 0.9], others=others) is None


def test_truncation_selection_can_exclude_finished_trials():
    policy = Policy(type="truncation_selection", evaluation_interval=1, truncation_percentage=50,
                    exclude_finished_jobs=True)
    finished = [[0.9], [0.95], [0.99]]
    assert not should_stop(policy, [0.5], others=[], finished=finished)
    policy_all = Policy(type="truncation_selection", evaluation_interval=1,
                        truncation_percentage=50)
    assert should_stop(policy_all, [0.5], others=[], finished=finished)


def test_from_spec_and_unknown_policy():
    policy = Policy.from_spec({"type": "bandit", "slack_factor": 0.15, "evaluation_interval": 1,
                               "delay_evaluation": 3})
    assert policy.type == "bandit" and policy.delay_evaluation == 3
    with pytest.raises(ValueError, match="not supported locally"):
        should_stop(Policy(type="asha"), [0.1], others=[], finished=[])


def test_a_grid_of_ten_billion_points_is_walked_one_trial_at_a_time():
    """A grid of 10^10 combinations (or max_total_trials 10^9) costs the trials run, not the
    grid: nothing is enqueued before a trial starts, and the points come in grid order."""
    import itertools

    from mlops.orchestrators.sampling import grid_points, make_study
    from mlops.orchestrators.sweep import Settings

    space = {name: {"type": "choice", "values": list(range(10))} for name in "abcdefghij"}
    data = {"search_space": space, "sampling_algorithm": {"type": "grid"},
            "limits": {"max_total_trials": 10**9}, "objective": {"primary_metric": "m"}}
    assert Settings.from_spec(data, max_procs=2).max_trials == 10**9
    assert make_study("grid", space, maximize=True).trials == []
    first = list(itertools.islice(grid_points(space), 2))
    assert first == [dict.fromkeys("abcdefghij", 0), {**dict.fromkeys("abcdefghi", 0), "j": 1}]
