"""Where a rollout worker's requests for actions go (asyncrl/roles/action_requests.py)."""

from helpers import flags, keep_reports_in_the_worker, read_stats, run_cli, serial_runner

from asyncrl.roles.action_requests import InWorkerPolicies
from asyncrl.roles.learner import Learner
from asyncrl.roles.policy_worker import PolicyWorker
from asyncrl.roles.rollout_worker import RolloutWorker
from asyncrl.roles.serial_runner import take_turn


def test_each_rollout_worker_acts_for_its_own_groups_one_forward_pass_a_request(
    tmp_path, monkeypatch
):
    """--worker_inference True: no policy worker; each rollout worker's own policy acts for each
    group as it asks (2 workers x 4 envs in 2 groups: 2 agents a forward pass), with the learner's
    newest weights."""
    keep_reports_in_the_worker(monkeypatch)
    runner = serial_runner(tmp_path, worker_inference=True)
    assert not any(isinstance(c, PolicyWorker) for c in runner.components)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    workers = [c for c in runner.components if isinstance(c, RolloutWorker)]
    while learner.train_step < 3:
        for component in runner.components:
            take_turn(component)
    for worker in workers:
        assert isinstance(worker.requests, InWorkerPolicies)
        (policy,) = worker.requests.policies
        counts = policy.timing.counts
        assert counts["batches"] > 0
        assert counts["batch_agents"] == 2 * counts["batches"]
        # it read the learner's weights of later updates, not only the first
        assert policy.weights.version >= 1


def test_rollout_workers_act_for_themselves_and_learn_in_real_processes(tmp_path):
    r = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment="wi",
            seed=0,
            num_workers=2,
            num_envs_per_worker=16,
            worker_inference=True,
            train_for_env_steps=40_000,
        ),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = read_stats(tmp_path / "wi")
    # random play scores ~22
    assert rows[-1]["episode_reward_mean"] > 100, rows[-1]
