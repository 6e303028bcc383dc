"""Learner: one per policy. Takes its batches from a batch source (rollouts.py), takes APPO steps,
and publishes the new weights to shared memory, where the policy workers pick them up before their
next batch."""

from __future__ import annotations

import math
import time

import torch

from asyncrl.algo import losses
from asyncrl.algo.fused_loss import STATS
from asyncrl.algo.lr_schedules import lr_schedule
from asyncrl.algo.minibatches import minibatches
from asyncrl.algo.optimizer import Adam, clip_gradient_norm, pack_state, unpack_state
from asyncrl.algo.packing import time_major
from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers
from asyncrl.core.checkpoint import (
    check_compatible,
    checkpoint_dir,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from asyncrl.core.messages import (
    ExportState,
    ImportState,
    LearnerStats,
    LearnerStopped,
    Snapshot,
    StateExported,
    StateImported,
)
from asyncrl.core.processes import StopFlag, stop_run
from asyncrl.core.queues import GuardedCalls, GuardedQueue, Queues
from asyncrl.core.seeds import seed_torch
from asyncrl.core.timing import Timing
from asyncrl.distributed.collective import RankLost, collective
from asyncrl.distributed.rank import this_rank
from asyncrl.model.actor_critic import build_model
from asyncrl.model.precision import low_precision
from asyncrl.roles.protocols import batch_source
from asyncrl.roles.rollouts import Batch

MAX_NAN_UPDATES_IN_A_ROW = 10


class Learner:
    def __init__(
        self,
        policy_id: int,
        cfg: Config,
        buffers: SharedBuffers,
        queues: Queues,
        obs_space,
        action_space,
        device: torch.device,
        frameskip: int,
        stop_flag: StopFlag,
    ):
        self.policy_id = policy_id
        self.cfg = cfg
        self.buffers = buffers
        self.device = device
        self.frameskip = frameskip
        # every queue through queue_calls: given up on if the stop finds it locked by a dead worker,
        # so we still save
        self.queue_calls = GuardedCalls(stop_flag.is_set)
        self.reports = GuardedQueue(queues.reports, self.queue_calls)
        # from PBT (pbt.py)
        self.commands = GuardedQueue(queues.learner_commands[policy_id], self.queue_calls)
        # the initial weights (rank 0's under torchrun), minibatch order
        seed_torch(cfg.seed, "learner", policy_id, deterministic=cfg.deterministic)
        self.model = build_model(obs_space, action_space, cfg).to(device).train()
        # listed once: every step's gradient ops take them
        self.parameters = list(self.model.parameters())
        # of the encoder; master weights stay float32
        self.autocast_dtype = low_precision(cfg, device, self.model)
        # trajectories, or samples
        self.minibatches = minibatches(cfg, self.model, self.autocast_dtype)
        self.optimizer = Adam(
            self.parameters,
            lr=cfg.learning_rate,
            eps=cfg.adam_eps,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
        )
        self.checkpoint_dir = checkpoint_dir(cfg.experiment_dir, policy_id)
        # also the policy version: one per batch
        self.train_step = 0
        # frames (frameskip included) of the samples this learner received
        self.env_steps = 0
        self.nan_updates = 0
        self.nan_updates_in_a_row = 0
        # frozen past versions this learner has written to its pool (self-play)
        self.snapshots = 0
        # in this launch: updates the straggler rule ended early (under torchrun)
        self.preempted_updates = 0
        self.last_checkpoint = time.monotonic()
        self.timing = Timing(f"learner_{policy_id}")
        # this policy's own hyperparameters, re-read from shared memory
        self.hp = cfg.policy_hparams(policy_id)
        # under torchrun: this learner's place among the ranks that train together
        self.rank = this_rank()
        # the other ranks' learners, if any (first: under torchrun, rank 0's process group hosts the
        # store that the batch source's straggler rule connects to)
        self.collective = collective(self.rank, device, cfg.dist_timeout)
        # the minibatch step's forward and backward passes as fused kernels, compiled at the first
        # step and again where a hyperparameter the step reads changes
        if cfg.compile_learner:
            self._loss = torch.compile(self._loss)
        # how the rate moves over the run
        self.lr_schedule = lr_schedule(cfg, self.optimizer, self.collective)
        # which samples
        self.source = batch_source(cfg, policy_id, buffers, queues, self.timing, self.queue_calls)
        # under torchrun: the ranks agreed to stop; no more batches
        self.stopped = False
        if self.rank.writes:
            self._load_latest_checkpoint()
        self.train_step, self.env_steps, self.nan_updates = self.collective.start_from_rank_0(
            self.model, self.optimizer, [self.train_step, self.env_steps, self.nan_updates]
        )
        self.lr_schedule.load_state(self.collective.broadcast_floats(self.lr_schedule.state()))
        self.next_snapshot = self.env_steps + cfg.selfplay_snapshot_every_env_steps
        buffers.set_hparams(policy_id, self.hp)
        self.source.publish_initial(self._write_weights)
        self.reports.put(
            LearnerStats(
                policy_id,
                {"train_step": self.train_step, "env_steps": self.env_steps, **self._hp_stats()},
            )
        )

    # --- lifecycle
    def poll(self, timeout: float) -> bool:
        """Learn from one batch if one is complete; returns whether it did."""
        try:
            return self._poll(timeout)
        except RankLost as e:
            stop_run(
                self.reports,
                f"{e}; the run stops (run the same command again to resume from rank 0's last checkpoint)",
            )

    def _poll(self, timeout: float) -> bool:
        if self.stopped:
            time.sleep(timeout)
            return False
        if self.timing.due():
            self.reports.put(self.timing.report())
        self._run_commands()
        batch = self.source.next_batch(timeout, self.train_step)
        if batch is None:
            return False
        # past --train_for_env_steps: no more updates, whatever the timing of the run's stop (which
        # waits for every policy to get there); the slots go back
        if self.env_steps >= self.cfg.train_for_env_steps:
            self.source.pass_over(batch)
            return True
        self._learn(batch)
        return True

    def _learn(self, batch: Batch) -> None:
        if self.cfg.sampler_only:
            self._count_and_recycle(batch)
            return
        with self.timing.phase("gather"):
            tensors = self.gather(batch)
            self.source.free(batch)
        with self.timing.phase("train"):
            stats = self.train(tensors, batch.preempted_steps)
        with self.timing.phase("publish"):
            self._publish()
        self.reports.put(LearnerStats(self.policy_id, stats))
        if self.cfg.frozen_pool_size and self.env_steps >= self.next_snapshot:
            self._snapshot()
        wants_to_stop = (
            bool(self.buffers.stop_requested[0]) or self.env_steps >= self.cfg.train_for_env_steps
        )
        # the runner stops this process next, and stop() saves
        if self.collective.agree_to_stop(wants_to_stop):
            self.stopped = True
            self.reports.put(LearnerStopped(self.policy_id))
        if time.monotonic() - self.last_checkpoint >= self.cfg.save_every_sec:
            self.save()

    def _publish(self) -> None:
        """New weights for the policy workers (ppo/ver: they open the next rollout; see
        rollouts.py)."""
        self.source.publish(self.train_step, self._write_weights)

    def _write_weights(self) -> None:
        self.buffers.publish_weights(self.policy_id, self.model, self.train_step)

    def _count_and_recycle(self, batch: Batch) -> None:
        """--sampler_only: count the samples and hand the slots straight back (measures sampling alone)."""
        self.env_steps += (
            int(batch.learned(self.buffers.traj_valid[batch.slots]).sum()) * self.frameskip
        )
        self.source.free(batch)
        # no learning, but the next rollout needs a new version
        if self.source.ROLLOUTS_WAIT_FOR_A_VERSION:
            self.train_step += 1
            self._publish()
        self.reports.put(
            LearnerStats(
                self.policy_id, {"train_step": self.train_step, "env_steps": self.env_steps}
            )
        )

    def _snapshot(self) -> None:
        """A frozen copy of the current weights joins this policy's pool, replacing the oldest once
        it is full."""
        slot = self.snapshots % self.cfg.frozen_pool_size
        self.buffers.snapshot_weights(self.policy_id, slot, self.model, self.train_step)
        self.snapshots += 1
        self.next_snapshot = self.env_steps + self.cfg.selfplay_snapshot_every_env_steps
        self.reports.put(Snapshot(self.policy_id, slot, self.train_step, self.env_steps))

    def _run_commands(self) -> None:
        """PBT's requests: ExportState writes this learner's weights and Adam state to its
        learner_state row; ImportState loads the source's row, and moves the version past
        --max_policy_lag so that samples the replaced weights collected are masked from the loss."""
        for command in self.commands.take_all():
            if isinstance(command, ExportState):
                pack_state(self.model, self.optimizer, self.buffers.learner_state[self.policy_id])
                self.reports.put(StateExported(self.policy_id))
            elif isinstance(command, ImportState):
                unpack_state(self.model, self.optimizer, self.buffers.learner_state[command.source])
                self.train_step += self.cfg.max_policy_lag + 1
                self._write_weights()
                self.reports.put(StateImported(self.policy_id, command.source))

    def stop(self) -> None:
        if not self.cfg.sampler_only:
            self.save()
        self.collective.report_stop(
            f"asyncrl-learner-{self.policy_id}", self.train_step, self.env_steps, self.model
        )

    def close(self) -> None:
        self.collective.close()
        self.queue_calls.close()

    # --- checkpoints
    def save(self) -> str | None:
        """A checkpoint (rank 0 alone writes them)."""
        self.last_checkpoint = time.monotonic()
        if not self.rank.writes:
            return None
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "train_step": self.train_step,
            "env_steps": self.env_steps,
            "policy_id": self.policy_id,
            "nan_updates": self.nan_updates,
            "hparams": self.buffers.hparams(self.policy_id),
            "lr_schedule": self.lr_schedule.state(),
        }
        # self-play: the pool of frozen past versions goes on after a resume
        if self.cfg.frozen_pool_size:
            state["frozen_pool"] = {
                "weights": self.buffers.frozen_weights[self.policy_id].clone(),
                "versions": self.buffers.frozen_version[self.policy_id].clone(),
                "snapshots": self.snapshots,
            }
        return save_checkpoint(
            self.checkpoint_dir, state, self.cfg.keep_checkpoints, self.cfg.save_milestones_sec
        )

    def _load_latest_checkpoint(self) -> None:
        paths = list_checkpoints(self.checkpoint_dir)
        if not paths:
            return
        state = load_checkpoint(paths[-1])
        check_compatible(paths[-1], state["model"], self.model)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.train_step = int(state["train_step"])
        self.env_steps = int(state["env_steps"])
        self.nan_updates = int(state.get("nan_updates", 0))
        self.lr_schedule.load_state(state.get("lr_schedule", self.lr_schedule.state()))
        # PBT's mutations survive a resume; without PBT the config rules
        if self.cfg.with_pbt and "hparams" in state:
            self.hp = {**self.hp, **state["hparams"]}
        if self.cfg.frozen_pool_size and "frozen_pool" in state:
            self._restore_pool(state["frozen_pool"])

    def _restore_pool(self, pool: dict) -> None:
        """Self-play: the checkpoint's frozen versions back in their pool entries (as many as
        --selfplay_pool_size keeps), each announced as a snapshot (the runner rates it from the
        policy's rating)."""
        versions = pool["versions"][: self.cfg.frozen_pool_size].tolist()
        for slot, version in enumerate(versions):
            if version >= 0:
                self.buffers.restore_snapshot(self.policy_id, slot, pool["weights"][slot], version)
                self.reports.put(Snapshot(self.policy_id, slot, version, self.env_steps))
        self.snapshots = int(pool["snapshots"])

    # --- one update
    def gather(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Copy the batch's slots out of shared memory (so they can be recycled at once), time-major
        [T, C, ...]: a column per slot, or fewer with part-filled slots packed together
        (packing.py)."""
        # index_select copies whole slots (5x faster than tensor[slots] for a batch of images)
        tensors = {
            name: getattr(self.buffers, "traj_" + field).index_select(0, batch.slots)
            for name, field in (
                ("obs", "obs"),
                ("actions", "actions"),
                ("behavior_logp", "action_logp"),
                ("behavior_params", "action_params"),
                ("rewards", "rewards"),
                ("discounted_returns", "discounted_returns"),
                ("dones", "dones"),
                ("valid", "valid"),
                ("policy_version", "policy_version"),
                ("rnn_states", "rnn_states"),
            )
        }
        tensors["valid"] = batch.learned(tensors["valid"])
        # contiguous time-major: a minibatch of trajectories is then a copy of whole rows
        tensors = time_major(
            tensors, self.cfg.bptt_len, self.cfg.pack_sequences, self.cfg.num_batches_per_epoch
        )
        return {k: v.to(self.device, non_blocking=True) for k, v in tensors.items()}

    def train(self, batch: dict[str, torch.Tensor], preempted_steps: int = 0) -> dict:
        """--num_epochs passes of --num_batches_per_epoch APPO steps over a gathered batch; the new version."""
        cfg = self.cfg
        lag = self.train_step - batch["policy_version"]
        valid = batch["valid"]
        batch["mask"] = valid & (lag <= cfg.max_policy_lag)
        # every rank's
        self.env_steps += int(self.collective.sum(valid.sum().reshape(1))[0]) * self.frameskip
        self.hp = self.buffers.hparams(self.policy_id)
        # the input normalizer's and --scale_rewards' statistics (the same on every rank)
        self.model.merge_batch_statistics(batch, valid, self.collective.sum)
        self.lr_schedule.batch_start(self.hp["learning_rate"], self.env_steps)
        stats: dict[str, float] = {}
        first_epoch_targets = []
        for epoch in range(cfg.num_epochs):
            for minibatch in self.minibatches.epoch(batch, self.hp["gamma"]):
                # the rate this step takes, for the stats
                lr = self.lr_schedule.rate
                stats, targets = self._optimizer_step(minibatch)
                self.lr_schedule.after_minibatch(stats)
                if epoch == 0:
                    first_epoch_targets.append(targets)
            self.lr_schedule.after_epoch()
        if self.model.returns_normalizer is not None:
            # once per batch, after its updates, so the head's normalized targets hold still (why:
            # merge_returns)
            self.model.merge_returns(torch.cat(first_epoch_targets), self.collective.sum)
        self.train_step += 1
        self.preempted_updates += preempted_steps > 0
        valid_lag = lag[valid].float()
        samples = int(valid.sum())
        stats.update(
            batch_samples=samples,
            padded_fraction=1.0 - samples / valid.numel(),
            preempted_steps=preempted_steps,
        )
        stats = self.collective.mean_over_ranks(stats)
        stats.update(self._hp_stats())
        stats.update(
            train_step=self.train_step,
            env_steps=self.env_steps,
            lr=lr,
            nan_updates=self.nan_updates,
            preempted_updates=self.preempted_updates,
            policy_lag_min=float(valid_lag.min()),
            policy_lag_mean=float(valid_lag.mean()),
            policy_lag_max=float(valid_lag.max()),
            masked_fraction=1.0 - float(batch["mask"].sum()) / max(1, int(valid.sum())),
        )
        return stats

    def _optimizer_step(self, mb: dict[str, torch.Tensor]) -> tuple[dict, torch.Tensor]:
        """One step on a minibatch: its stats and its learned samples' value targets (return units);
        skipped and counted if the loss or gradient is not finite (under torchrun one rank's makes
        every rank's average so: all skip)."""
        self.optimizer.zero_grad()
        if mb["valid"].numel() == 0:
            stats, targets = self._empty_minibatch()
        else:
            loss, stats, targets = self._loss(mb)
            targets = targets[mb["mask"]].detach()
            loss.backward()
            # one host sync for all of them, after the backward pass
            stats = dict(zip(STATS, stats.tolist()))
        self.collective.average_gradients(self.parameters)
        max_norm = self.hp["max_grad_norm"] if self.hp["max_grad_norm"] > 0 else math.inf
        grad_norm = clip_gradient_norm(self.parameters, max_norm).item()
        if not math.isfinite(grad_norm):
            # a non-finite target must not reach the statistics
            return self._skip_update(stats), targets[:0]
        self.optimizer.step()
        self.nan_updates_in_a_row = 0
        stats["grad_norm"] = grad_norm
        return stats, targets

    def _empty_minibatch(self) -> tuple[dict, torch.Tensor]:
        """Under torchrun a preempted rank may hold fewer trajectories than minibatches. An empty
        one has no loss but makes the same collectives as any (advantage moments, gradients), so the
        ranks stay in step and this rank applies the same averaged update as the others."""
        empty = torch.zeros(0, device=self.device)
        if self.cfg.normalize_advantage:
            losses.normalize(empty, empty.bool(), self.collective.sum)
        for p in self.parameters:
            p.grad = torch.zeros_like(p)
        return {}, empty

    def _skip_update(self, stats: dict) -> dict:
        self.nan_updates += 1
        self.nan_updates_in_a_row += 1
        if self.nan_updates_in_a_row >= MAX_NAN_UPDATES_IN_A_ROW:
            raise FloatingPointError(
                f"policy {self.policy_id}: {self.nan_updates_in_a_row} updates in a row had a "
                f"non-finite loss or gradient; try a lower --learning_rate or --reward_scale"
            )
        return stats

    def _loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The minibatch's loss and stats (losses.appo_loss), and its value targets."""
        now = self.minibatches.forward(mb, self.hp["gamma"])
        loss, stats = losses.appo_loss(
            now,
            mask=mb["mask"],
            hp=self.hp,
            kl_loss_coeff=self.cfg.kl_loss_coeff,
            normalize_advantages=self.cfg.normalize_advantage,
            returns_normalizer=self.model.returns_normalizer,
            sum_over_ranks=self.collective.sum,
        )
        return loss, stats, now.targets

    def _hp_stats(self) -> dict:
        return {f"hp_{name}": value for name, value in self.hp.items()}
