"""The compute limit's parts (asyncrl/measure/costs.py)."""

import pytest

from asyncrl.commands.bench import parse_bench_args
from asyncrl.measure import costs
from asyncrl.measure.raw import RandomPlay, RandomVectorPlay


@pytest.mark.parametrize(
    "backend, kind, vectors", [("per_env", RandomPlay, None), ("vector", RandomVectorPlay, 2)]
)
def test_the_simulation_is_stepped_as_the_runs_env_backend_steps_it(
    monkeypatch, backend, kind, vectors
):
    """With --env_backend vector a rollout worker steps each group as one vector env (CartPole's
    own: numpy over all its envs at once); the simulation's cost was measured one env at a time,
    a costlier simulation than the run's."""
    _, cfg = parse_bench_args(
        [
            "--env",
            "CartPole-v1",
            "--env_backend",
            backend,
            "--num_envs_per_worker",
            "8",
            "--worker_num_splits",
            "2",
        ]
    )
    made = []
    make = costs.random_play

    def recorded(*args):
        made.append(make(*args))
        return made[-1]

    monkeypatch.setattr(costs, "random_play", recorded)
    with costs.simulation_workload(cfg, cfg.num_envs_per_worker) as (step, steps, frameskip):
        step()
        assert isinstance(made[0], kind)
        if vectors:
            assert [vector.num_envs for vector in made[0].vectors] == [4] * vectors
        # about 50 agent steps a call: 6 rounds of the 8 envs
        assert steps == 6 * 8
        assert frameskip == 1


def test_every_update_of_the_learning_workload_learns_the_whole_batch():
    """The workload's batch is learned again and again: its samples must not age past
    --max_policy_lag, or they are masked and (with --shuffle_samples) skipped, and the learning
    cost is that of empty minibatches."""
    flags = ["--max_policy_lag", "1", "--shuffle_samples", "True", "--batch_size", "128"]
    _, cfg = parse_bench_args(["--env", "CartPole-v1", *flags])
    with costs.model_workloads(cfg, 2) as (_, learn):
        for _ in range(4):
            assert learn()["masked_fraction"] == 0.0
