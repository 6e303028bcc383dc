"""Multi-agent envs: PettingZoo's parallel API through the adapter, agents that leave an episode
early, the agent -> policy mapping, and real multi-process runs (the synthetic multi-agent env and a
PettingZoo butterfly env)."""

import textwrap

import pytest
from helpers import (
    assert_user_error,
    drain,
    flags,
    keep_reports_in_the_worker,
    read_stats,
    run_cli,
    run_cli_error,
    serial_runner,
    slot_owners,
)

from asyncrl.core.buffers import NO_PLAYER, num_slots
from asyncrl.envs import make_agents
from asyncrl.roles.learner import Learner
from asyncrl.roles.rollout_worker import RolloutWorker
from asyncrl.roles.serial_runner import take_turn

LEAVING = {"num_agents": 3, "agent_episode_lens": [3, 5, 30], "episode_len": 8, "step_us": 0}


def test_parallel_env_agents_in_order_and_an_agent_that_left_stays_out():
    env = make_agents("synthetic_multi", **LEAVING)
    assert env.num_agents == 3 and env.observation_space.shape == (16,)
    obs, infos = env.reset(seed=0)
    assert len(obs) == len(infos) == 3
    ended_at = {}
    for t in range(1, 9):
        obs, rewards, terminated, truncated, _ = env.step([0, 1, 2])
        assert len(obs) == len(rewards) == len(terminated) == len(truncated) == 3
        for i in range(3):
            if (terminated[i] or truncated[i]) and i not in ended_at:
                ended_at[i] = (t, terminated[i])
    # deaths, then the time limit truncates
    assert ended_at == {0: (3, True), 1: (5, True), 2: (8, False)}
    assert env.env.agents == []


def test_pettingzoo_envs_with_vector_observations_get_a_vector_envs_defaults_and_flags_win():
    from asyncrl.cfg.config import Config
    from asyncrl.commands.train import config_from_args
    from asyncrl.envs.gym_adapter import VECTOR_ENV_DEFAULTS

    cfg = config_from_args(["--env", "pettingzoo.classic.tictactoe_v3:env", "--num_epochs", "2"])
    assert (cfg.use_rnn, cfg.encoder_mlp_layers, cfg.num_envs_per_worker, cfg.num_epochs) == (
        False,
        [64, 64],
        32,
        2,
    )
    assert {k: getattr(cfg, k) for k in VECTOR_ENV_DEFAULTS if k != "num_epochs"} == {
        k: v for k, v in VECTOR_ENV_DEFAULTS.items() if k != "num_epochs"
    }
    # image observations
    images = config_from_args(["--env", "pettingzoo.butterfly.cooperative_pong_v6:parallel_env"])
    assert (images.use_rnn, images.num_envs_per_worker) == (
        Config.use_rnn,
        Config.num_envs_per_worker,
    )


def test_a_pettingzoo_envs_discrete_observations_become_one_hot_vectors():
    """Rock-paper-scissors: each player observes the other's last move (Discrete(4), 3 at the
    start)."""
    env = make_agents("pettingzoo.classic.rps_v2:parallel_env")
    assert env.observation_space.shape == (4,) and str(env.observation_space.dtype) == "float32"
    first, _ = env.reset(seed=0)
    assert [o.tolist() for o in first] == [[0, 0, 0, 1]] * 2
    # rock, scissors: each now sees the other's
    obs = env.step([0, 2])[0]
    assert [o.argmax() for o in obs] == [2, 0] and all(o.sum() == 1 for o in obs)


