"""The shared-memory layout of a run, in one place.

The runner allocates every tensor once, before any process starts; children receive them at spawn
(torch passes the file descriptor, and the segment is unlinked from /dev/shm right after it is
created, so nothing outlives the run even on SIGKILL). Queues then carry only indices into these
tensors.

Trajectory slots (S = num_slots, T = rollout). A slot holds one agent's T consecutive steps for one
policy. The rollout worker owns a slot while it fills it, the learner while it reads it; the free and
full index queues hand slots back and forth.
    traj_obs            [S, T+1, *obs]  observation before step t; row T is the bootstrap observation. An env's
                                        action mask is its last entries (action_masks.ObservationWithActionMask)
    traj_rnn_states     [S, T, H]       recurrent state the acting policy had before step t
    traj_actions        [S, T, *act]    action taken at step t
    traj_action_logp    [S, T]          log mu(a_t | x_t) of the acting policy
    traj_action_params  [S, T, D]       the acting distribution mu(. | x_t) whole (model.distribution_params: logits,
                                        or a Gaussian's mean and log-std), for the learner's KL penalty and stat
    traj_rewards        [S, T]          the env's own reward; the learner scales and clips
    traj_discounted_returns [S, T]      --scale_rewards: the agent's running discounted return up to step t, whose
                                        running std (one per policy, kept by the learner) divides the rewards
    traj_dones          [S, T]          the state does not go on after step t: the episode terminated with it, or
                                        it holds no sample (traj_valid False)
    traj_valid          [S, T]          step t holds a real sample. False for padding after a policy switch, and
                                        for the row after a truncated episode's last step, which holds that
                                        episode's final observation (and recurrent state) for the learner to
                                        bootstrap from (--value_bootstrap; see vtrace.py)
    traj_policy_version [S, T]          version of the weights that chose a_t (policy lag = learner's - this); -1 in a
                                        row no policy acted in during the slot's current use (padding, final rows)

Agents (A = num_workers * num_envs_per_worker * agents_per_env): what a policy worker must know to
serve an agent's request, written by its rollout worker before the request is sent.
    agent_slot      [A]     slot the agent is filling
    agent_step      [A]     step t within that slot
    agent_player    [A]     who acts for the agent at its next step: its player this episode, a policy p < P or a
                            frozen past version of one, P + p * K + k (see frozen_player); NO_PLAYER while the agent's
                            episode has ended and the other agents of its env play on, or while it waits for its turn
                            in a turn-based game (turns.py): nobody computes its actions
    agent_rnn_state [A, H]  recurrent state before the next step (zeroed at episode starts)

Liveness: worker_heartbeat [num_workers], time.monotonic() when each rollout worker last showed it
was not stuck in an env (0: not started). The runner kills a worker whose heartbeat is
--env_step_timeout old.

Weights, per policy P, published by the learner and read by the policy workers (a seqlock: the
counter is odd while the learner writes; a reader that saw it change retries later).
    policy_weights     [P, N]  parameters and buffers, flattened (model.state_tensors order)
    policy_weights_seq [P]
    policy_version     [P]     learner's train step of the published weights

Frozen past versions for self-play, K = --selfplay_pool_size per policy (K = 0 without snapshots), written by the
policy's learner every --selfplay_snapshot_every_env_steps, read by its policy workers (a seqlock per entry, as above):
    frozen_weights  [P, K, N]
    frozen_seq      [P, K]
    frozen_version  [P, K]  the learner's train step at the snapshot; -1: empty
    rating_mu       [P + P*K]  skill rating (openskill mu) of every policy and frozen version, by player, written by
                            the runner (ratings.py), read by rollout workers for --matchmaking rating

Synchronous algorithms (--algo ppo/ver), per policy (the protocol is written out in rollouts.py): the policy worker
hands out actions under one version until the rollout's budget is spent, then closes the rollout; the learner learns
once it holds every sample of it.
    rollout_issued  [P]     actions handed out under the current version once its rollout is closed (written by the
                            policy worker), -1 while it is open (set by the learner before it publishes a version)
    rollout_preempted [P]   under torchrun: actions of the closed rollout's budget not handed out because DD-PPO's
                            straggler rule stopped it early (0: it was not)
    rollout_carried [A, 3]  per agent whose group was mid-step when the rollout closed (VER's carry-over): the slot,
                            row and version of its action in flight; -1 for the others (written by the policy worker
                            before rollout_issued)

--deterministic (the schedule in schedule.py; zero-sized without the flag, W*G = env groups, R_w = its ring's entries):
    group_step      [W*G]   steps the group took before its pending request (written before the request)
    slot_key        [S, 3]  (round, agent, the agent's slots so far) of a slot sent to a learner: the order of a batch
    version_ring    [P, R_w, N]  the weights of update u in entry u % R_w, which acts in the rounds scheduled for it
    version_ring_update  [P, R_w]  u of the entry's weights (-1: none yet), written after them
    version_ring_version [P, R_w]  the learner's train step of those weights (traj_policy_version's value)

Several ranks (torchrun, distributed.py):
    stop_requested  [1]     the runner asks its learner to stop together with the other ranks' learners (they agree at
                            an update, so none is left waiting in an all-reduce)

Per-policy hyperparameters and PBT (pbt.py):
    policy_hparams  [P, K]  each policy's own hyperparameters (config.PER_POLICY_HPARAMS order): set by the runner from
                            the config, mutated by PBT, read by the learner at every batch
    learner_state   [P, M]  with --with_pbt only (else M = 0): a learner's weights and Adam state, written when PBT
                            asks it to, for a bottom policy's learner to copy (model.pack_state)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Generic, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from asyncrl.cfg.config import Config
from asyncrl.cfg.groups.population import PER_POLICY_HPARAMS
from asyncrl.core.schedule import lag_updates, ring_size, rounds_per_update
from asyncrl.core.weights import flat_state, state_tensors, unflatten_into

# agent_player of an agent that is out of its env's episode (it waits for the others)
NO_PLAYER = -1


def frozen_player(cfg: Config, policy: int, slot: int) -> int:
    """The player of frozen version `slot` of `policy` (agent_player values at or above P are frozen
    versions)."""
    return cfg.num_policies + policy * cfg.frozen_pool_size + slot


def torch_dtype(np_dtype) -> torch.dtype:
    return torch.uint8 if np.dtype(np_dtype) == np.uint8 else torch.float32


def slots_per_batch(cfg: Config) -> int:
    return cfg.batch_size // cfg.rollout


def num_agents(cfg: Config) -> int:
    assert cfg.agents_per_env > 0, "the runner's decide_auto sets agents_per_env from the env"
    return cfg.num_workers * cfg.num_envs_per_worker * cfg.agents_per_env


def num_slots(cfg: Config) -> int:
    """Each agent fills one slot; every policy's learner may hold one batch and have one more
    waiting; and one rollout worker's step may send a slot for each of its agents before a learner
    runs (in serial mode, where nobody can wait for a free slot)."""
    agents_per_worker = cfg.num_envs_per_worker * cfg.agents_per_env
    slots = num_agents(cfg) + agents_per_worker + 2 * cfg.num_policies * slots_per_batch(cfg)
    # --deterministic: the groups act up to lag + 1 batches of R rounds ahead of the one being
    # learned (schedule.py), and a truncated episode's final row may take a round a second slot
    if cfg.deterministic:
        rounds = (lag_updates(cfg) + 2) * rounds_per_update(cfg, num_agents(cfg))
        return max(slots, (rounds + 2) * num_agents(cfg) + agents_per_worker)
    # ppo/ver: at a rollout's end every agent sends its part-filled slot and starts a new one while
    # the learner holds the rollout's slots (up to one part-filled slot per agent on top of the full
    # ones)
    return slots + num_agents(cfg) if cfg.synchronous else slots


def num_groups(cfg: Config) -> int:
    return cfg.num_workers * cfg.worker_num_splits


def version_ring_entries(cfg: Config) -> int:
    """--deterministic: the entries of the weights ring (schedule.ring_size); 0 without it."""
    if not cfg.deterministic:
        return 0
    return ring_size(lag_updates(cfg))


def group_agents(cfg: Config, worker: int, group: int) -> np.ndarray:
    """Global agent indices of one env group of one rollout worker: contiguous, env by env, each
    env's agents in their order."""
    agents_per_group = cfg.envs_per_group * cfg.agents_per_env
    start = worker * cfg.num_envs_per_worker * cfg.agents_per_env + group * agents_per_group
    return np.arange(start, start + agents_per_group)


