"""This process's place in a torchrun launch (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE): no
torch import, so the command line reads it before it imports the engine."""

from __future__ import annotations

import os
from dataclasses import dataclass

from asyncrl.cfg.errors import ConfigError


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    # ranks on this machine
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def my_cores(self, cores: list[int]) -> list[int]:
        """This rank's share of the machine's cores (each rank pins its processes as if it had a
        machine of its own, so ranks on one machine split the cores between them; with fewer cores
        than ranks, they share)."""
        if self.local_world_size <= 1:
            return cores
        if len(cores) < self.local_world_size:
            return [cores[self.local_rank % len(cores)]]
        share = len(cores) // self.local_world_size
        return cores[self.local_rank * share : (self.local_rank + 1) * share]

    @property
    def writes(self) -> bool:
        """Rank 0 alone writes config.json, stats, TensorBoard and checkpoints."""
        return self.rank == 0


def this_rank() -> Rank:
    """This process's place in a torchrun launch (a plain launch: rank 0 of 1); torchrun sets these
    variables."""
    try:
        rank = Rank(
            int(os.environ.get("RANK", 0)),
            int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)),
            int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        )
    except ValueError:
        raise ConfigError(
            "RANK, WORLD_SIZE and LOCAL_RANK must be integers (torchrun sets them)"
        ) from None
    if not 0 <= rank.rank < rank.world_size:
        raise ConfigError(f"RANK {rank.rank} is outside WORLD_SIZE {rank.world_size}")
    return rank
