"""The Python API: asyncrl.train (the CLI's flags as keyword arguments), asyncrl.load (a policy that
acts in a plain gymnasium loop) and asyncrl.register_encoder (a user's encoder, chosen by a flag and
found again from the run)."""

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import flags, read_stats, run_cli

import asyncrl
from asyncrl.api import flags_to_argv
from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.model.actor_critic import build_model
from asyncrl.model.policy import Policy


def test_keyword_arguments_become_the_clis_flags():
    argv = flags_to_argv(
        {
            "env": "CartPole-v1",
            "use_rnn": False,
            "encoder_mlp_layers": [8, 8],
            "seed": None,
            "learning_rate": 1e-3,
        }
    )
    assert argv == [
        *("--env", "CartPole-v1", "--use_rnn", "False"),
        *("--encoder_mlp_layers", "[8, 8]", "--learning_rate", "0.001"),
    ]
    with pytest.raises(
        ConfigError, match=r"unknown flag\(s\) learning_rte \(did you mean learning_rate\?\)"
    ):
        flags_to_argv({"learning_rte": 1e-3})


def test_bad_input_raises_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="--num_workers must be positive"):
        asyncrl.train(env="CartPole-v1", num_workers=0, train_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="is no run folder"):
        asyncrl.load(str(tmp_path / "nothing here"))
    assert not list(tmp_path.iterdir())


def test_a_mistyped_local_run_folder_is_not_taken_for_a_hub_repository(tmp_path, monkeypatch):
    """train_dir/cartpol beside train_dir/cartpole: the nearest run folder is named, and the Hub
    (USER/NAME) is not asked."""
    (tmp_path / "train_dir" / "cartpole").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"\(did you mean train_dir/cartpole\?\)"):
        asyncrl.load("train_dir/cartpol")


def policy_of(cfg: Config) -> Policy:
    env = gym.make(cfg.env)
    return Policy(
        build_model(env.observation_space, env.action_space, cfg),
        env.observation_space,
        env.action_space,
        cfg,
    )


@pytest.mark.parametrize("use_rnn", [False, True])
def test_act_takes_one_observation_or_a_batch_and_carries_the_recurrent_state(use_rnn):
    torch.manual_seed(0)
    policy = policy_of(Config(env="CartPole-v1", use_rnn=use_rnn, rnn_size=16))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    actions, states = policy.act(obs, deterministic=True)
    assert actions.shape == (5,) and states.shape == (5, 16 if use_rnn else 0)
    # one observation at a time, each from its own state, gives the batch's rows
    for i in range(5):
        action, state = policy.act(obs[i], deterministic=True)
        assert action == actions[i] and isinstance(action, int)
        np.testing.assert_allclose(state, states[i], atol=1e-6)
        again, _ = policy.act(obs[i], state, deterministic=True)
        if not use_rnn:
            assert again == action
    # the state moves on, and a given state is used
    if use_rnn:
        _, next_states = policy.act(obs, states)
        assert not np.allclose(next_states, states)
    with pytest.raises(ValueError, match=r"the policy takes \(4,\)"):
        policy.act(np.zeros(3))


def test_a_loaded_run_plays_a_plain_gymnasium_loop(cartpole_run):
    """The shared CartPole run (40k steps), loaded by its folder, by a checkpoint file and at its
    best evaluation, plays CartPole-v1 made by gymnasium itself."""
    train_dir, _ = cartpole_run
    run = train_dir / "cp"
    best = asyncrl.load(str(run), checkpoint="best")
    latest = asyncrl.load(str(run))
    by_file = asyncrl.load(str(sorted((run / "checkpoint_p0").glob("checkpoint_*.pth"))[-1]))
    assert all(
        torch.equal(a, b)
        for a, b in zip(latest.model.state_dict().values(), by_file.model.state_dict().values())
    )
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(5):
        obs, _ = env.reset(seed=episode)
        state = None
        total = 0.0
        done = False
        while not done:
            action, state = best.act(obs, state, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total = total + reward
            done = terminated or truncated
        returns.append(total)
    evaluated = json.loads((run / "stats.jsonl").read_text().splitlines()[-1])
    # random play scores ~22; the run scored > 100
    assert np.mean(returns) > 60, (returns, evaluated)


def user_script(tmp_path, body: str) -> str:
    """A user's script: an encoder registered at the top level, `body` under the main guard."""
    script = tmp_path / "train_tiny.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import asyncrl


            def tiny_encoder(obs_space, cfg):
                size = int(torch.tensor(obs_space.shape).prod())
                return torch.nn.Sequential(torch.nn.Linear(size, 32), torch.nn.Tanh()), 32


            asyncrl.register_encoder("tiny", tiny_encoder)

            if __name__ == "__main__":
            """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return str(script)


@pytest.mark.slow
def test_train_from_python_with_a_users_encoder_then_enjoy_and_load_find_it(
    tmp_path, clean_machine
):
    """train() runs the CLI's run (folder, stats, config.json with where the encoder came from); the
    encoder is in the checkpoints, and `asyncrl enjoy` in another process builds it from the script;
    a second train() resumes."""
    script = user_script(
        tmp_path,
        f"""
        for steps in (4_000, 8_000):
            run = asyncrl.train(env="CartPole-v1", encoder="tiny", train_dir={str(tmp_path)!r}, experiment="tiny",
                                train_for_env_steps=steps, num_workers=1, num_envs_per_worker=4)
            print("RESULT", run.experiment_dir, run.stats[0]["env_steps"])
        policy = asyncrl.load(run.experiment_dir)
        print("ENCODER", type(policy.model.encoder[0]).__name__, policy.model.encoder[0].out_features)
        """,
    )
    r = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = [line.split() for line in r.stdout.splitlines() if line.startswith("RESULT")]
    assert [x[1] for x in results] == [str(tmp_path / "tiny")] * 2
    # the second call resumed the first
    assert 4_000 <= int(results[0][2]) < 8_000 <= int(results[1][2])
    assert "resuming policy 0" in r.stdout
    assert "ENCODER Linear 32" in r.stdout
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert config["encoder"] == "tiny" and config["encoder_source"] == script
    assert read_stats(tmp_path / "tiny")[-1]["env_steps"] >= 8_000
    enjoy = run_cli("enjoy", *flags(train_dir=tmp_path, experiment="tiny", max_num_episodes=1))
    assert enjoy.returncode == 0 and "episode 0: return" in enjoy.stdout, (
        enjoy.stdout + enjoy.stderr
    )


def test_an_encoder_that_is_not_registered_is_one_line(tmp_path):
    r = run_cli("train", "--env", "CartPole-v1", "--encoder", "tiny", "--train_dir", tmp_path)
    assert r.returncode == 2 and "--encoder 'tiny' is not registered" in r.stderr, r.stderr
    with pytest.raises(ValueError, match="taken by a built-in"):
        asyncrl.register_encoder("conv", lambda space, cfg: None)
