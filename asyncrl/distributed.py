"""Several ranks that train one policy together (DD-PPO, Wijmans et al. 2020), over torch.distributed.

`torchrun --nproc_per_node K -m asyncrl train ...` (or `--nnodes N --rdzv_endpoint HOST:PORT` on several machines)
starts K copies of the run, each with its own rollout workers, policy workers and learner. torchrun tells each its
place through the environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), which the learner processes
inherit: they join one process group (gloo on the CPU, NCCL on GPUs) and, at every optimizer step, average their
gradients with one all-reduce, so every rank holds the same weights. Rank 0 alone writes the config, stats,
TensorBoard and checkpoints; every rank starts from rank 0's weights and optimizer state (a broadcast).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from asyncrl.config import ConfigError
from asyncrl.model import flat_state, learner_state_floats, pack_state, unflatten, unpack_state


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


class SingleProcess:
    """The collective of a run of one rank: every reduction returns its input and there is no one to agree with (the
    runner stops a lone learner itself). The learner calls the same interface either way."""

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
LOSS_STATS = ("loss", "policy_loss", "value_loss", "entropy", "kl_divergence", "clip_fraction", "value")


class ProcessGroup(SingleProcess):
    """The learner's side of torch.distributed's process group: gradient averaging, sums over ranks, agreement and
    state broadcast. Every call is a collective that all ranks make in the same order; one that fails or waits past
    --dist_timeout raises RankLost."""

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
        return self.broadcast(torch.tensor(values, dtype=torch.float64, device=self.device)).tolist()

    def mean_of_present(self, value: float | None) -> float | None:
        """The mean of `value` over the ranks that have one (None: this rank has none); None if no rank has."""
        total = self.sum(torch.tensor([value is not None, value or 0.0], dtype=torch.float64, device=self.device))
        return float(total[1] / total[0]) if total[0] > 0 else None

    def start_from_rank_0(self, model, optimizer, counters: list[int]) -> list[int]:
        """Every rank starts from rank 0's weights, Adam state and counters (rank 0 alone reads checkpoints)."""
        state = torch.zeros(learner_state_floats(model), device=self.device)
        if self.rank.writes:
            pack_state(model, optimizer, state)
        unpack_state(model, optimizer, self.broadcast(state))
        return [int(c) for c in self.broadcast(torch.tensor(counters, device=self.device)).tolist()]

    def mean_over_ranks(self, stats: dict) -> dict:
        """What rank 0 reports holds every rank's batch: losses averaged over the ranks (a rank whose last minibatch
        was empty has none), samples summed. One small all-reduce that every rank makes."""
        losses = [stats.get(key, 0.0) for key in LOSS_STATS]
        has_losses = float(all(key in stats for key in LOSS_STATS))
        totals = self.sum(torch.tensor([has_losses, *(has_losses * v for v in losses), stats["batch_samples"],
                                        stats["preempted_steps"]], dtype=torch.float64, device=self.device))
        ranks, *loss_sums, samples, preempted = totals.tolist()
        stats.update(batch_samples=int(samples), preempted_steps=int(preempted))
        if ranks:
            stats.update({key: total / ranks for key, total in zip(LOSS_STATS, loss_sums)})
        return stats

    def agree_to_stop(self, wants: bool) -> bool:
        """Every rank must stop after the same update, or the others would wait in an all-reduce for it: the ranks
        agree after each update (their env steps are counted over all ranks, so the step limit is reached by all at
        once; a time limit or Ctrl-C reaches one runner, which sets stop_requested)."""
        return self.any(wants)

    def report_stop(self, title: str, train_step: int, env_steps: int, model) -> None:
        """A line per rank with a hash of its weights, which is the same on every rank."""
        digest = hashlib.sha256(flat_state(model).numpy().tobytes()).hexdigest()[:16]
        print(f"{title} (rank {self.rank.rank} of {self.rank.world_size}): train step {train_step}, env steps "
              f"{env_steps:,} (all ranks), weights {digest}", flush=True)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def collective(rank: Rank, device: torch.device, timeout_s: float) -> SingleProcess:
    """The learner's collective: a process group under torchrun, else a single process."""
    return ProcessGroup(rank, device, timeout_s) if rank.distributed else SingleProcess()


