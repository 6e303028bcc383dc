"""Checkpoints: one folder per policy, files named by train step, written atomically (temp file,
then rename).

torch is imported by the functions that read or write a file, not here: the commands that play or
share a run find its checkpoint (or say there is none) before torch's import, which takes
seconds."""

from __future__ import annotations

import glob
import os
import shutil
import time
from typing import TYPE_CHECKING

from asyncrl.cfg.errors import CheckpointError

if TYPE_CHECKING:
    import torch


# the folder of a policy's checkpoints kept for good (--save_milestones_sec)
MILESTONES = "milestones"


def checkpoint_dir(experiment_dir: str, policy_id: int) -> str:
    return os.path.join(experiment_dir, f"checkpoint_p{policy_id}")


def list_checkpoints(directory: str) -> list[str]:
    """Oldest first (the train step is zero-padded in the name)."""
    return sorted(glob.glob(os.path.join(directory, "checkpoint_*.pth")))


def best_checkpoint_path(experiment_dir: str, policy_id: int) -> str:
    """The weights that scored best in evaluation (--eval_every_env_steps), with their score: model
    only."""
    return os.path.join(checkpoint_dir(experiment_dir, policy_id), "best_checkpoint.pth")


def _save_atomically(state: dict, path: str) -> None:
    import torch

    torch.save(state, path + ".tmp")
    # a reader sees the old file or the new one, never half a file
    os.replace(path + ".tmp", path)


def save_checkpoint(
    directory: str, state: dict, keep: int, milestones_every_sec: float = -1
) -> str:
    """Write a checkpoint and remove all but the newest `keep`; it is also kept for good (a
    milestone, a hard link in milestones/) if the newest milestone is at least milestones_every_sec
    old (> 0), or there is none."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(
        directory, f"checkpoint_{state['train_step']:010d}_{state['env_steps']}.pth"
    )
    _save_atomically(state, path)
    if milestones_every_sec > 0:
        milestones = list_checkpoints(os.path.join(directory, MILESTONES))
        if not milestones or time.time() - os.path.getmtime(milestones[-1]) >= milestones_every_sec:
            os.makedirs(os.path.join(directory, MILESTONES), exist_ok=True)
            milestone = os.path.join(directory, MILESTONES, os.path.basename(path))
            try:
                os.link(path, milestone)
            # a file system without hard links
            except OSError:
                shutil.copy2(path, milestone)
    for old in list_checkpoints(directory)[:-keep]:
        os.remove(old)
    return path


def save_best_checkpoint(path: str, state: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _save_atomically(state, path)


TRAINING_KEYS = ("model", "optimizer", "train_step", "env_steps")


def load_checkpoint(path: str, keys: tuple = TRAINING_KEYS) -> dict:
    """The checkpoint's contents; `keys` must be there (("model",) to act with it, as enjoy
    does)."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    # torch raises many types for a damaged file; all mean the same to the user
    except Exception as e:
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
            f"delete it to fall back to an older one, or use --restart_behavior restart"
        ) from None
    for key in keys:
        if not isinstance(state, dict) or key not in state:
            raise CheckpointError(
                f"checkpoint {path} has no {key!r}; it was not written by asyncrl"
            )
    return state


def load_weights(path: str, model: torch.nn.Module) -> dict:
    """The checkpoint's weights loaded into `model` (checked to fit it, as enjoy, match and export
    need); returns the checkpoint's contents (its train step and env steps, for the user)."""
    state = load_checkpoint(path, ("model",))
    check_compatible(path, state["model"], model)
    model.load_state_dict(state["model"])
    return state


def check_compatible(path: str, saved_model: dict, model: torch.nn.Module) -> None:
    """Every tensor of the model must be in the checkpoint with the same shape."""
    current = model.state_dict()
    for name, tensor in current.items():
        if name not in saved_model:
            raise CheckpointError(
                f"checkpoint {path} lacks tensor {name!r}; it was saved with another model config"
            )
        if tuple(saved_model[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"checkpoint {path}: tensor {name!r} has shape {tuple(saved_model[name].shape)}, "
                f"the model expects {tuple(tensor.shape)}; it was saved with another model config"
            )
    extra = sorted(set(saved_model) - set(current))
    if extra:
        raise CheckpointError(
            f"checkpoint {path} has tensors the model lacks ({', '.join(extra[:3])}); "
            f"it was saved with another model config"
        )
