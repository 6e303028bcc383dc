"""The config's checks: each flag's own range, and the flags that must fit together. Each raises
ConfigError with one line that says how to fix it."""

from __future__ import annotations

import os

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.groups.population import PER_POLICY_HPARAMS

# The range of each learning hyperparameter: (whether a value is in it, what to say if not). The flags and every
# --policy_overrides value are checked against it.
POSITIVE = (lambda v: v > 0, "positive")
AT_LEAST_0 = (lambda v: v >= 0, ">= 0")
IN_0_1 = (lambda v: 0 <= v <= 1, "in [0, 1]")
IN_0_1_OPEN = (lambda v: 0 <= v < 1, "in [0, 1)")
HPARAM_RANGES = {
    "learning_rate": POSITIVE,
    "exploration_loss_coeff": AT_LEAST_0,
    "value_loss_coeff": AT_LEAST_0,
    "max_grad_norm": AT_LEAST_0,
    "ppo_clip_ratio": POSITIVE,
    "ppo_clip_value": AT_LEAST_0,
    "gamma": IN_0_1,
    "kl_loss_coeff": AT_LEAST_0,
    "gae_lambda": IN_0_1,
    "vtrace_rho": POSITIVE,
    "vtrace_c": POSITIVE,
    "vtrace_pg_rho": POSITIVE,
    "reward_scale": POSITIVE,
    "reward_clip": POSITIVE,
    "adam_eps": POSITIVE,
    "adam_beta1": IN_0_1_OPEN,
    "adam_beta2": IN_0_1_OPEN,
}


def validate(cfg: Config) -> None:
    """All cross-field checks, in one place (the functions below)."""
    for check in (
        _check_values,
        _check_shapes,
        _check_population,
        _check_algo,
        _check_deterministic,
    ):
        check(cfg)


def _check_values(cfg: Config) -> None:
    """Each flag's own range."""
    if not cfg.env:
        raise ConfigError(
            "--env is required (e.g. --env CartPole-v1; `asyncrl envs` lists the registered ones)"
        )
    positive = [
        "num_workers",
        "num_envs_per_worker",
        "worker_num_splits",
        "num_policies",
        "rollout",
        "batch_size",
        "num_batches_per_epoch",
        "num_epochs",
        "rnn_size",
        "torch_threads",
        "keep_checkpoints",
        "stats_avg",
        "max_policy_lag",
    ]
    for name in positive:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"--{name} must be positive, got {getattr(cfg, name)}")
    if cfg.agents_per_env <= 0 and cfg.agents_per_env != -1:
        raise ConfigError(
            f"--agents_per_env must be positive or -1 (auto), got {cfg.agents_per_env}"
        )
    if cfg.policy_workers_per_policy <= 0 and cfg.policy_workers_per_policy != -1:
        raise ConfigError(
            f"--policy_workers_per_policy must be positive or -1 (auto), got {cfg.policy_workers_per_policy}"
        )
    if cfg.worker_inference and cfg.policy_workers_per_policy != -1:
        raise ConfigError(
            "--worker_inference True starts no policy worker (each rollout worker acts for itself): "
            "drop --policy_workers_per_policy"
        )
    if cfg.env_frameskip is not None and cfg.env_frameskip <= 0:
        raise ConfigError(f"--env_frameskip must be positive, got {cfg.env_frameskip}")
    parts = cfg.experiment.rstrip("/").split("/")
    if os.path.isabs(cfg.experiment) or any(part in ("", ".", "..") for part in parts):
        # the experiment's folder must lie inside --train_dir: restart empties it, and "" would be
        # train_dir itself
        raise ConfigError(
            f"--experiment must name a folder inside --train_dir (a name, or names joined by '/'), "
            f"got {cfg.experiment!r}"
        )
    if cfg.eval_every_env_steps < 0:
        raise ConfigError(
            f"--eval_every_env_steps must be >= 0 (0: no evaluation), got {cfg.eval_every_env_steps}"
        )
    if cfg.eval_every_env_steps and cfg.eval_episodes <= 0:
        raise ConfigError(f"--eval_episodes must be positive, got {cfg.eval_episodes}")
    if cfg.max_worker_restarts < 0:
        raise ConfigError(f"--max_worker_restarts must be >= 0, got {cfg.max_worker_restarts}")
    for name in [
        "env_step_timeout",
        "dist_timeout",
        "train_for_env_steps",
        "train_for_seconds",
        "save_every_sec",
        "experiment_summaries_interval",
        "initial_stddev",
    ]:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"--{name} must be positive, got {getattr(cfg, name)}")
    for name, (in_range, says) in HPARAM_RANGES.items():
        if not in_range(getattr(cfg, name)):
            raise ConfigError(f"--{name} must be {says}, got {getattr(cfg, name)}")
    if cfg.rpo_alpha < 0:
        raise ConfigError(f"--rpo_alpha must be >= 0 (0: plain PPO), got {cfg.rpo_alpha}")
    if not 0 < cfg.lr_adaptive_min <= cfg.lr_adaptive_max or cfg.lr_schedule_kl_threshold <= 0:
        raise ConfigError(
            f"--lr_adaptive_min and --lr_adaptive_max must satisfy 0 < min <= max and "
            f"--lr_schedule_kl_threshold must be positive, got {cfg.lr_adaptive_min}, "
            f"{cfg.lr_adaptive_max} and {cfg.lr_schedule_kl_threshold}"
        )
    if not 0 < cfg.preemption_threshold <= 1 or not 0 <= cfg.preemption_min_fraction <= 1:
        raise ConfigError(
            f"--preemption_threshold must be in (0, 1] and --preemption_min_fraction in [0, 1], got "
            f"{cfg.preemption_threshold} and {cfg.preemption_min_fraction}"
        )


