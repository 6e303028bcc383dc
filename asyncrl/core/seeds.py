"""Every random stream of a run from its --seed: each env's seed from (seed, worker, env), each
role's torch generator from (seed, role, index), so that each draws a stream of its own."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_torch(seed: int | None, role: str, *index: int, deterministic: bool = False) -> None:
    """Seed this process's torch generator (a model's initial weights, sampled actions, minibatch
    order) from --seed, the role and its index: each role draws a stream of its own. Without --seed,
    torch's random seed stays. deterministic (--deterministic): torch's deterministic kernels too."""
    if deterministic:
        deterministic_torch()
    # a str seeds Random through SHA-512: the same number in every process, whatever its hash seed
    if seed is not None:
        torch.manual_seed(random.Random(repr((seed, role, *index))).getrandbits(63))


def env_seed(base_seed: int, worker: int, env: int) -> int:
    """A distinct, reproducible seed per env from (seed, worker index, env index)."""
    return int(np.random.SeedSequence([base_seed, worker, env]).generate_state(1)[0])


def deterministic_torch() -> None:
    """torch's deterministic kernels wherever one exists (torch warns of an op without one); cuBLAS
    needs a fixed workspace for them, set before CUDA starts."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