def _write_bad_envs(folder) -> None:
    """A ParallelEnv whose agents disagree on spaces, and one whose reset leaves an agent out."""
    (folder / "bad_parallel_envs.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym
        import numpy as np
        from pettingzoo import ParallelEnv

        class Env(ParallelEnv):
            metadata = {"name": "bad"}
            possible_agents = ["a", "b"]

            def __init__(self, obs_sizes=(4, 4), reset_agents=("a", "b")):
                self.sizes, self.reset_agents = dict(zip(self.possible_agents, obs_sizes)), list(reset_agents)

            def observation_space(self, agent):
                return gym.spaces.Box(0, 1, (self.sizes[agent],), np.float32)

            def action_space(self, agent):
                return gym.spaces.Discrete(2)

            def reset(self, seed=None, options=None):
                self.agents = list(self.reset_agents)
                return {a: np.zeros(self.sizes[a], np.float32) for a in self.agents}, {a: {} for a in self.agents}

        def other_spaces(**options):
            return Env(obs_sizes=(4, 5))

        def reset_misses_an_agent(**options):
            return Env(reset_agents=("a",))
    """)
    )


@pytest.mark.parametrize(
    "flags,needle",
    [
        (
            ["--env", "synthetic_multi", "--agents_per_env", "3"],
            "--agents_per_env 3, but env 'synthetic_multi' has 2",
        ),
        (["--env", "bad_parallel_envs:other_spaces"], "agent 'b' has other spaces than agent 'a'"),
        (
            ["--env", "bad_parallel_envs:reset_misses_an_agent"],
            "every agent must start every episode",
        ),
    ],
)
def test_bad_multi_agent_env_is_one_line_and_exit_2(tmp_path, flags, needle):
    _write_bad_envs(tmp_path)
    r = run_cli_error("train", *flags, "--train_dir", tmp_path, path=[tmp_path])
    assert_user_error(r, needle)


def _count_live_agent_steps(worker: RolloutWorker, counter: list) -> None:
    """Wrap each env's PettingZoo step to count the agents that act in it (env.agents before the
    step)."""
    for agents_env in worker.backend.envs:
        inner = agents_env.env

        def counting_step(actions, step=inner.step, inner=inner):
            counter[0] += len(inner.agents)
            return step(actions)

        inner.step = counting_step


@pytest.mark.parametrize("mix", [True, False])
def test_agents_that_leave_early_wait_without_samples_and_share_policies_as_asked(
    tmp_path, monkeypatch, mix
):
    """Agents 0 and 1 of each env die after 3 and 5 steps, agent 2 plays to the time limit (8,
    truncated). Every step an agent acts in is exactly one sample (counted against what the envs
    stepped), a waiting agent has no policy and adds nothing, no slot is lost, episodes have the
    agents' lengths, and with --pbt_mix_policies_in_one_env False the agents of an env always share
    a policy (with True, mixed pairs occur)."""

    keep_reports_in_the_worker(monkeypatch)
    runner = serial_runner(
        tmp_path,
        env="synthetic_multi",
        env_options=LEAVING,
        num_policies=2,
        rollout=4,
        batch_size=16,
        pbt_mix_policies_in_one_env=mix,
    )
    workers = [c for c in runner.components if isinstance(c, RolloutWorker)]
    learners = [c for c in runner.components if isinstance(c, Learner)]
    stepped = [0]
    for w in workers:
        _count_live_agent_steps(w, stepped)
    b = runner.buffers
    waited = 0
    mixed = 0
    for _ in range(400):
        for c in runner.components:
            take_turn(c)
        # one row per env
        policies = b.agent_player.numpy().reshape(-1, 3)
        waiting = policies == NO_PLAYER
        waited += int(waiting.sum())
        # a waiting agent fills nothing
        assert (b.agent_step.numpy().reshape(-1, 3)[waiting] == 0).all()
        # an env whose agents all ended was reset at once
        assert (~waiting).any(axis=1).all()
        for row in policies:
            mixed += len(set(row[row != NO_PLAYER].tolist())) > 1
    assert waited > 1000
    assert (mixed > 0) == mix
    assert sorted(slot_owners(runner)) == list(range(num_slots(runner.cfg)))

    def valid_rows(slots, upto=None):
        return sum(int(b.traj_valid[s, :upto].sum()) for s in slots)

    in_flight = valid_rows([s for q in runner.queues.full_slots for s in drain(q)])
    in_flight += valid_rows([s for learner in learners for s in learner.source.pending_slots])
    in_flight += sum(
        valid_rows([s], upto=t) for s, t in zip(b.agent_slot.tolist(), b.agent_step.tolist())
    )
    assert sum(learner.env_steps for learner in learners) + in_flight == stepped[0]
    lengths = [length for w in workers for _, _, length, _ in w.reports.finished_episodes]
    assert set(lengths) == {3, 5, 8}


@pytest.mark.slow
def test_multi_agent_runs_train_two_policies_and_a_pettingzoo_env(tmp_path):
    """Real processes: the synthetic multi-agent env with agents leaving early and two policies
    mixed in envs learns (random play scores a quarter of the steps); a PettingZoo butterfly env,
    imported by path, trains."""
    r = run_cli(
        "train",
        *flags(
            env="synthetic_multi",
            env_options='{"num_agents": 3, "agent_episode_lens": [5, 9, 30], "episode_len": 12, "step_us": 20}',
            num_policies=2,
            train_dir=tmp_path,
            experiment="ma",
            train_for_env_steps=16_000,
            num_workers=2,
            num_envs_per_worker=4,
            seed=1,
            experiment_summaries_interval=2,
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = read_stats(tmp_path / "ma")
    optimum = (5 + 9 + 12) / 3
    for p in (0, 1):
        last = [row for row in rows if row["policy_id"] == p][-1]
        assert last["episode_reward_mean"] > 0.6 * optimum, last

    r = run_cli(
        "train",
        *flags(
            env="pettingzoo.butterfly.knights_archers_zombies_v11:parallel_env",
            env_options='{"max_cycles": 100}',
            train_dir=tmp_path,
            experiment="kaz",
            train_for_env_steps=4000,
            num_workers=2,
            num_envs_per_worker=2,
            rnn_size=64,
            batch_size=256,
            seed=1,
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    last = read_stats(tmp_path / "kaz")[-1]
    assert (
        last["episodes"] > 0 and 0 < last["episode_len_mean"] <= 100 and last["env_steps"] >= 4000
    ), last