def _check_shapes(cfg: Config) -> None:
    """Sizes that must fit together, and the lists and names a flag takes."""
    if cfg.num_envs_per_worker % cfg.worker_num_splits:
        raise ConfigError(
            f"--num_envs_per_worker ({cfg.num_envs_per_worker}) must be divisible by "
            f"--worker_num_splits ({cfg.worker_num_splits})"
        )
    if cfg.recurrence != -1 and (cfg.recurrence <= 0 or cfg.rollout % cfg.recurrence):
        raise ConfigError(
            f"--recurrence ({cfg.recurrence}) must divide --rollout ({cfg.rollout}), or be -1"
        )
    if not cfg.use_rnn and cfg.recurrence not in (-1, 1):
        raise ConfigError(
            f"--recurrence {cfg.recurrence} needs --use_rnn True (without an RNN it must be 1 or -1)"
        )
    if cfg.use_rnn and not cfg.actor_critic_share_weights:
        raise ConfigError(
            "--actor_critic_share_weights False needs --use_rnn False (a critic with a recurrent core "
            "of its own is not built)"
        )
    if cfg.use_rnn and cfg.compile_learner:
        raise ConfigError(
            "--compile_learner True needs --use_rnn False (a recurrent model's step unrolls over its time steps: "
            "it compiles for tens of seconds and then runs slower than uncompiled)"
        )
    if cfg.use_rnn and cfg.shuffle_samples:
        raise ConfigError(
            "--shuffle_samples True needs --use_rnn False (a recurrent model learns from whole trajectories)"
        )
    if cfg.batch_size % cfg.rollout:
        raise ConfigError(
            f"--batch_size ({cfg.batch_size}) must be a multiple of --rollout ({cfg.rollout})"
        )
    slots_per_minibatch, rem = divmod(cfg.batch_size // cfg.rollout, cfg.num_batches_per_epoch)
    if rem or slots_per_minibatch == 0:
        raise ConfigError(
            f"--batch_size/--rollout ({cfg.batch_size // cfg.rollout} trajectories) must be a "
            f"multiple of --num_batches_per_epoch ({cfg.num_batches_per_epoch})"
        )
    for name in ("encoder_mlp_layers", "critic_mlp_layers"):
        if any(not isinstance(n, int) or n <= 0 for n in getattr(cfg, name)):
            raise ConfigError(f"--{name} must be a list of positive ints, got {getattr(cfg, name)}")
    if cfg.critic_mlp_layers and cfg.actor_critic_share_weights:
        raise ConfigError(
            "--critic_mlp_layers sizes the critic's own MLP: it needs --actor_critic_share_weights False"
        )
    if not (cfg.device in ("auto", "cpu", "cuda") or cfg.device.startswith("cuda:")):
        raise ConfigError(f"--device must be auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    if cfg.selfplay_snapshot_every_env_steps < 0 or cfg.selfplay_pool_size <= 0:
        raise ConfigError(
            "--selfplay_snapshot_every_env_steps must be >= 0 and --selfplay_pool_size positive"
        )
    if not 0 <= cfg.selfplay_frozen_fraction <= 1:
        raise ConfigError(
            f"--selfplay_frozen_fraction must be in [0, 1], got {cfg.selfplay_frozen_fraction}"
        )


def _check_population(cfg: Config) -> None:
    """Per-policy hyperparameters and population-based training."""
    for key, overrides in cfg.policy_overrides.items():
        if not (key.isdigit() and int(key) < cfg.num_policies):
            raise ConfigError(
                f"--policy_overrides: {key!r} is not a policy index (0..{cfg.num_policies - 1})"
            )
        if not isinstance(overrides, dict):
            raise ConfigError(
                f"--policy_overrides: policy {key} needs an object of hyperparameters, got {overrides!r}"
            )
        for name, value in overrides.items():
            if name not in PER_POLICY_HPARAMS:
                raise ConfigError(
                    f"--policy_overrides: unknown key {name!r} for policy {key}; per-policy keys: "
                    f"{', '.join(PER_POLICY_HPARAMS)}"
                )
            in_range, says = HPARAM_RANGES[name]
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError(
                    f"--policy_overrides: {name} of policy {key} must be a number, got {value!r}"
                )
            if not in_range(value):
                raise ConfigError(
                    f"--policy_overrides: {name} of policy {key} must be {says}, got {value!r}"
                )
    if not cfg.with_pbt:
        return
    if cfg.num_policies < 2:
        raise ConfigError("--with_pbt True needs a population: --num_policies 2 or more")
    if not 0 < cfg.pbt_replace_fraction <= 0.5:
        raise ConfigError(
            f"--pbt_replace_fraction must be in (0, 0.5] (bottom and top must not overlap), "
            f"got {cfg.pbt_replace_fraction}"
        )
    if not 0 <= cfg.pbt_mutation_rate <= 1:
        raise ConfigError(f"--pbt_mutation_rate must be in [0, 1], got {cfg.pbt_mutation_rate}")
    if not 1 < cfg.pbt_perturb_min <= cfg.pbt_perturb_max:
        raise ConfigError(
            f"--pbt_perturb_min/max must satisfy 1 < min <= max, got {cfg.pbt_perturb_min}, {cfg.pbt_perturb_max}"
        )
    if cfg.pbt_period_env_steps <= 0 or cfg.pbt_start_mutation < 0:
        raise ConfigError("--pbt_period_env_steps must be positive and --pbt_start_mutation >= 0")


def _check_algo(cfg: Config) -> None:
    """Options only asynchronous APPO has: with --algo ppo/ver one line that says which to drop (and
    the one option APPO lacks)."""
    if not cfg.synchronous:
        if cfg.preemption_rule == "optimal":
            raise ConfigError(
                "--preemption_rule optimal ends rollouts, which only --algo ppo and --algo ver have; "
                "use --preemption_rule ddppo with --algo appo"
            )
        return
    only_appo = [
        ("--with_vtrace True", cfg.with_vtrace),
        ("--num_policies > 1", cfg.num_policies > 1),
        ("--with_pbt True", cfg.with_pbt),
        ("--selfplay_snapshot_every_env_steps", cfg.selfplay_snapshot_every_env_steps > 0),
        ("--policy_workers_per_policy > 1", cfg.policy_workers_per_policy > 1),
        ("--remote_reconnect True", cfg.remote_reconnect),
        ("--worker_inference True", cfg.worker_inference),
    ]
    given = [name for name, used in only_appo if used]
    if given:
        raise ConfigError(
            f"--algo {cfg.algo} is synchronous and on-policy: {', '.join(given)} only works with "
            f"--algo appo; drop it or use --algo appo"
        )


def _check_deterministic(cfg: Config) -> None:
    """What --deterministic's fixed schedule does not cover: a frozen pool's snapshots and PBT's
    exchanges fall on the wall clock."""
    if not cfg.deterministic:
        return
    uncovered = [
        ("--selfplay_snapshot_every_env_steps", cfg.selfplay_snapshot_every_env_steps > 0),
        ("--with_pbt True", cfg.with_pbt),
        ("--worker_inference True", cfg.worker_inference),
    ]
    given = [name for name, used in uncovered if used]
    if given:
        raise ConfigError(
            f"--deterministic True does not cover {', '.join(given)} (its timing is the wall clock's); "
            f"drop one of them"
        )
