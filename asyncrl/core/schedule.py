"""--deterministic: a fixed schedule in place of first-come-first-served, so that a run with
processes is a function of its seed.

Rounds. Every env group steps in lock-step rounds of --rollout steps: round n is the group's steps
n*T .. n*T + T - 1, counted by the group itself. At a round's end the group sends every agent's slot
to its learner (part-filled if a truncated episode's final row moved the slot on early) and then a
marker (Signal.ROUND_ENDED, n) to every learner, so that a learner knows when it holds all of a
round.

Updates. Update u of every learner learns rounds u*R .. u*R + R - 1 (R rounds of every group, in a
fixed order: by round, agent, and the agent's slot count), R = rounds_per_update. Its weights are
the u + 1-th entry of a ring in shared memory (buffers.py: version_ring).

Acting. A group's request in round n is served with the weights of update scheduled_update(n): the
update of the round's own batch, less `lag` updates. lag 1 (appo) lets the learner learn one batch
while the groups act the next, as Cleanba's fixed lag does; lag 0 (ppo, ver) is on-policy. A policy
worker's forward pass covers every agent, each in its own row, so that a request's numbers do not
depend on which other requests share the pass; each request's actions are drawn from a torch
generator seeded by (seed, policy, worker, group, the group's step).
"""

from __future__ import annotations

import random

from asyncrl.cfg.config import Config


def lag_updates(cfg: Config) -> int:
    """How many updates the acting weights lag the batch they act for: 1 for appo (a batch is
    sampled while the one before it is learned), 0 for the on-policy ppo and ver."""
    return 0 if cfg.synchronous else 1


def rounds_per_update(cfg: Config, agents: int) -> int:
    """R: the rounds one update learns, --batch_size / (agents x --rollout) rounded to the nearest
    whole round, at least one."""
    return max(1, round(cfg.batch_size / (agents * cfg.rollout)))


def scheduled_update(round_index: int, lag: int, rounds: int) -> int:
    """The update whose weights act in round `round_index`: its batch is update round // R's, whose
    weights are update round // R's (learned from the batches before it), less `lag` updates (0:
    the weights the learner starts with)."""
    return max(0, round_index // rounds - lag)


def ring_size(lag: int) -> int:
    """Entries of the weights ring: when the learner writes update u + 1 it has learned batch u, so
    every group is past it, in rounds whose update is at least u + 1 - lag; lag + 1 entries keep
    every update still in use."""
    return lag + 1


def sampling_seed(seed: int, policy: int, worker: int, group: int, step: int) -> int:
    """The seed of one request's action sampling: a stream per (policy, group, step), whatever
    process serves it and whatever else it serves."""
    return random.Random(repr((seed, policy, worker, group, step))).getrandbits(63)
