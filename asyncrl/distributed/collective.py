"""Several ranks that train one policy together (DD-PPO, Wijmans et al. 2020), over
torch.distributed.

`torchrun --nproc_per_node K -m asyncrl train ...` (or `--nnodes N --rdzv_endpoint HOST:PORT` on
several machines) starts K copies of the run, each with its own rollout workers, policy workers and
learner. torchrun tells each its place through the environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), which the learner processes inherit: they join one process group (gloo on
the CPU, NCCL on GPUs) and, at every optimizer step, average their gradients with one all-reduce, so
every rank holds the same weights. Rank 0 alone writes the config, stats, TensorBoard and
checkpoints; every rank starts from rank 0's weights and optimizer state (a broadcast).
"""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from asyncrl.algo.optimizer import learner_state_floats, pack_state, unpack_state
from asyncrl.core.log import log
from asyncrl.core.weights import flat_state, unflatten
from asyncrl.distributed.rank import Rank


class RankLost(RuntimeError):
    """A collective failed or timed out: another rank is gone. The run stops; it resumes from rank
    0's checkpoint."""


class SingleProcess:
    """The collective of a run of one rank: every reduction returns its input and there is no one to
    agree with (the runner stops a lone learner itself). The learner calls the same interface either
    way."""

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        pass

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def any(self, flag: bool) -> bool:
        return flag

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def broadcast_floats(self, values: list[float]) -> list[float]:
        return values

    def mean_of_present(self, value: float | None) -> float | None:
        return value

    def start_from_rank_0(self, model, optimizer, counters: list[int]) -> list[int]:
        return counters

    def mean_over_ranks(self, stats: dict) -> dict:
        return stats

    def agree_to_stop(self, wants: bool) -> bool:
        return False

    def report_stop(self, title: str, train_step: int, env_steps: int, model) -> None:
        pass

    def close(self) -> None:
        pass


# a learner's loss stats (learner._loss): ProcessGroup.mean_over_ranks averages them over the ranks
LOSS_STATS = (
    "loss",
    "policy_loss",
    "value_loss",
    "entropy",
    "kl_divergence",
    "clip_fraction",
    "value",
)


class ProcessGroup(SingleProcess):
    """The learner's side of torch.distributed's process group: gradient averaging, sums over ranks, agreement and
    state broadcast. Every call is a collective that all ranks make in the same order; one that fails or waits past
    --dist_timeout raises RankLost."""

    def __init__(self, rank: Rank, device: torch.device, timeout_s: float):
        self.rank = rank
        self.device = device
        backend = "nccl" if device.type == "cuda" else "gloo"
        try:
            dist.init_process_group(
                backend,
                rank=rank.rank,
                world_size=rank.world_size,
                timeout=timedelta(seconds=timeout_s),
            )
        except Exception as e:
            raise RankLost(
                f"rank {rank.rank}: could not join the other {rank.world_size - 1} rank(s) within "
                f"{timeout_s:g} s ({type(e).__name__}: {e})"
            ) from None

    def _call(self, collective, *args, **kwargs):
        try:
            return collective(*args, **kwargs)
        # gloo and NCCL raise RuntimeError subclasses; a dead peer or a timeout
        except Exception as e:
            raise RankLost(
                f"rank {self.rank.rank}: another rank is gone ({type(e).__name__}: "
                f"{str(e).split('. ')[0] if str(e) else 'no message'})"
            ) from None

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """The gradient all-reduce DDP does, as one flat bucket (a parameter without a gradient
        counts as zero). DDP's module wrapper itself needs forward() as the entry point; the learner
        calls forward_sequence."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._call(dist.all_reduce, flat)
        flat /= self.rank.world_size
        for p, averaged in zip(params, unflatten(flat, grads)):
            p.grad = averaged

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of `tensor` over ranks (in place, and returned)."""
        self._call(dist.all_reduce, tensor)
        return tensor

    def any(self, flag: bool) -> bool:
        """True on every rank if it is True on any."""
        value = torch.tensor([float(flag)], device=self.device)
        self._call(dist.all_reduce, value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0's `tensor` on every rank (in place)."""
        self._call(dist.broadcast, tensor, src=0)
        return tensor

    def broadcast_floats(self, values: list[float]) -> list[float]:
        """Rank 0's `values` on every rank."""
        return self.broadcast(
            torch.tensor(values, dtype=torch.float64, device=self.device)
        ).tolist()

    def mean_of_present(self, value: float | None) -> float | None:
        """The mean of `value` over the ranks that have one (None: this rank has none); None if no
        rank has."""
        total = self.sum(
            torch.tensor([value is not None, value or 0.0], dtype=torch.float64, device=self.device)
        )
        return float(total[1] / total[0]) if total[0] > 0 else None

    def start_from_rank_0(self, model, optimizer, counters: list[int]) -> list[int]:
        """Every rank starts from rank 0's weights, Adam state and counters (rank 0 alone reads
        checkpoints)."""
        state = torch.zeros(learner_state_floats(model), device=self.device)
        if self.rank.writes:
            pack_state(model, optimizer, state)
        unpack_state(model, optimizer, self.broadcast(state))
        return [int(c) for c in self.broadcast(torch.tensor(counters, device=self.device)).tolist()]

    def mean_over_ranks(self, stats: dict) -> dict:
        """What rank 0 reports holds every rank's batch: losses averaged over the ranks (a rank
        whose last minibatch was empty has none), samples summed. One small all-reduce that every
        rank makes."""
        losses = [stats.get(key, 0.0) for key in LOSS_STATS]
        has_losses = float(all(key in stats for key in LOSS_STATS))
        totals = self.sum(
            torch.tensor(
                [
                    has_losses,
                    *(has_losses * v for v in losses),
                    stats["batch_samples"],
                    stats["preempted_steps"],
                ],
                dtype=torch.float64,
                device=self.device,
            )
        )
        ranks, *loss_sums, samples, preempted = totals.tolist()
        stats.update(batch_samples=int(samples), preempted_steps=int(preempted))
        if ranks:
            stats.update({key: total / ranks for key, total in zip(LOSS_STATS, loss_sums)})
        return stats

    def agree_to_stop(self, wants: bool) -> bool:
        """Every rank must stop after the same update, or the others would wait in an all-reduce for
        it: the ranks agree after each update (their env steps are counted over all ranks, so the
        step limit is reached by all at once; a time limit or Ctrl-C reaches one runner, which sets
        stop_requested)."""
        return self.any(wants)

    def report_stop(self, title: str, train_step: int, env_steps: int, model) -> None:
        """A line per rank with a hash of its weights, which is the same on every rank."""
        digest = hashlib.sha256(flat_state(model).numpy().tobytes()).hexdigest()[:16]
        log.info(
            f"(rank {self.rank.rank} of {self.rank.world_size}): train step {train_step}, env steps "
            f"{env_steps:,} (all ranks), weights {digest}"
        )

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def collective(rank: Rank, device: torch.device, timeout_s: float) -> SingleProcess:
    """The learner's collective: a process group under torchrun, else a single process."""
    return ProcessGroup(rank, device, timeout_s) if rank.distributed else SingleProcess()


def tcp_store(timeout_s: float) -> dist.TCPStore:
    """A client of torchrun's TCPStore (the process group's rendezvous store)."""
    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=timeout_s),
    )