def buffer_layout(
    cfg: Config,
    obs_space: gym.spaces.Box,
    action_space: gym.Space,
    rnn_state_size: int,
    distribution_params_size: int,
    num_weights: int,
    learner_state_floats: int,
) -> dict[str, tuple[tuple, torch.dtype]]:
    """name -> (shape, dtype) of every shared tensor, as the module docstring describes them."""
    S = num_slots(cfg)
    T = cfg.rollout
    A = num_agents(cfg)
    P = cfg.num_policies
    G = num_groups(cfg) if cfg.deterministic else 0
    R_w = version_ring_entries(cfg)
    H = rnn_state_size
    D = distribution_params_size
    # an index per action (Discrete), per dimension (MultiDiscrete, MultiBinary), or a Box's floats
    act_dtype = torch.float32 if isinstance(action_space, gym.spaces.Box) else torch.int64
    act_shape = () if isinstance(action_space, gym.spaces.Discrete) else tuple(action_space.shape)
    return {
        "traj_obs": ((S, T + 1, *obs_space.shape), torch_dtype(obs_space.dtype)),
        "traj_rnn_states": ((S, T, H), torch.float32),
        "traj_actions": ((S, T, *act_shape), act_dtype),
        "traj_action_logp": ((S, T), torch.float32),
        "traj_action_params": ((S, T, D), torch.float32),
        "traj_rewards": ((S, T), torch.float32),
        "traj_discounted_returns": ((S, T), torch.float32),
        "traj_dones": ((S, T), torch.bool),
        "traj_valid": ((S, T), torch.bool),
        "traj_policy_version": ((S, T), torch.int64),
        "agent_slot": ((A,), torch.int64),
        "agent_step": ((A,), torch.int64),
        "agent_player": ((A,), torch.int64),
        "agent_rnn_state": ((A, H), torch.float32),
        "worker_heartbeat": ((cfg.num_workers,), torch.float64),
        "policy_weights": ((P, num_weights), torch.float32),
        "policy_weights_seq": ((P,), torch.int64),
        "policy_version": ((P,), torch.int64),
        "frozen_weights": ((P, cfg.frozen_pool_size, num_weights), torch.float32),
        "frozen_seq": ((P, cfg.frozen_pool_size), torch.int64),
        "frozen_version": ((P, cfg.frozen_pool_size), torch.int64),
        "rating_mu": ((P + P * cfg.frozen_pool_size,), torch.float64),
        "policy_hparams": ((P, len(PER_POLICY_HPARAMS)), torch.float64),
        "learner_state": ((P, learner_state_floats if cfg.with_pbt else 0), torch.float32),
        "rollout_issued": ((P,), torch.int64),
        "rollout_preempted": ((P,), torch.int64),
        "rollout_carried": ((A, 3), torch.int64),
        "stop_requested": ((1,), torch.bool),
        "group_step": ((G,), torch.int64),
        "slot_key": ((S if cfg.deterministic else 0, 3), torch.int64),
        "version_ring": ((P, R_w, num_weights), torch.float32),
        "version_ring_update": ((P, R_w), torch.int64),
        "version_ring_version": ((P, R_w), torch.int64),
    }


