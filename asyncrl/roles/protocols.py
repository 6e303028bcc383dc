"""The protocol the roles follow, chosen once at start from --algo and --deterministic: each role's
half of it.

    --algo appo                 AsyncBatches, NoBudget, NewestWeights, FreeDiscarded, Unscheduled
    --algo ppo|ver              RolloutBatches, RolloutBudget, NewestWeights, CountDiscarded, Unscheduled
    --deterministic True (any)  ScheduledBatches, NoBudget, ScheduledWeights, FreeDiscarded, LockStepRounds

rollouts.py describes the first two, scheduled.py the third.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from torch import nn

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers
from asyncrl.core.queues import GuardedCalls, Queues
from asyncrl.roles.rollouts import (
    AsyncBatches,
    BatchSource,
    CountDiscarded,
    FreeDiscarded,
    NoBudget,
    RolloutBatches,
    RolloutBudget,
)
from asyncrl.roles.scheduled import (
    LockStepRounds,
    NewestWeights,
    ScheduledBatches,
    ScheduledWeights,
    Unscheduled,
)


def batch_source(
    cfg: Config,
    policy_id: int,
    buffers: SharedBuffers,
    queues: Queues,
    timing,
    queue_calls: GuardedCalls,
) -> BatchSource:
    """The learner's: which slots each update learns."""
    if cfg.deterministic:
        source = ScheduledBatches
    elif cfg.synchronous:
        source = RolloutBatches
    else:
        source = AsyncBatches
    return source(cfg, policy_id, buffers, queues, timing, queue_calls)


def rollout_budget(
    cfg: Config, policy_id: int, buffers: SharedBuffers, group_agents: dict, queues: Queues
) -> NoBudget | RolloutBudget:
    """The policy worker's: which requests it serves now."""
    if cfg.deterministic or not cfg.synchronous:
        return NoBudget()
    return RolloutBudget(cfg, policy_id, buffers, group_agents, queues.full_slots[policy_id])


def acting_weights(
    cfg: Config, policy_id: int, buffers: SharedBuffers, new_model: Callable[[], nn.Module]
) -> NewestWeights | ScheduledWeights:
    """The policy worker's: which weights act for a request, and which requests share a forward
    pass."""
    if cfg.deterministic:
        return ScheduledWeights(cfg, policy_id, buffers, new_model)
    return NewestWeights(policy_id, buffers, new_model())


def slot_discard(
    cfg: Config, traj_valid: np.ndarray, queues: Queues
) -> FreeDiscarded | CountDiscarded:
    """The rollout worker's: where the slots of an env that raised go."""
    if cfg.synchronous and not cfg.deterministic:
        return CountDiscarded(traj_valid, queues)
    return FreeDiscarded(queues)


def rounds(
    cfg: Config, worker_idx: int, shared: SharedBuffers, queues: Queues
) -> Unscheduled | LockStepRounds:
    """The rollout worker's: whether its groups step in rounds."""
    if cfg.deterministic:
        return LockStepRounds(cfg, worker_idx, shared, queues)
    return Unscheduled()
