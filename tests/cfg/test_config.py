"""The config: its flag groups, the flags' parsing and the checks of their values."""

import dataclasses

import pytest
from helpers import run_cli

from asyncrl.cfg.checks import validate
from asyncrl.cfg.config import GROUPS, Config, group_title
from asyncrl.cfg.errors import ConfigError
from asyncrl.commands.train import config_from_args


def test_config_is_its_groups_fields_in_order():
    """Every flag belongs to one group, and Config holds them in the groups' order (the order of
    --help, config.json and the docs' reference)."""
    in_groups = [f.name for group in GROUPS for f in dataclasses.fields(group)]
    assert [f.name for f in dataclasses.fields(Config)] == in_groups
    assert len(set(in_groups)) == len(in_groups)
    assert all(issubclass(Config, group) for group in GROUPS)


def test_every_flag_has_a_help_line_and_every_group_a_title():
    for group in GROUPS:
        assert group_title(group) and "\n" not in group_title(group)
        for f in dataclasses.fields(group):
            assert f.metadata["help"].strip(), f"--{f.name} has no help line"


def test_train_help_shows_the_flags_in_their_groups():
    r = run_cli("train", "--help")
    assert r.returncode == 0, r.stderr
    titles = [group_title(group) + ":" for group in GROUPS]
    where = [r.stdout.index("\n" + title + "\n") for title in titles]
    assert where == sorted(where), "the groups stand in GROUPS' order"
    for group, start, end in zip(GROUPS, where, [*where[1:], len(r.stdout)]):
        section = r.stdout[start:end]
        for f in dataclasses.fields(group):
            assert f"--{f.name} " in section, f"--{f.name} is not under {group_title(group)!r}"
    assert r.stdout.startswith("usage: asyncrl train --env ENV [--FLAG VALUE ...]\n")


def test_a_list_flag_takes_json_or_words_as_sample_factory():
    def parsed(*flags):
        return config_from_args(["--env", "Pendulum-v1", *flags])

    assert parsed("--encoder_mlp_layers", "256", "256").encoder_mlp_layers == [256, 256]
    assert parsed("--encoder_mlp_layers", "[256, 256]").encoder_mlp_layers == [256, 256]
    assert parsed("--wandb_tags", "doom", "baseline").wandb_tags == ["doom", "baseline"]


@pytest.mark.parametrize(
    "name,bad,good",
    [
        ("learning_rate", 0.0, 1e-9),
        ("reward_clip", 0.0, 1.0),
        ("ppo_clip_ratio", 0.0, 0.2),
        ("adam_eps", 0.0, 1e-8),
        ("vtrace_rho", 0.0, 1.0),
        ("vtrace_c", 0.0, 1.0),
        ("vtrace_pg_rho", 0.0, 1.0),
        ("reward_scale", 0.0, 0.01),
        ("max_grad_norm", -1.0, 0.0),
        ("ppo_clip_value", -0.1, 0.0),
        ("value_loss_coeff", -0.5, 0.0),
        ("exploration_loss_coeff", -0.01, 0.0),
        ("kl_loss_coeff", -0.1, 0.0),
        ("gamma", 1.01, 1.0),
        ("gae_lambda", -0.1, 0.0),
        ("adam_beta1", 1.0, 0.0),
        ("adam_beta2", 1.0, 0.99),
    ],
)
def test_learning_hyperparameters_out_of_range_are_refused_before_the_run(name, bad, good):
    """A value that would learn nothing (a clip of 0), diverge, or stop torch's Adam in the learner
    after the start (a beta of 1) is refused by validate; the edge of the range is accepted."""
    validate(Config(env="CartPole-v1", **{name: good}))
    with pytest.raises(ConfigError, match=f"--{name} must be"):
        validate(Config(env="CartPole-v1", **{name: bad}))


def test_an_integer_flag_takes_step_counts_as_researchers_write_them():
    cfg = config_from_args(
        ["--env", "CartPole-v1", "--train_for_env_steps", "1e6", "--seed", "1_000"]
    )
    assert (
        cfg.train_for_env_steps == 1_000_000
        and isinstance(cfg.train_for_env_steps, int)
        and cfg.seed == 1000
    )
    for bad in ("1.5", "2.5e0", "inf", "many"):
        with pytest.raises(ConfigError, match="--train_for_env_steps: expected an integer"):
            config_from_args(["--env", "CartPole-v1", "--train_for_env_steps", bad])


def test_a_path_flag_expands_the_home_folder_the_shell_leaves_after_an_equals_sign(
    monkeypatch, tmp_path
):
    """`--train_dir=~/runs` reaches the program as '~/runs' (the shell expands ~ only at a word's
    start): it made a folder named '~' in the working folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = config_from_args(
        ["--env", "CartPole-v1", "--train_dir=~/runs", "--remote_tls_ca_cert=~/ca.pem"]
    )
    assert cfg.train_dir == str(tmp_path / "runs") and cfg.remote_tls_ca_cert == str(
        tmp_path / "ca.pem"
    )
