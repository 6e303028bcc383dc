"""Per-policy hyperparameters and population-based training: mutation and copy rules, the in-memory
copy of a learner's weights and Adam state, and a real run (pbt.jsonl, hyperparameters in the stats,
resume)."""

import json
import random

import gymnasium as gym
import pytest
import torch
from helpers import (
    assert_user_error,
    flags,
    read_jsonl,
    read_stats,
    run_cli_error,
    run_until,
    start_cli,
)

from asyncrl.algo.optimizer import Adam, learner_state_floats, pack_state, unpack_state
from asyncrl.cfg.config import Config
from asyncrl.cfg.groups.population import PER_POLICY_HPARAMS
from asyncrl.core.checkpoint import checkpoint_dir, list_checkpoints, load_checkpoint
from asyncrl.core.messages import StateExported
from asyncrl.model.actor_critic import build_model
from asyncrl.population.pbt import MUTATED, copy_source, mutate


def test_mutation_multiplies_or_divides_within_the_range_and_gamma_only_when_asked():
    cfg = Config(env="x", pbt_mutation_rate=1.0)
    start = cfg.policy_hparams(0)
    for seed in range(20):
        out = mutate(start, cfg, random.Random(seed))
        for name in MUTATED:
            factor = out[name] / start[name]
            assert 1.1 <= factor <= 1.5 or 1 / 1.5 <= factor <= 1 / 1.1, (name, factor)
        assert out["gamma"] == start["gamma"]
    gamma_cfg = Config(env="x", pbt_mutation_rate=1.0, pbt_optimize_gamma=True)
    horizons = {
        round((1 - mutate(start, gamma_cfg, random.Random(s))["gamma"]) / (1 - start["gamma"]), 6)
        for s in range(20)
    }
    assert all(1.1 <= h <= 1.5 or 1 / 1.5 <= h <= 1 / 1.1 for h in horizons) and len(horizons) > 1
    assert mutate(start, Config(env="x", pbt_mutation_rate=0.0), random.Random(0)) == start


def test_only_a_bottom_policy_trailing_by_the_gaps_copies_a_top_one():
    # ceil(0.3 * 4) = 2 bottom, 2 top
    cfg = Config(env="x", num_policies=4)
    objectives = [100.0, 89.0, 10.0, 95.0]
    # top
    assert copy_source(0, objectives, cfg, random.Random(0)) is None
    assert copy_source(2, objectives, cfg, random.Random(0)) in (0, 3)
    # from 95 the gap is under 10%, from 100 over it
    assert {copy_source(1, objectives, cfg, random.Random(s)) for s in range(20)} == {None, 0}
    assert copy_source(2, [1.0, 1.0, 1.0, 1.0], cfg, random.Random(0)) is None


