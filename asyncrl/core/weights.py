"""A model's state as one flat float32 vector: the shared weight tensors, PBT's copies, DD-PPO's
broadcast."""

from __future__ import annotations

import torch
from torch import nn


# --- a model's state as one flat float32 vector (the shared weight tensors, PBT's copies, DD-PPO's broadcast)
def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Everything the policy workers need to act like the learner: parameters, then buffers
    (normalizer)."""
    return list(model.parameters()) + list(model.buffers())


def flat_state(model: nn.Module) -> torch.Tensor:
    """state_tensors as one float32 CPU vector (what the shared weight tensors hold)."""
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in state_tensors(model)])


def num_state_floats(model: nn.Module) -> int:
    return sum(t.numel() for t in state_tensors(model))


def unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Views of the consecutive pieces of `flat`, each shaped like its tensor in `like` (the inverse
    of concatenating their flattened values)."""
    return [piece.view_as(t) for piece, t in zip(flat.split([t.numel() for t in like]), like)]


@torch.no_grad()
def unflatten_into(tensors: list[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy `flat`'s consecutive pieces into `tensors` (converted to their device and dtype)."""
    for t, piece in zip(tensors, unflatten(flat, tensors)):
        t.copy_(piece)
