"""The flags of self-play against frozen past versions, per-policy hyperparameters and
population-based training."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag

# Learning hyperparameters each policy holds for itself: --policy_overrides sets them per policy,
# PBT mutates them.
PER_POLICY_HPARAMS = (
    "learning_rate",
    "exploration_loss_coeff",
    "value_loss_coeff",
    "max_grad_norm",
    "ppo_clip_ratio",
    "ppo_clip_value",
    "gamma",
)


@dataclass
class SelfPlayFlags:
    """Self-play against frozen past versions (multi-agent envs)"""

    selfplay_snapshot_every_env_steps: int = flag(
        0,
        "Every this many env steps of a policy, a frozen copy of its "
        "weights joins that policy's pool of past versions in shared memory "
        "(up to --selfplay_pool_size; the oldest is replaced). 0: no pool.",
    )
    selfplay_pool_size: int = flag(4, "Frozen past versions kept per policy.")
    selfplay_frozen_fraction: float = flag(
        0.5,
        "Fraction of a multi-agent env's episodes in which one learning policy "
        "plays against frozen past versions (once a pool holds any); their samples "
        "never reach a learner.",
    )
    matchmaking: str = flag(
        "uniform",
        "How frozen opponents are chosen: uniform, or rating (likelier the closer their "
        "skill rating to the learning policy's).",
        choices=["uniform", "rating"],
    )

    @property
    def frozen_pool_size(self) -> int:
        """Frozen past versions per policy in shared memory (0 without self-play snapshots)."""
        return self.selfplay_pool_size if self.selfplay_snapshot_every_env_steps else 0


@dataclass
class PopulationFlags:
    """Per-policy hyperparameters and population-based training (Sample Factory's flags)"""

    policy_overrides: dict = flag(
        {},
        'Starting hyperparameters per policy, as JSON: \'{"1": {"learning_rate": '
        "1e-7}}'. Keys: learning_rate, exploration_loss_coeff, value_loss_coeff, "
        "max_grad_norm, ppo_clip_ratio, ppo_clip_value, gamma.",
    )
    with_pbt: bool = flag(
        False,
        "Population-based training: every --pbt_period_env_steps of the population's mean "
        "env steps, a policy in the bottom "
        "--pbt_replace_fraction copies a top policy's weights and optimizer state (in memory) and "
        "hyperparameters; every policy's hyperparameters mutate. Decisions go to "
        "<experiment>/pbt.jsonl.",
    )
    pbt_period_env_steps: int = flag(
        5_000_000,
        "The population's mean env steps between PBT decisions (each one decides for every policy).",
    )
    pbt_start_mutation: int = flag(
        20_000_000, "The first PBT decisions come once the population's mean env steps pass this."
    )
    pbt_replace_fraction: float = flag(
        0.3,
        "Fraction of the population (rounded up) that counts as bottom, and as top; in (0, 0.5].",
    )
    pbt_mutation_rate: float = flag(
        0.15, "Probability that each hyperparameter mutates at a PBT update."
    )
    pbt_replace_reward_gap: float = flag(
        0.1,
        "A bottom policy copies a top one only if the top one's objective is "
        "higher by this fraction of its magnitude (and by "
        "--pbt_replace_reward_gap_absolute).",
    )
    pbt_replace_reward_gap_absolute: float = flag(
        1e-6, "The least objective gap for a copy (see --pbt_replace_reward_gap)."
    )
    pbt_optimize_gamma: bool = flag(False, "Mutate gamma too (through 1 - gamma).")
    pbt_perturb_min: float = flag(
        1.1, "A mutation multiplies or divides a hyperparameter by U[min, max]."
    )
    pbt_perturb_max: float = flag(1.5, "See --pbt_perturb_min.")
    pbt_target_objective: str = flag(
        "true_objective",
        "The episode stat (info['episode_stats']) PBT ranks policies by, "
        "averaged over the last --stats_avg episodes; envs without it are ranked by return.",
    )
