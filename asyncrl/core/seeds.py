"""Every random stream of a run from its --seed: each env's seed from (seed, worker, env), each
role's torch generator from (seed, role, index), so that each draws a stream of its own."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_torch(seed: int | None, role: str, *index: int) -> None:
    """Seed this process's torch generator (a model's initial weights, sampled actions, minibatch
    order) from --seed, the role and its index: each role draws a stream of its own. Without --seed,
    torch's random seed stays."""
    # a str seeds Random through SHA-512: the same number in every process, whatever its hash seed
    if seed is not None:
        torch.manual_seed(random.Random(repr((seed, role, *index))).getrandbits(63))


def env_seed(base_seed: int, worker: int, env: int) -> int:
    """A distinct, reproducible seed per env from (seed, worker index, env index)."""
    return int(np.random.SeedSequence([base_seed, worker, env]).generate_state(1)[0])