def test_packed_state_carries_weights_and_adam_moments():
    """After a copy through the flat tensor, the two learners are the same learner: the same
    weights, and the same next Adam step on the same gradient."""
    cfg = Config(env="x", use_rnn=False, encoder_mlp_layers=[8])
    obs_space = gym.spaces.Box(-1, 1, (4,))
    action_space = gym.spaces.Discrete(3)
    models = [build_model(obs_space, action_space, cfg) for _ in range(2)]
    optimizers = [Adam(m.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8) for m in models]
    x = torch.randn(16, 4)

    def step(model, optimizer):
        optimizer.zero_grad()
        params, values, _ = model.forward_step(x, torch.zeros(16, model.rnn_state_size))
        (params.pow(2).mean() + values.pow(2).mean()).backward()
        optimizer.step()

    for _ in range(3):
        step(models[0], optimizers[0])
    flat = torch.zeros(learner_state_floats(models[0]))
    pack_state(models[0], optimizers[0], flat)
    unpack_state(models[1], optimizers[1], flat)
    step(models[0], optimizers[0])
    step(models[1], optimizers[1])
    for a, b in zip(models[0].state_dict().values(), models[1].state_dict().values()):
        torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_pbt_run_copies_and_mutates_in_memory_logs_and_resumes_its_hyperparameters(tmp_path):
    """CartPole, 3 policies, policy 2 starts with a learning rate that cannot learn: PBT copies
    weights into bottom policies and mutates; pbt.jsonl holds every decision; the stats report each
    policy's hyperparameters; a resumed run starts from the hyperparameters its checkpoints saved
    (not the command line's)."""
    pbt_run = [
        *flags(
            env="CartPole-v1",
            num_policies=3,
            with_pbt="True",
            pbt_period_env_steps=4000,
            pbt_start_mutation=4000,
            pbt_mutation_rate=0.5,
            policy_overrides='{"2": {"learning_rate": 1e-7}}',
            train_dir=tmp_path,
            experiment="pbt",
            seed=1,
            experiment_summaries_interval=1,
            num_envs_per_worker=8,
        ),
    ]
    log = tmp_path / "pbt" / "pbt.jsonl"

    def decisions() -> list[dict]:
        return read_jsonl(log) if log.exists() else []

    def enough_decisions() -> bool:
        made = decisions()
        return len(made) >= 6 and any(d["copied_from"] is not None for d in made)

    run_until(
        start_cli("train", *pbt_run), enough_decisions, "six PBT decisions, one of them a copy"
    )
    assert {d["policy"] for d in decisions()} == {0, 1, 2}
    for d in decisions():
        assert len(d["objectives"]) == 3 and set(d["hparams_before"]) == set(
            d["hparams_after"]
        ) == set(PER_POLICY_HPARAMS)
    first = next(d for d in decisions() if d["policy"] == 2)
    assert first["hparams_before"]["learning_rate"] == 1e-7
    rows = read_stats(tmp_path / "pbt")
    assert {row["policy_id"] for row in rows if "hp_learning_rate" in row} == {0, 1, 2}

    saved = [
        load_checkpoint(list_checkpoints(checkpoint_dir(str(tmp_path / "pbt"), p))[-1])["hparams"]
        for p in range(3)
    ]
    resumed_from = len(rows)

    def hparams_reported() -> bool:
        new_rows = read_stats(tmp_path / "pbt")[resumed_from:]
        return {row["policy_id"] for row in new_rows if "hp_learning_rate" in row} == {0, 1, 2}

    run_until(
        start_cli("train", *pbt_run, "--pbt_start_mutation", 10**9),
        hparams_reported,
        "every policy's hparams",
    )
    new_rows = read_stats(tmp_path / "pbt")[resumed_from:]
    for p in range(3):
        row = next(row for row in new_rows if row["policy_id"] == p and "hp_learning_rate" in row)
        assert {name: row[f"hp_{name}"] for name in PER_POLICY_HPARAMS} == pytest.approx(saved[p])


@pytest.mark.slow
def test_two_policies_train_and_overrides_without_pbt_reach_their_learners(tmp_path):
    """Two policies on CartPole: both train (stats, checkpoints), each with its own
    hyperparameters."""

    def trained_rows() -> dict[int, dict]:
        stats = tmp_path / "o" / "stats.jsonl"
        rows = read_jsonl(stats) if stats.exists() else []
        return {
            row["policy_id"]: row
            for row in rows
            if "hp_learning_rate" in row
            and row["train_step"] > 0
            and row["episode_reward_mean"] is not None
        }

    run = start_cli(
        "train",
        *flags(
            env="CartPole-v1",
            num_policies=2,
            learning_rate=3e-4,
            policy_overrides='{"1": {"learning_rate": 2e-5, "gamma": 0.9}}',
            train_dir=tmp_path,
            experiment="o",
            seed=1,
            experiment_summaries_interval=1,
        ),
    )
    run_until(
        run,
        lambda: len(trained_rows()) == 2,
        "both policies trained, their hyperparameters in the stats",
    )
    by_policy = trained_rows()
    assert by_policy[0]["hp_learning_rate"] == 3e-4 and by_policy[0]["hp_gamma"] == Config.gamma
    assert by_policy[1]["hp_learning_rate"] == 2e-5 and by_policy[1]["hp_gamma"] == 0.9
    for policy in (0, 1):
        assert list_checkpoints(checkpoint_dir(str(tmp_path / "o"), policy))


