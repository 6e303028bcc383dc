"""Several ranks that train one policy together (DD-PPO, Wijmans et al. 2020), over torch.distributed.

`torchrun --nproc_per_node K -m asyncrl train ...` (or `--nnodes N --rdzv_endpoint HOST:PORT` on several machines)
starts K copies of the run, each with its own rollout workers, policy workers and learner. torchrun tells each its
place through the environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), which the learner processes
inherit: they join one process group (gloo on the CPU, NCCL on GPUs) and, at every optimizer step, average their
gradients with one all-reduce, so every rank holds the same weights. Rank 0 alone writes the config, stats,
TensorBoard and checkpoints; every rank starts from rank 0's weights and optimizer state (a broadcast).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from asyncrl.config import ConfigError


class RankLost(RuntimeError):
    """A collective failed or timed out: another rank is gone. The run stops; it resumes from rank 0's checkpoint."""


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1  # ranks on this machine

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def my_cores(self, cores: list[int]) -> list[int]:
        """This rank's share of the machine's cores (each rank pins its processes as if it had a machine of its own,
        so ranks on one machine split the cores between them; with fewer cores than ranks, they share)."""
        if self.local_world_size <= 1:
            return cores
        if len(cores) < self.local_world_size:
            return [cores[self.local_rank % len(cores)]]
        share = len(cores) // self.local_world_size
        return cores[self.local_rank * share:(self.local_rank + 1) * share]

    @property
    def writes(self) -> bool:
        """Rank 0 alone writes config.json, stats, TensorBoard and checkpoints."""
        return self.rank == 0


def this_rank() -> Rank:
    """This process's place in a torchrun launch (a plain launch: rank 0 of 1); torchrun sets these variables."""
    try:
        rank = Rank(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                    int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    except ValueError:
        raise ConfigError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (torchrun sets them)") from None
    if not 0 <= rank.rank < rank.world_size:
        raise ConfigError(f"RANK {rank.rank} is outside WORLD_SIZE {rank.world_size}")
    return rank


class Collective:
    """The learner's side of the process group: gradient averaging, sums over ranks, agreement and state broadcast.
    Every call is a collective that all ranks make in the same order; one that fails or waits past --dist_timeout
    raises RankLost."""

    def __init__(self, rank: Rank, device: torch.device, timeout_s: float):
        self.rank, self.device = rank, device
        backend = "nccl" if device.type == "cuda" else "gloo"
        try:
            dist.init_process_group(backend, rank=rank.rank, world_size=rank.world_size,
                                    timeout=timedelta(seconds=timeout_s))
        except Exception as e:
            raise RankLost(f"rank {rank.rank}: could not join the other {rank.world_size - 1} rank(s) within "
                           f"{timeout_s:g} s ({type(e).__name__}: {e})") from None

    def _call(self, collective, *args, **kwargs):
        try:
            return collective(*args, **kwargs)
        except Exception as e:  # gloo and NCCL raise RuntimeError subclasses; a dead peer or a timeout
            raise RankLost(f"rank {self.rank.rank}: another rank is gone ({type(e).__name__}: "
                           f"{str(e).split('. ')[0] if str(e) else 'no message'})") from None

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """The gradient all-reduce DDP does, as one flat bucket (a parameter without a gradient counts as zero).
        DDP's module wrapper itself needs forward() as the entry point; the learner calls forward_sequence."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._call(dist.all_reduce, flat)
        flat /= self.rank.world_size
        offset = 0
        for p, g in zip(params, grads):
            p.grad = flat[offset:offset + g.numel()].view_as(g)
            offset += g.numel()

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of `tensor` over ranks (in place, and returned)."""
        self._call(dist.all_reduce, tensor)
        return tensor

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any (ranks agree on when to stop)."""
        value = torch.tensor([float(flag)], device=self.device)
        self._call(dist.all_reduce, value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0's `tensor` on every rank (in place)."""
        self._call(dist.broadcast, tensor, src=0)
        return tensor

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class Preemption:
    """DD-PPO's straggler rule (Wijmans et al. 2020, section 4): once --preemption_threshold of the ranks have collected
    their batch for an update, the others stop collecting as soon as they hold --preemption_min_fraction of theirs,
    and learn from what they have. The ranks count finished collections in torchrun's TCPStore (the process group's
    rendezvous store), under one key per update."""

    CHECK_INTERVAL_S = 0.002  # a store round trip costs ~0.1 ms on loopback: ask at most this often

    def __init__(self, rank: Rank, threshold: float, min_fraction: float, timeout_s: float):
        self.store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                   timeout=timedelta(seconds=timeout_s))
        self.needed = math.ceil(threshold * rank.world_size - 1e-9)
        self.min_fraction, self.last_check = min_fraction, 0.0

    @staticmethod
    def _key(update: int) -> str:
        return f"asyncrl/collected/{update}"

    def collected(self, update: int) -> None:
        """This rank has its whole batch for `update` (the key of the update before last is no longer asked)."""
        self.store.add(self._key(update), 1)
        if update >= 2:
            self.store.delete_key(self._key(update - 2))

    def preempts(self, update: int, collected: float, batch: float) -> bool:
        """Whether this rank, holding `collected` of its `batch`, stops collecting for `update`."""
        now = time.monotonic()
        if collected < self.min_fraction * batch or now - self.last_check < self.CHECK_INTERVAL_S:
            return False
        self.last_check = now
        return self.store.add(self._key(update), 0) >= self.needed


def preemption(cfg) -> Preemption | None:
    """The straggler rule for this process, if it runs under torchrun with --preemption_threshold below 1."""
    rank = this_rank()
    if not rank.distributed or cfg.preemption_threshold >= 1:
        return None
    return Preemption(rank, cfg.preemption_threshold, cfg.preemption_min_fraction, cfg.dist_timeout)
