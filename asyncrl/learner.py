"""Learner: one per policy. Assembles batches from finished trajectory slots, takes APPO steps, and
publishes the new weights to shared memory, where the policy workers pick them up before their next batch."""

from __future__ import annotations

import hashlib
import time

import torch

from asyncrl import losses
from asyncrl.buffers import SharedBuffers, slots_per_batch
from asyncrl.checkpoint import check_compatible, checkpoint_dir, list_checkpoints, load_checkpoint, save_checkpoint
from asyncrl.config import Config
from asyncrl.distributed import Collective, RankLost, preemption, this_rank
from asyncrl.model import build_model, flat_state, low_precision, num_state_floats, state_tensors
from asyncrl.queues import NEW_VERSION, ROLLOUT_CLOSED, Empty, Queues
from asyncrl.rollout_worker import RunStopped
from asyncrl.timing import Timing
from asyncrl.vtrace import from_importance_weights

MAX_NAN_UPDATES_IN_A_ROW = 10
LOSS_STATS = ("loss", "policy_loss", "value_loss", "entropy", "value")  # of a minibatch (_loss)
# The input normalizer's statistics are updated from this many random valid observations per batch: as good an
# estimate of per-pixel mean and variance over a run, at a quarter of the cost of using a whole 1024-sample batch.
NORMALIZER_SAMPLES_PER_BATCH = 256


def learner_state_floats(model: torch.nn.Module) -> int:
    """Floats of a learner's state as pack_state writes it: weights and buffers, Adam's two moments, Adam's step."""
    return num_state_floats(model) + 2 * sum(p.numel() for p in model.parameters()) + 1


def pack_state(model: torch.nn.Module, optimizer: torch.optim.Adam, out: torch.Tensor) -> None:
    """Write the model's state tensors and the Adam state of its parameters into the flat tensor `out` (a parameter
    Adam has not stepped yet counts as zero moments)."""
    params = list(model.parameters())
    moments = [optimizer.state.get(p, {}) for p in params]
    parts = [flat_state(model)]
    for key in ("exp_avg", "exp_avg_sq"):
        parts += [m[key].reshape(-1).float().cpu() if key in m else torch.zeros(p.numel()) for p, m in zip(params, moments)]
    step = max([float(m["step"]) for m in moments if "step" in m], default=0.0)
    out.copy_(torch.cat([*parts, torch.tensor([step])]))


def unpack_state(model: torch.nn.Module, optimizer: torch.optim.Adam, flat: torch.Tensor) -> None:
    """The inverse of pack_state: load weights, buffers and Adam state from `flat`."""
    flat, offset = flat.clone(), 0

    def take(like: torch.Tensor) -> torch.Tensor:
        nonlocal offset
        offset += like.numel()
        return flat[offset - like.numel():offset].view_as(like).to(like.device, like.dtype)
    with torch.no_grad():
        for t in state_tensors(model):
            t.copy_(take(t))
        params = list(model.parameters())
        moments = {key: [take(p) for p in params] for key in ("exp_avg", "exp_avg_sq")}
        step = float(flat[offset])
    for i, p in enumerate(params):
        optimizer.state[p] = {"step": torch.tensor(step), "exp_avg": moments["exp_avg"][i].clone(),
                              "exp_avg_sq": moments["exp_avg_sq"][i].clone()}


def _sample_observations(obs: torch.Tensor, valid: torch.Tensor, n: int) -> torch.Tensor:
    """Up to n observations at random from the valid steps of time-major obs [T, B, ...] (contiguous)."""
    rows = valid.flatten().nonzero().squeeze(1)
    return obs.flatten(0, 1).index_select(0, rows[torch.randperm(len(rows), device=rows.device)[:n]])


