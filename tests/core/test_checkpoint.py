"""Checkpoint files: milestones kept for good."""

import os

import torch


def test_milestones_keep_a_checkpoint_for_good_at_most_once_per_interval(tmp_path):
    """--save_milestones_sec: a checkpoint whose newest milestone is at least that old (or that has none) stays in
    milestones/ whatever --keep_checkpoints removes; the others go."""

    from asyncrl.core.checkpoint import MILESTONES, list_checkpoints, save_checkpoint

    def save(step):
        return save_checkpoint(
            str(tmp_path),
            {"train_step": step, "env_steps": 10 * step},
            keep=1,
            milestones_every_sec=100,
        )

    first = save(1)
    # the first milestone is new: none now
    save(2)
    milestones = tmp_path / MILESTONES
    old = os.path.getmtime(milestones / os.path.basename(first)) - 200
    os.utime(milestones / os.path.basename(first), (old, old))
    third = save(3)
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == [
        os.path.basename(third)
    ]
    assert [os.path.basename(p) for p in list_checkpoints(str(milestones))] == [
        os.path.basename(first),
        os.path.basename(third),
    ]
    assert torch.load(milestones / os.path.basename(first))["train_step"] == 1
