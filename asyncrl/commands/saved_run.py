"""A finished run as the commands that play, match, export or share it see it: its config
(config.json, flags on top), and the checkpoint to load."""

from __future__ import annotations

import os

from asyncrl.cfg.config import Config, experiment_dir_of, read_saved_config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.settle import settle
from asyncrl.core.checkpoint import (
    CheckpointError,
    best_checkpoint_path,
    checkpoint_dir,
    list_checkpoints,
)
from asyncrl.envs import default_config_of


def config_of_run(given: dict) -> Config:
    """The config of the run that --train_dir/--experiment name (its config.json), with the flags
    given on top; without a run, --env and the flags (for a --checkpoint file)."""
    experiment_dir = experiment_dir_of(given)
    saved = read_saved_config(experiment_dir) or {}
    env = given.get("env") or saved.get("env")
    if not env:
        raise ConfigError(
            f"no run in {experiment_dir} (no config.json) and no --env: give --train_dir and "
            f"--experiment of a run, or --env with --checkpoint"
        )
    options = given.get("env_options", saved.get("env_options"))
    return settle(given, default_config_of(env, options), saved=saved).config


def checkpoint_to_load(args: dict, cfg: Config) -> str:
    if args["checkpoint"]:
        return args["checkpoint"]
    if args["load_checkpoint_kind"] == "best":
        path = best_checkpoint_path(cfg.experiment_dir, args["policy_index"])
        if not os.path.isfile(path):
            raise CheckpointError(
                f"no {path}: it is written by evaluation during training (--eval_every_env_steps); "
                f"use --load_checkpoint_kind latest"
            )
        return path
    paths = list_checkpoints(checkpoint_dir(cfg.experiment_dir, args["policy_index"]))
    if not paths:
        raise CheckpointError(
            f"no checkpoint in {checkpoint_dir(cfg.experiment_dir, args['policy_index'])}: train "
            f"first (asyncrl train --experiment {cfg.experiment} ...), or give --checkpoint FILE"
        )
    return paths[-1]