def _store(timeout_s: float) -> dist.TCPStore:
    """A client of torchrun's TCPStore (the process group's rendezvous store)."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=timeout_s))


class Preemption:
    """DD-PPO's straggler rule (Wijmans et al. 2020, section 4): once --preemption_threshold of the ranks have collected
    their batch for an update, the others stop collecting as soon as they hold --preemption_min_fraction of theirs,
    and learn from what they have. The ranks count finished collections in torchrun's TCPStore, under one key per
    update."""

    CHECK_INTERVAL_S = 0.002  # a store round trip costs ~0.1 ms on loopback: ask at most this often

    def __init__(self, rank: Rank, threshold: float, min_fraction: float, timeout_s: float):
        self.store = _store(timeout_s)
        self.needed = math.ceil(threshold * rank.world_size - 1e-9)
        self.min_fraction, self.last_check = min_fraction, 0.0

    @staticmethod
    def _key(update: int) -> str:
        return f"asyncrl/collected/{update}"

    def opened(self, update: int) -> None:
        """Collection for `update` begins (this rule needs no clock)."""

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


def best_collection_time(rates: list[float], learn_s: float) -> float:
    """VER's optimal preemption (Wijmans et al. 2022): the collection time t that maximises the steps the ranks
    collect per second of an update, S(t) / (t + learn_s), where rank i collects rates[i] batches per second until it
    holds its batch: S(t) = sum_i min(rates[i] t, 1). Between the times at which ranks fill their batches S is linear,
    S = a t + b, so the ratio is monotonic there (its derivative has the sign of a learn_s - b): the best t is one
    of those times."""
    def steps_per_second(t: float) -> float:
        return sum(min(rate * t, 1.0) for rate in rates) / (t + learn_s)
    return max((1.0 / rate for rate in rates if rate > 0), key=steps_per_second, default=math.inf)


class OptimalPreemption:
    """VER's estimate (--preemption_rule optimal): every rank stops collecting at best_collection_time after the
    update's weights arrived, computed from every rank's collection rate in the last update (shared in the TCPStore)
    and this rank's time from its last stop to the new weights (learning, which the all-reduce makes equal on all
    ranks). A rank that fills its batch sooner stops then; none stops before --preemption_min_fraction of it."""

    def __init__(self, rank: Rank, min_fraction: float, timeout_s: float):
        self.store, self.rank, self.min_fraction = _store(timeout_s), rank, min_fraction
        self.opened_at, self.stopped_at, self.deadline = 0.0, None, math.inf

    @staticmethod
    def _key(update: int, rank: int) -> str:
        return f"asyncrl/rate/{update}/{rank}"

    def opened(self, update: int) -> None:
        """The weights for `update` arrived: set this collection's deadline. Every rank stopped the last update's
        collection before its learner could all-reduce, so their rates are in the store."""
        self.opened_at, self.deadline = time.monotonic(), math.inf
        if self.stopped_at is not None and update >= 1:
            keys = [self._key(update - 1, r) for r in range(self.rank.world_size)]
            rates = [float(value) for value in self.store.multi_get(keys)]
            self.deadline = self.opened_at + best_collection_time(rates, self.opened_at - self.stopped_at)

    def collected(self, update: int) -> None:
        self._stopped(update, 1.0)

    def preempts(self, update: int, collected: float, batch: float) -> bool:
        if collected < self.min_fraction * batch or time.monotonic() < self.deadline:
            return False
        self._stopped(update, collected / batch)
        return True

    def _stopped(self, update: int, fraction: float) -> None:
        """Publish this rank's rate for `update` (fractions of its batch per second)."""
        self.stopped_at = time.monotonic()
        self.store.set(self._key(update, self.rank.rank), str(fraction / max(self.stopped_at - self.opened_at, 1e-6)))
        if update >= 2:
            self.store.delete_key(self._key(update - 2, self.rank.rank))


class EpisodeRelay:
    """Episode statistics over every rank: the ranks after rank 0 send the episodes their envs finished to rank 0,
    which writes the stats, a chunk per summary interval through the TCPStore. Statistics only: if the store stops
    answering (a rank is going down), the relay goes quiet rather than hold up the run."""

    TIMEOUT_S = 5.0

    def __init__(self, rank: Rank):
        self.store, self.rank = None, rank  # connected at the first exchange, once the learners have joined
        self.outbox: list = []
        self.chunks = [0] * rank.world_size  # sent (this rank) or received (rank 0, per rank)
        self.working = True

    def add(self, episodes: list) -> None:
        """Episodes (policy, return, length, env stats) this rank's envs finished (kept until the next send)."""
        if not self.rank.writes and self.working:
            self.outbox += episodes

    def exchange(self) -> list:
        """Ranks after rank 0: send what finished since the last call. Rank 0: the other ranks' episodes sent since."""
        if not self.working:
            return []
        try:
            self.store = self.store or _store(self.TIMEOUT_S)
            return self._receive() if self.rank.writes else self._send()
        except (RuntimeError, ValueError):  # the store's errors (DistStoreError is a RuntimeError)
            self.working, self.outbox = False, []
            return []

    def _send(self) -> list:
        me = self.rank.rank
        if self.outbox:
            self.store.set(f"asyncrl/episodes/{me}/{self.chunks[me]}", json.dumps(self.outbox))
            self.chunks[me] += 1
            self.store.add(f"asyncrl/episodes/{me}/chunks", 1)
            self.outbox = []
        return []

    def _receive(self) -> list:
        episodes = []
        for rank in range(1, self.rank.world_size):
            sent = self.store.add(f"asyncrl/episodes/{rank}/chunks", 0)
            keys = [f"asyncrl/episodes/{rank}/{chunk}" for chunk in range(self.chunks[rank], sent)]
            for key, value in zip(keys, self.store.multi_get(keys) if keys else []):
                episodes += json.loads(value)
                self.store.delete_key(key)
            self.chunks[rank] = sent
        return episodes


class NoPreemption:
    """A single rank, or preemption off: a rank always collects its whole batch."""

    def opened(self, update: int) -> None:
        pass

    def collected(self, update: int) -> None:
        pass

    def preempts(self, update: int, collected: float, batch: float) -> bool:
        return False


def preemption(cfg) -> NoPreemption | Preemption | OptimalPreemption:
    """The straggler rule for this process: under torchrun with preemption on, DD-PPO's or VER's."""
    rank = this_rank()
    if not rank.distributed:
        return NoPreemption()
    if cfg.preemption_rule == "optimal":
        return OptimalPreemption(rank, cfg.preemption_min_fraction, cfg.dist_timeout)
    if cfg.preemption_threshold >= 1:
        return NoPreemption()
    return Preemption(rank, cfg.preemption_threshold, cfg.preemption_min_fraction, cfg.dist_timeout)