@pytest.mark.parametrize(
    "given,needle",
    [
        (
            ["--num_policies", 2, "--with_pbt", "True", "--pbt_replace_fraction", 0.7],
            "--pbt_replace_fraction must be in (0, 0.5]",
        ),
        (
            ["--num_policies", 2, "--with_pbt", "True", "--pbt_mutation_rate", 1.5],
            "--pbt_mutation_rate must be in [0, 1]",
        ),
        (["--with_pbt", "True"], "needs a population"),
        (
            ["--num_policies", 2, "--policy_overrides", '{"1": {"learning_rat": 1e-7}}'],
            "unknown key 'learning_rat'",
        ),
        (
            ["--num_policies", 2, "--policy_overrides", '{"2": {"learning_rate": 1e-7}}'],
            "'2' is not a policy index",
        ),
        (
            ["--num_policies", 2, "--policy_overrides", '{"1": {"gamma": 1.5}}'],
            "gamma of policy 1 must be in [0, 1]",
        ),
    ],
)
def test_bad_pbt_flags_are_one_line_and_exit_2(tmp_path, given, needle):
    r = run_cli_error("train", "--env", "CartPole-v1", *given, "--train_dir", tmp_path)
    assert_user_error(r, needle)


def test_every_policy_gets_a_decision_on_the_populations_clock(tmp_path):
    """Two policies make almost all the env steps (long episodes), two dead ones almost none: each
    time the mean env steps pass another period, all four get a decision, the dead ones included."""
    from asyncrl.population.pbt import PopulationBasedTraining
    from asyncrl.population.policy_stats import PolicyStats

    # the shared per-policy hyperparameters, as SharedBuffers keeps them
    class Hparams:
        def __init__(self, cfg):
            self.values = [cfg.policy_hparams(p) for p in range(cfg.num_policies)]

        def hparams(self, p):
            return dict(self.values[p])

        def set_hparams(self, p, values):
            self.values[p] = dict(values)

    class Commands(list):
        put = list.append

    cfg = Config(
        env="x",
        num_policies=4,
        pbt_period_env_steps=200_000,
        pbt_start_mutation=0,
        with_pbt=True,
        train_dir=str(tmp_path),
        experiment="pbt",
        seed=0,
    )
    (tmp_path / "pbt").mkdir()
    policies = [PolicyStats(p, 10) for p in range(4)]
    pbt = PopulationBasedTraining(cfg, Hparams(cfg), [Commands() for _ in range(4)], policies)
    # 10,000 env steps a report: 19,000 for each good policy, 1,000 for each dead one
    for step in range(1, 101):
        for p, share in zip(policies, (19, 19, 1, 1)):
            p.add_learner_report({"env_steps": step * share * 1000}, float(step))
            p.add_episode(500.0 if share > 1 else 20.0, 500 if share > 1 else 20, {})
        pbt.update()
        # each source's learner exported its state, its copies imported it
        for source in list(pbt.waiting):
            pbt.exported(StateExported(source))
        pbt.importing.clear()
    rows = [json.loads(line) for line in open(tmp_path / "pbt" / "pbt.jsonl")]
    # the clock (mean env steps) reached 1M: 5 periods of 200k, a decision for each policy at each
    assert {row["policy"]: sum(r["policy"] == row["policy"] for r in rows) for row in rows} == {
        p: 5 for p in range(4)
    }
    assert all(row["population_env_steps"] % 200_000 < 10_000 for row in rows)
    assert {row["copied_from"] for row in rows if row["policy"] in (2, 3)} <= {0, 1} and any(
        row["copied_from"] is not None for row in rows if row["policy"] in (2, 3)
    )
