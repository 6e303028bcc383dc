"""The flags of when a run stops and what it saves and logs."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag


@dataclass
class OutputFlags:
    """When to stop, what to save and log"""

    train_for_env_steps: int = flag(
        10_000_000_000, "Stop when every policy has this many env frames (frameskip included)."
    )
    train_for_seconds: float = flag(10_000_000_000, "Stop after this many seconds of this launch.")
    save_every_sec: float = flag(120, "Checkpoint interval in seconds.")
    keep_checkpoints: int = flag(2, "Checkpoints kept per policy (the newest).")
    save_milestones_sec: float = flag(
        -1,
        "Keep a checkpoint at least this many seconds apart for good, in "
        "checkpoint_p<id>/milestones/ (to evaluate the run's past later); -1: never.",
    )
    experiment_summaries_interval: float = flag(
        5, "Seconds between progress lines, TensorBoard points and stats.jsonl rows."
    )
    stats_avg: int = flag(100, "Episodes in the moving average of reported episode stats.")
    log_level: str = flag(
        "info",
        "The engine's log lines shown and written: debug, info, warning or error (the progress line is always shown).",
        choices=["debug", "info", "warning", "error"],
    )
    log_to_file: bool = flag(
        True, "Also write the engine's log lines, with their time, to <experiment>/log.txt."
    )
    with_wandb: bool = flag(
        False,
        "Also log the run to Weights & Biases (wandb): the TensorBoard scalars, the config "
        "and enjoy's replay videos; a resumed run goes on in the same wandb run.",
    )
    wandb_user: str | None = flag(
        None, "The wandb entity (user or team) of the run; None: your default one."
    )
    wandb_project: str = flag("asyncrl", "The wandb project of the run.")
    wandb_group: str | None = flag(
        None, "The wandb group of the run (e.g. the runs of one sweep); None: none."
    )
    wandb_job_type: str = flag("train", "The wandb job type of the run.")
    wandb_tags: list = flag([], "wandb tags of the run, e.g. doom baseline.")