class Learner:
    def __init__(self, policy_id: int, cfg: Config, buffers: SharedBuffers, queues: Queues,
                 obs_space, action_space, device: torch.device, frameskip: int):
        self.policy_id, self.cfg, self.buffers, self.device, self.frameskip = policy_id, cfg, buffers, device, frameskip
        self.full_slots, self.free_slots, self.reports = queues.full_slots[policy_id], queues.free_slots, queues.reports
        self.commands = queues.learner_commands[policy_id]  # from PBT (pbt.py)
        self.policy_requests = queues.policy_requests[policy_id]  # ppo/ver: wakes the policy workers for a new version
        self.model = build_model(obs_space, action_space, cfg).to(device).train()
        self.autocast_dtype = low_precision(cfg, device, self.model)  # of the encoder; master weights stay float32
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps,
                                          betas=(cfg.adam_beta1, cfg.adam_beta2))
        self.checkpoint_dir = checkpoint_dir(cfg.experiment_dir, policy_id)
        self.train_step = 0  # also the policy version: one per batch
        self.env_steps = 0   # frames (frameskip included) of the samples this learner received
        self.nan_updates, self.nan_updates_in_a_row = 0, 0
        self.pending_slots: list[int] = []
        self.pending_actions = 0  # ppo/ver: actions whose samples are in pending_slots
        # ppo/ver's carry-over: slots whose first rows were learned while their group was mid-step -> (rows learned,
        # version of the action in flight then); the actions in flight at the last rollout's close
        self.carried_rows: dict[int, tuple[int, int]] = {}
        self.carried_in = 0
        self.rows_from = self.rows_to = None  # of the batch being learned: each slot's rows that belong to it
        self.lent_slots = 0  # of the batch being learned: the last ones are still being filled (not freed)
        self.snapshots = 0  # frozen past versions this learner has written to its pool (self-play)
        self.last_checkpoint = time.monotonic()
        self.timing = Timing(f"learner_{policy_id}")
        self.hp = cfg.policy_hparams(policy_id)  # this policy's own hyperparameters, re-read from shared memory per batch
        self.rank = this_rank()  # under torchrun: this learner's place among the ranks that train together
        self.collective = Collective(self.rank, device, cfg.dist_timeout) if self.rank.distributed else None
        self.stopped = False  # under torchrun: the ranks agreed to stop; no more batches
        # under torchrun, APPO: DD-PPO's straggler rule (ppo/ver apply it where rollouts end, in the policy worker)
        self.preemption = preemption(cfg) if not cfg.synchronous else None
        self.preempted_steps = 0  # of the batch being learned: samples the straggler rule left out
        self.preempted_updates = 0  # in this launch
        if self.rank.writes:
            self._load_latest_checkpoint()
        if self.collective is not None:
            self._start_from_rank_0()
        self.next_snapshot = self.env_steps + cfg.selfplay_snapshot_every_env_steps
        buffers.set_hparams(policy_id, self.hp)
        buffers.publish_weights(policy_id, self.model, self.train_step)
        self.reports.put(("learner", policy_id, {"train_step": self.train_step, "env_steps": self.env_steps,
                                                 **self._hp_stats()}))

    # --- lifecycle
    def poll(self, timeout: float) -> bool:
        """Learn from one batch if one is complete; in serial mode from every complete one (there a rollout worker
        cannot wait for the learner to free a slot)."""
        try:
            return self._poll(timeout)
        except RankLost as e:
            message = f"{e}; the run stops (run the same command again to resume from rank 0's last checkpoint)"
            self.reports.put(("fatal", message))
            raise RunStopped(message) from None

    def _poll(self, timeout: float) -> bool:
        if self.stopped:
            time.sleep(timeout)
            return False
        if self.timing.due():
            self.reports.put(self.timing.report())
        self._run_commands()
        learned = False
        while (slots := self._next_batch(timeout)) is not None:
            self._learn(slots)
            learned, timeout = True, 0.0
            if not self.cfg.serial_mode:
                break
        return learned

    def _next_batch(self, timeout: float) -> torch.Tensor | None:
        """The slots of the next batch, once --batch_size samples' worth have arrived."""
        if self.cfg.synchronous:
            return self._next_rollout(timeout)
        needed = slots_per_batch(self.cfg) - len(self.pending_slots)
        try:
            with self.timing.phase("wait_batch"):  # time here means sampling is the bottleneck
                self.pending_slots += self.full_slots.get_many(block=timeout > 0, timeout=timeout,
                                                               max_messages_to_get=needed)
        except Empty:
            pass
        if not self._batch_complete():
            return None
        slots, self.pending_slots = torch.tensor(self.pending_slots), []
        return slots

    def _batch_complete(self) -> bool:
        """A whole batch; under torchrun also part of one (at least one slot per minibatch) if the other ranks
        preempt this one."""
        full, have = slots_per_batch(self.cfg), len(self.pending_slots)
        self.preempted_steps = 0
        if self.preemption is None:
            return have >= full
        if have >= full:
            self.preemption.collected(self.train_step)
            return True
        if have >= self.cfg.num_batches_per_epoch and self.preemption.preempts(self.train_step, have, full):
            self.preempted_steps = (full - have) * self.cfg.rollout
            return True
        return False

    def _next_rollout(self, timeout: float) -> torch.Tensor | None:
        """ppo/ver: the slots of the current rollout, once the policy worker has closed it and the samples of all the
        actions it handed out have arrived, except those of groups still mid-step (VER's carry-over): the rows those
        finished before are read where they lie (their slots stay with their rollout workers), and their actions in
        flight are samples of the next rollout. Sets self.rows_from / rows_to: each slot's rows that are this
        rollout's."""
        try:
            with self.timing.phase("wait_batch"):
                new = self.full_slots.get_many(block=timeout > 0, timeout=timeout)
        except Empty:
            new = []
        new = [slot for slot in new if slot != ROLLOUT_CLOSED]  # that message only wakes us
        if new:
            self.pending_actions += self._acted_rows(new, [self._learned_rows(s) for s in new],
                                                     [self.cfg.rollout] * len(new))
        self.pending_slots += new
        issued = int(self.buffers.rollout_issued[self.policy_id])
        if issued < 0:
            return None
        lent = self._rows_of_groups_in_flight()
        expected = issued + self.carried_in - len(lent)
        learn_now = [(slot, first, row) for slot, first, row, _ in lent if row > first]  # rows to read where they lie
        have = self.pending_actions + (self._acted_rows(*zip(*learn_now)) if learn_now else 0)
        if have < expected:
            return None
        if have > expected:
            raise RuntimeError(f"policy {self.policy_id}: {have} samples of rollout {self.train_step} arrived, but "
                               f"{expected} actions were handed out for it")
        slots = self.pending_slots + [slot for slot, _, _ in learn_now]
        self.rows_from = torch.tensor([self.carried_rows.pop(s, (0,))[0] for s in self.pending_slots] +
                                      [first for _, first, _ in learn_now])
        self.rows_to = torch.tensor([self.cfg.rollout] * len(self.pending_slots) + [row for _, _, row in learn_now])
        self.lent_slots = len(learn_now)
        self.carried_rows.update({slot: (row, version) for slot, _, row, version in lent})
        self.carried_in, self.pending_slots, self.pending_actions = len(lent), [], 0
        self.preempted_steps = int(self.buffers.rollout_preempted[self.policy_id])
        return torch.tensor(slots, dtype=torch.int64)

    def _rows_of_groups_in_flight(self) -> list[tuple[int, int, int, int]]:
        """(slot, first row to learn, row of the action in flight, its version) per agent whose group was mid-step
        when the rollout closed and whose slot has not arrived. An entry of an older version is one carried before:
        it still counts while its slot is out (carried_rows matches), else it is stale (its slot came back since)."""
        pending = set(self.pending_slots)
        entries = self.buffers.rollout_carried
        lent = []
        for slot, row, version in entries[entries[:, 0] >= 0].tolist():
            if slot in pending:
                continue  # its slot came back whole: the action in flight finished into this rollout
            if version < self.train_step and self.carried_rows.get(slot) != (row, version):
                continue
            lent.append((slot, self._learned_rows(slot), row, version))
        return lent

    def _learned_rows(self, slot: int) -> int:
        """How many of the slot's first rows an earlier rollout learned while its group was mid-step."""
        return self.carried_rows.get(slot, (0,))[0]

    def _rows_between(self, first, end) -> torch.Tensor:
        """[B, T]: row t of slot b is in first[b]..end[b]-1."""
        row = torch.arange(self.cfg.rollout)
        return (row >= torch.as_tensor(first)[:, None]) & (row < torch.as_tensor(end)[:, None])

    def _in_rollout(self, valid: torch.Tensor) -> torch.Tensor:
        """ppo/ver: the valid rows [B, T] of the batch's slots that are this rollout's (the others are learned in
        another one)."""
        return valid if self.rows_from is None else valid & self._rows_between(self.rows_from, self.rows_to)

    def _free(self, slots: torch.Tensor) -> None:
        """Hand the batch's slots back to the rollout workers, except those they are still filling."""
        self.free_slots.put_many(slots[:len(slots) - self.lent_slots].tolist())

    def _acted_rows(self, slots, first, end) -> int:
        """Rows first[b]..end[b]-1 of slots[b], all b, that hold an action (the others are padding or final rows)."""
        acted = self.buffers.traj_policy_version[torch.as_tensor(slots)] >= 0
        return int((acted & self._rows_between(first, end)).sum())

    def _publish(self) -> None:
        """New weights for the policy workers. ppo/ver: they open the next rollout, and the policy workers, whose
        requests all wait for it, are woken."""
        if self.cfg.synchronous:
            self.buffers.rollout_issued[self.policy_id] = -1
        self.buffers.publish_weights(self.policy_id, self.model, self.train_step)
        if self.cfg.synchronous:
            self.policy_requests.put((NEW_VERSION, self.train_step))

    def _learn(self, slots: torch.Tensor) -> None:
        if self.cfg.sampler_only:
            self._count_and_recycle(slots)
            return
        with self.timing.phase("gather"):
            batch = self._gather(slots)
            self._free(slots)
        with self.timing.phase("train"):
            stats = self._train(batch)
        with self.timing.phase("publish"):
            self._publish()
        self.reports.put(("learner", self.policy_id, stats))
        if self.cfg.frozen_pool_size and self.env_steps >= self.next_snapshot:
            self._snapshot()
        if self.collective is not None:
            self._maybe_stop_together()
        if time.monotonic() - self.last_checkpoint >= self.cfg.save_every_sec:
            self.save()

    def _maybe_stop_together(self) -> None:
        """Under torchrun every rank must stop after the same update, or the others would wait in an all-reduce for
        it: the ranks agree after each update (their env steps are counted over all ranks, so the step limit is
        reached by all at once; a time limit or Ctrl-C reaches one runner, which sets stop_requested)."""
        wants = bool(self.buffers.stop_requested[0]) or self.env_steps >= self.cfg.train_for_env_steps
        if self.collective.any(wants):  # the runner stops this process next, and stop() saves
            self.stopped = True
            self.reports.put(("learner_stopped", self.policy_id))

    def _start_from_rank_0(self) -> None:
        """Every rank starts from rank 0's weights, Adam state and counters (rank 0 alone reads checkpoints)."""
        state = torch.zeros(learner_state_floats(self.model), device=self.device)
        if self.rank.writes:
            pack_state(self.model, self.optimizer, state)
        unpack_state(self.model, self.optimizer, self.collective.broadcast(state))
        counters = self.collective.broadcast(torch.tensor([self.train_step, self.env_steps, self.nan_updates],
                                                          device=self.device))
        self.train_step, self.env_steps, self.nan_updates = map(int, counters.tolist())

    def weights_digest(self) -> str:
        """A short hash of the weights: equal on every rank of a distributed run (printed when a learner stops)."""
        return hashlib.sha256(flat_state(self.model).numpy().tobytes()).hexdigest()[:16]

    def _snapshot(self) -> None:
        """A frozen copy of the current weights joins this policy's pool, replacing the oldest once it is full."""
        k = self.snapshots % self.cfg.frozen_pool_size
        self.buffers.snapshot_weights(self.policy_id, k, self.model, self.train_step)
        self.snapshots += 1
        self.next_snapshot = self.env_steps + self.cfg.selfplay_snapshot_every_env_steps
        self.reports.put(("snapshot", self.policy_id, k, self.train_step, self.env_steps))

    def _run_commands(self) -> None:
        """PBT's requests: "export" writes this learner's weights and Adam state to its learner_state row; ("import",
        src) loads src's row, and moves the version past --max_policy_lag so that samples the replaced weights
        collected are masked from the loss."""
        try:
            commands = self.commands.get_many(block=False)
        except Empty:
            return
        for command in commands:
            if command[0] == "export":
                pack_state(self.model, self.optimizer, self.buffers.learner_state[self.policy_id])
                self.reports.put(("pbt_exported", self.policy_id))
            elif command[0] == "import":
                unpack_state(self.model, self.optimizer, self.buffers.learner_state[command[1]])
                self.train_step += self.cfg.max_policy_lag + 1
                self.buffers.publish_weights(self.policy_id, self.model, self.train_step)
                self.reports.put(("pbt_imported", self.policy_id, command[1]))

    def _count_and_recycle(self, slots: torch.Tensor) -> None:
        """--sampler_only: count the samples and hand the slots straight back (measures sampling alone)."""
        self.env_steps += int(self._in_rollout(self.buffers.traj_valid[slots]).sum()) * self.frameskip
        self._free(slots)
        if self.cfg.synchronous:  # the next rollout needs a new version
            self.train_step += 1
            self._publish()
        self.reports.put(("learner", self.policy_id, {"train_step": self.train_step, "env_steps": self.env_steps}))

    def stop(self) -> None:
        if not self.cfg.sampler_only:
            self.save()
        if self.collective is not None:
            print(f"asyncrl-learner-{self.policy_id} (rank {self.rank.rank} of {self.rank.world_size}): train step "
                  f"{self.train_step}, env steps {self.env_steps:,} (all ranks), weights {self.weights_digest()}",
                  flush=True)

    def close(self) -> None:
        if self.collective is not None:
            self.collective.close()

    def save(self) -> str | None:
        """A checkpoint (rank 0 alone writes them)."""
        self.last_checkpoint = time.monotonic()
        if not self.rank.writes:
            return None
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "train_step": self.train_step, "env_steps": self.env_steps, "policy_id": self.policy_id,
                 "nan_updates": self.nan_updates, "hparams": self.buffers.hparams(self.policy_id)}
        if self.cfg.frozen_pool_size:  # self-play: the pool of frozen past versions goes on after a resume
            state["frozen_pool"] = {"weights": self.buffers.frozen_weights[self.policy_id].clone(),
                                    "versions": self.buffers.frozen_version[self.policy_id].clone(),
                                    "snapshots": self.snapshots}
        return save_checkpoint(self.checkpoint_dir, state, self.cfg.keep_checkpoints)

    def _load_latest_checkpoint(self) -> None:
        paths = list_checkpoints(self.checkpoint_dir)
        if not paths:
            return
        state = load_checkpoint(paths[-1])
        check_compatible(paths[-1], state["model"], self.model)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.train_step, self.env_steps = int(state["train_step"]), int(state["env_steps"])
        self.nan_updates = int(state.get("nan_updates", 0))
        if self.cfg.with_pbt and "hparams" in state:  # PBT's mutations survive a resume; without PBT the config rules
            self.hp = {**self.hp, **state["hparams"]}
        if self.cfg.frozen_pool_size and "frozen_pool" in state:
            self._restore_pool(state["frozen_pool"])

    def _restore_pool(self, pool: dict) -> None:
        """Self-play: the checkpoint's frozen versions back in their pool entries (as many as --selfplay_pool_size
        keeps), each announced as a snapshot (the runner rates it from the policy's rating)."""
        for k, version in enumerate(pool["versions"][:self.cfg.frozen_pool_size].tolist()):
            if version >= 0:
                self.buffers.restore_snapshot(self.policy_id, k, pool["weights"][k], version)
                self.reports.put(("snapshot", self.policy_id, k, version, self.env_steps))
        self.snapshots = int(pool["snapshots"])

    # --- one batch
    def _gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copy the slots out of shared memory (so they can be recycled at once), time-major [T, B, ...]."""
        b, bptt = self.buffers, self.cfg.bptt_len
        # index_select copies whole slots (5x faster than tensor[slots] for a batch of images)
        batch = {name: getattr(b, "traj_" + field).index_select(0, slots) for name, field in (
            ("obs", "obs"), ("actions", "actions"), ("behavior_logp", "action_logp"), ("behavior_values", "values"),
            ("rewards", "rewards"), ("dones", "dones"), ("valid", "valid"), ("policy_version", "policy_version"))}
        batch["chunk_states"] = b.traj_rnn_states[:, ::bptt].index_select(0, slots)
        batch["valid"] = self._in_rollout(batch["valid"])
        # contiguous time-major: a minibatch of trajectories is then a copy of whole rows
        return {k: v.transpose(0, 1).contiguous().to(self.device, non_blocking=True) for k, v in batch.items()}

    def _train(self, batch: dict[str, torch.Tensor]) -> dict:
        cfg = self.cfg
        lag = self.train_step - batch["policy_version"]
        valid = batch["valid"]
        batch["mask"] = valid & (lag <= cfg.max_policy_lag)
        samples = valid.sum()
        if self.collective is not None:  # env steps count every rank's (the same on all ranks)
            samples = self.collective.sum(samples.reshape(1))[0]
        self.env_steps += int(samples) * self.frameskip
        self.hp = self.buffers.hparams(self.policy_id)
        if self.model.normalizer is not None:
            self.model.normalizer.update(_sample_observations(batch["obs"][:-1], valid, NORMALIZER_SAMPLES_PER_BATCH))
        lr = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        stats: dict[str, float] = {}
        num_trajectories = valid.shape[1]
        for _ in range(cfg.num_epochs):
            # always num_batches_per_epoch minibatches (chunk may make fewer): under torchrun every rank must take as
            # many optimizer steps (all-reduces) as the others, from batches of different sizes (ver, preemption)
            for minibatch in torch.randperm(num_trajectories).tensor_split(cfg.num_batches_per_epoch):
                stats = self._optimizer_step({k: v.index_select(1, minibatch.to(v.device)) for k, v in batch.items()})
        self.train_step += 1
        self.preempted_updates += self.preempted_steps > 0
        valid_lag = lag[valid].float()
        stats.update(batch_samples=int(valid.sum()), preempted_steps=self.preempted_steps)
        if self.collective is not None:
            stats = self._over_ranks(stats)
        stats.update(self._hp_stats())
        stats.update(train_step=self.train_step, env_steps=self.env_steps, lr=lr, nan_updates=self.nan_updates,
                     preempted_updates=self.preempted_updates,
                     policy_lag_min=float(valid_lag.min()), policy_lag_mean=float(valid_lag.mean()),
                     policy_lag_max=float(valid_lag.max()), masked_fraction=1.0 - float(batch["mask"].sum()) / max(1, int(valid.sum())))
        return stats

    def _over_ranks(self, stats: dict) -> dict:
        """Under torchrun, what rank 0 reports holds every rank's batch: losses averaged over the ranks (a rank whose
        last minibatch was empty has none), samples summed. One small all-reduce that every rank makes."""
        losses = [stats.get(key, 0.0) for key in LOSS_STATS]
        has_losses = float(all(key in stats for key in LOSS_STATS))
        totals = self.collective.sum(torch.tensor([has_losses, *(has_losses * v for v in losses), stats["batch_samples"],
                                                   stats["preempted_steps"]], dtype=torch.float64, device=self.device))
        ranks, *loss_sums, samples, preempted = totals.tolist()
        stats.update(batch_samples=int(samples), preempted_steps=int(preempted))
        if ranks:
            stats.update({key: total / ranks for key, total in zip(LOSS_STATS, loss_sums)})
        return stats

    def _optimizer_step(self, mb: dict[str, torch.Tensor]) -> dict:
        self.optimizer.zero_grad(set_to_none=True)
        if mb["valid"].shape[1] == 0:
            stats = self._empty_minibatch()
        else:
            loss, stats = self._loss(mb)
            if not torch.isfinite(loss) and self.collective is None:
                return self._skip_update(stats)
            loss.backward()
        if self.collective is not None:  # a rank's non-finite loss makes every rank's gradient non-finite: all skip
            self.collective.average_gradients(list(self.model.parameters()))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                   self.hp["max_grad_norm"] if self.hp["max_grad_norm"] > 0 else float("inf"))
        if not torch.isfinite(grad_norm):
            return self._skip_update(stats)
        self.optimizer.step()
        self.nan_updates_in_a_row = 0
        stats["grad_norm"] = float(grad_norm)
        return stats

    def _empty_minibatch(self) -> dict:
        """Under torchrun a preempted rank may hold fewer trajectories than minibatches. An empty one has no loss but
        makes the same collectives as any (advantage moments, gradients), so the ranks stay in step and this rank
        applies the same averaged update as the others."""
        if self.cfg.normalize_advantage:
            self.collective.sum(torch.zeros(3, device=self.device))
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)
        return {}

    def _skip_update(self, stats: dict) -> dict:
        self.nan_updates += 1
        self.nan_updates_in_a_row += 1
        if self.nan_updates_in_a_row >= MAX_NAN_UPDATES_IN_A_ROW:
            raise FloatingPointError(f"policy {self.policy_id}: {self.nan_updates_in_a_row} updates in a row had a "
                                     f"non-finite loss or gradient; try a lower --learning_rate or --reward_scale")
        return stats

    def _loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        cfg, hp, mask, valid = self.cfg, self.hp, mb["mask"], mb["valid"]
        action_params, values = self.model.forward_sequence(mb["obs"], mb["chunk_states"], mb["dones"], cfg.bptt_len,
                                                            self.autocast_dtype)
        dist = self.model.distribution(action_params[:-1])
        logp = dist.log_prob(mb["actions"])
        # padding steps hold stale actions and log-probs: give them ratio 1 so nothing overflows
        log_ratio = torch.where(valid, logp - mb["behavior_logp"], torch.zeros_like(logp))
        rewards = (mb["rewards"] * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
        discounts = hp["gamma"] * (~mb["dones"]).float()
        values_now, bootstrap = values[:-1].detach(), values[-1].detach()
        if cfg.with_vtrace:
            vt = from_importance_weights(log_ratio.detach(), discounts, rewards, values_now, bootstrap,
                                         cfg.vtrace_rho, cfg.vtrace_pg_rho, cfg.vtrace_c, valid)
            advantages, targets = vt.pg_advantages, vt.vs
        else:
            advantages, targets = losses.gae(rewards, values_now, bootstrap, discounts, cfg.gae_lambda, valid)
        if cfg.normalize_advantage:
            advantages = losses.normalize(advantages, mask, self.collective and self.collective.sum)

        policy_loss = losses.ppo_policy_loss(torch.exp(log_ratio), advantages, hp["ppo_clip_ratio"], mask)
        value_loss = losses.value_loss(values[:-1], targets, mb["behavior_values"], hp["ppo_clip_value"], mask)
        entropy = losses.masked_mean(dist.entropy(), mask)
        loss = policy_loss + hp["value_loss_coeff"] * value_loss - hp["exploration_loss_coeff"] * entropy
        stats = {"loss": loss.item(), "policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                 "entropy": entropy.item(), "value": losses.masked_mean(values_now, mask).item()}
        return loss, stats

    def _hp_stats(self) -> dict:
        return {f"hp_{name}": value for name, value in self.hp.items()}

    def _learning_rate(self) -> float:
        if self.cfg.lr_schedule == "linear_decay":
            return self.hp["learning_rate"] * max(0.0, 1.0 - self.env_steps / self.cfg.train_for_env_steps)
        return self.hp["learning_rate"]