def layout_nbytes(layout: dict) -> int:
    return sum(
        int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
        for shape, dtype in layout.values()
    )


Array = TypeVar("Array", torch.Tensor, np.ndarray)


@dataclass(eq=False)
class SharedBuffers(Generic[Array]):
    """The run's shared tensors, one field per entry of buffer_layout (the module docstring says
    what each holds). numpy() gives the same memory as numpy arrays, which the rollout workers index
    (far cheaper than torch's indexing); the weight methods below work on the torch tensors."""

    traj_obs: Array
    traj_rnn_states: Array
    traj_actions: Array
    traj_action_logp: Array
    traj_action_params: Array
    traj_rewards: Array
    traj_discounted_returns: Array
    traj_dones: Array
    traj_valid: Array
    traj_policy_version: Array
    agent_slot: Array
    agent_step: Array
    agent_player: Array
    agent_rnn_state: Array
    worker_heartbeat: Array
    policy_weights: Array
    policy_weights_seq: Array
    policy_version: Array
    frozen_weights: Array
    frozen_seq: Array
    frozen_version: Array
    rating_mu: Array
    policy_hparams: Array
    learner_state: Array
    rollout_issued: Array
    rollout_preempted: Array
    rollout_carried: Array
    stop_requested: Array
    group_step: Array
    slot_key: Array
    version_ring: Array
    version_ring_update: Array
    version_ring_version: Array

    @classmethod
    def allocate(cls, layout: dict[str, tuple[tuple, torch.dtype]]) -> SharedBuffers[torch.Tensor]:
        """Zeroed shared-memory tensors of the layout's shapes; -1 where -1 means none (no version,
        no rollout)."""
        buffers = cls(
            **{
                name: torch.zeros(shape, dtype=dtype).share_memory_()
                for name, (shape, dtype) in layout.items()
            }
        )
        for none_yet in (
            buffers.frozen_version,
            buffers.traj_policy_version,
            buffers.rollout_issued,
            buffers.rollout_carried,
            buffers.version_ring_update,
        ):
            none_yet.fill_(-1)
        return buffers

    def numpy(self) -> SharedBuffers[np.ndarray]:
        return SharedBuffers(**{f.name: getattr(self, f.name).numpy() for f in fields(self)})

    # --- weights: learner -> policy workers
    def publish_weights(self, policy_id: int, model: nn.Module, version: int) -> None:
        _write_weights(
            self.policy_weights,
            self.policy_weights_seq,
            self.policy_version,
            policy_id,
            model,
            version,
        )

    def read_weights(self, policy_id: int, model: nn.Module, known_version: int) -> int:
        """Load the newest published weights into `model` if newer than `known_version`; returns the
        version the model now has."""
        return _read_weights(
            self.policy_weights,
            self.policy_weights_seq,
            self.policy_version,
            policy_id,
            model,
            known_version,
        )

    # --- frozen past versions: learner -> policy workers
    def snapshot_weights(self, policy_id: int, slot: int, model: nn.Module, version: int) -> None:
        _write_weights(
            self.frozen_weights,
            self.frozen_seq,
            self.frozen_version,
            (policy_id, slot),
            model,
            version,
        )

    def restore_snapshot(self, policy_id: int, slot: int, flat: torch.Tensor, version: int) -> None:
        """A frozen version from a checkpoint (flat, as frozen_weights holds it) back into its pool
        entry."""
        _write_flat(
            self.frozen_weights,
            self.frozen_seq,
            self.frozen_version,
            (policy_id, slot),
            flat,
            version,
        )

    def read_frozen_weights(
        self, policy_id: int, slot: int, model: nn.Module, known_version: int
    ) -> int:
        return _read_weights(
            self.frozen_weights,
            self.frozen_seq,
            self.frozen_version,
            (policy_id, slot),
            model,
            known_version,
        )

    # --- --deterministic's ring of scheduled updates: learner -> policy workers
    def publish_update(self, policy_id: int, update: int) -> None:
        """--deterministic: the newest published weights (the learner's own, which only it writes)
        become update `update` in the ring; its tag is written last, once they are whole."""
        entry = update % self.version_ring.shape[1]
        self.version_ring[policy_id, entry].copy_(self.policy_weights[policy_id])
        self.version_ring_version[policy_id, entry] = self.policy_version[policy_id]
        self.version_ring_update[policy_id, entry] = update

    def read_update(self, policy_id: int, update: int, model: nn.Module) -> int | None:
        """--deterministic: load update `update`'s weights into `model` and return their version,
        or None while the learner has not written them. The schedule keeps an entry in place while
        any round it acts in is unfinished (schedule.ring_size); a changed tag after the copy is a
        broken schedule, not a race to retry."""
        entry = update % self.version_ring.shape[1]
        if int(self.version_ring_update[policy_id, entry]) != update:
            return None
        version = int(self.version_ring_version[policy_id, entry])
        unflatten_into(state_tensors(model), self.version_ring[policy_id, entry].clone())
        if int(self.version_ring_update[policy_id, entry]) != update:
            raise RuntimeError(
                f"policy {policy_id}: update {update}'s weights were overwritten while still scheduled"
            )
        return version

    # --- per-policy hyperparameters: learner and PBT
    def hparams(self, policy_id: int) -> dict[str, float]:
        return dict(zip(PER_POLICY_HPARAMS, self.policy_hparams[policy_id].tolist()))

    def set_hparams(self, policy_id: int, values: dict[str, float]) -> None:
        self.policy_hparams[policy_id] = torch.tensor(
            [values[name] for name in PER_POLICY_HPARAMS], dtype=torch.float64
        )


def _write_weights(
    weights: torch.Tensor,
    seq: torch.Tensor,
    versions: torch.Tensor,
    index,
    model: nn.Module,
    version: int,
) -> None:
    _write_flat(weights, seq, versions, index, flat_state(model), version)


def _write_flat(
    weights: torch.Tensor,
    seq: torch.Tensor,
    versions: torch.Tensor,
    index,
    flat: torch.Tensor,
    version: int,
) -> None:
    # odd: write in progress
    seq[index] += 1
    weights[index].copy_(flat)
    versions[index] = version
    seq[index] += 1


def _read_weights(
    weights: torch.Tensor,
    seq: torch.Tensor,
    versions: torch.Tensor,
    index,
    model: nn.Module,
    known_version: int,
) -> int:
    seen = int(seq[index])
    version = int(versions[index])
    if seen % 2 == 1 or seen == 0 or version == known_version:
        return known_version
    flat = weights[index].clone()
    # the writer wrote meanwhile: torn copy
    if int(seq[index]) != seen:
        return known_version
    unflatten_into(state_tensors(model), flat)
    return version
