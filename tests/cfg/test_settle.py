"""The settings pipeline (asyncrl/cfg/settle.py): each stage overrides the ones before it, every
setting off its default remembers the stage that set it, and config.json and the run's first lines
say so."""

import json
import os

import pytest

from asyncrl.cfg.config import Config
from asyncrl.cfg.settle import ORIGINS_KEY, Settled, settle


def test_each_stage_overrides_the_ones_before_it_and_is_named_as_the_origin():
    settled = settle(
        flags={"env": "CartPole-v1", "rollout": 64},
        env={"rollout": 16, "learning_rate": 1e-3, "gamma": 0.9},
        tuned={"learning_rate": 2e-3, "num_workers": 3},
        saved={"env": "CartPole-v1", "num_workers": 5, "gamma": 0.95},
    )
    cfg = settled.config
    assert (cfg.rollout, cfg.learning_rate, cfg.num_workers, cfg.gamma) == (64, 2e-3, 5, 0.95)
    origins = settled.origins
    assert origins["rollout"] == "flags" and origins["learning_rate"] == "tuned"
    assert origins["num_workers"] == "saved run" and origins["gamma"] == "saved run"
    changes = settled.changes()
    assert "rollout=64" in changes["flags"] and "learning_rate=0.002" in changes["tuned"]
    # every value the env gave was overridden later
    assert "env defaults" not in changes


def test_the_algorithms_defaults_follow_the_settings_unless_a_flag_sets_them():
    ppo = settle(
        {
            "env": "CartPole-v1",
            "algo": "ppo",
            "num_workers": 2,
            "num_envs_per_worker": 4,
            "rollout": 8,
        }
    )
    assert ppo.config.batch_size == 2 * 4 * 8 and ppo.config.with_vtrace is False
    assert ppo.origins["batch_size"] == "algo" and ppo.origins["with_vtrace"] == "algo"
    ranks = settle(
        {"env": "CartPole-v1", "algo": "ppo", "num_workers": 2, "num_envs_per_worker": 4},
        world_size=3,
    )
    # the batch of all ranks together
    assert ranks.config.batch_size == 2 * 4 * ranks.config.rollout * 3
    given = settle({"env": "CartPole-v1", "algo": "ppo", "batch_size": 96})
    assert given.config.batch_size == 96 and given.origins["batch_size"] == "flags"
    # appo: no algorithm stage
    assert settle({"env": "CartPole-v1"}).config.batch_size == Config.batch_size


@pytest.mark.parametrize(
    "flags",
    [{"algo": "ppo"}, {"algo": "ver"}, {"deterministic": True}, {"policy_workers_per_policy": 2}],
)
def test_an_envs_worker_inference_gives_way_where_it_cannot_run(flags):
    """An env's default --worker_inference True would otherwise refuse a run for a flag its user
    never gave; given as a flag, it is refused there (test_train.py's bad input)."""
    env = {"worker_inference": True}
    settled = settle({"env": "CartPole-v1", **flags}, env=env)
    assert settled.config.worker_inference is False
    assert settle({"env": "CartPole-v1"}, env=env).config.worker_inference is True
    given = settle({"env": "CartPole-v1", "worker_inference": True, **flags})
    assert given.config.worker_inference is True


def test_a_saved_config_resumes_as_it_was_and_an_old_one_keeps_its_old_defaults():
    first = settle({"env": "CartPole-v1", "num_workers": 3}, env={"reward_scale": 0.1})
    # as config.json holds it, its origins beside the fields
    saved = json.loads(json.dumps(first.to_json()))
    assert saved[ORIGINS_KEY] == {
        "flags": ["env=CartPole-v1", "num_workers=3"],
        "env defaults": ["reward_scale=0.1"],
    }
    resumed = settle({"train_for_seconds": 5.0}, env={"reward_scale": 0.1}, saved=saved)
    assert resumed.config == Config(**{**first.config.to_json(), "train_for_seconds": 5.0})
    old = {k: v for k, v in saved.items() if k not in ("normalize_returns", ORIGINS_KEY)}
    # a flag a newer version dropped is not a setting
    old["removed_flag"] = 1
    # saved before it existed: as it ran then
    assert settle({}, saved=old).config.normalize_returns is False


def test_a_later_stage_is_the_origin_only_of_what_it_changes():
    settled = settle({"env": "CartPole-v1", "num_workers": 3})
    run = settled.then("rank", {}).then("auto", {"num_workers": 3, "agents_per_env": 1})
    assert run.origins["num_workers"] == "flags" and run.origins["agents_per_env"] == "auto"
    assert run.lines() == [
        "flags: env=CartPole-v1, num_workers=3",
        "auto: agents_per_env=1",
    ]
    assert Settled.of(run.config, "test").changes() == {
        "test": ["env=CartPole-v1", "num_workers=3", "agents_per_env=1"]
    }


def test_a_run_says_where_its_settings_came_from(cartpole_run):
    train_dir, stdout = cartpole_run
    with open(os.path.join(train_dir, "cp", "config.json")) as f:
        origins = json.load(f)[ORIGINS_KEY]
    assert "eval_episodes=3" in origins["flags"] and "env=CartPole-v1" in origins["flags"]
    assert "asyncrl: flags: env=CartPole-v1, " in stdout
    assert "asyncrl: auto: agents_per_env=1" in stdout.splitlines()
