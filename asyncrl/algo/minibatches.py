"""How an update cuts its batch into minibatches, chosen once per learner (--shuffle_samples), and
the forward pass that goes with each cut: the current policy at the minibatch's samples, its value
estimates, advantages and value targets.

- TrajectoryMinibatches (the default): whole trajectories, time-major [T, b]. Each minibatch's advantages and targets
  come from its own forward pass: values of the weights being trained, V-trace's ratios of the current policy.
- SampleMinibatches (feed-forward models): before the batch's first update, one forward pass without gradient over
  the whole batch gives every sample its advantage and target, kept for every epoch (as CleanRL and Sample Factory
  compute them; a pass at each epoch's start cost Pong's learner 8% more time and learned no more, one run each); the
  minibatches are then samples drawn from all trajectories ([n]), as CleanRL's PPO draws them, instead of a few
  stretches of consecutive, correlated steps.

Each sample's proximal outputs are those of the weights before its first update in the batch (PPO's "old" policy and
values): its minibatch's own forward pass in the first epoch, or SampleMinibatches' pass before it (a pass of its
own over the batch would cost Atari's learner 12% more time). The value clip keeps new estimates near them, and with
--decoupled_ppo the ratio clip keeps the policy near them, importance weights correcting for the acting policy. Under
APPO's lag the acting version is several updates older: on Pong at lag 4, clips around its outputs cut the value
gradient of 50-81% of the samples in four batches of nine, and the policy gradient of up to 29%, before the batch's
first step (`pong_settings.md` in benchmarks/studies).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from asyncrl.algo import losses
from asyncrl.algo.vtrace import from_importance_weights
from asyncrl.cfg.config import Config

# a batch's tensors with one row per step (obs has one more: the bootstrap observation)
STEP_TENSORS = ("actions", "behavior_logp", "behavior_params", "mask")
# each sample's outputs before its first update in the batch (the module's docstring)
PROXIMAL = ("proximal_values", "proximal_log_ratio")


@dataclass
class Forward:
    # log pi(a|x) - log mu(a|x) of the current policy pi and the acting mu; 0 where a step holds no
    # sample
    log_ratio: torch.Tensor
    # the current policy's entropy at each sample
    entropy: torch.Tensor
    # KL(mu || pi) at each sample
    kl: torch.Tensor
    # the value head's outputs (normalized returns with --normalize_returns), with gradient
    values: torch.Tensor
    # the same in return units, without gradient
    returns: torch.Tensor
    advantages: torch.Tensor
    # value targets in return units
    targets: torch.Tensor
    # before the sample's first update (return units): the value clip's centre
    proximal_values: torch.Tensor
    # log pi_prox(a|x) - log mu(a|x): the policy the ratio clip keeps pi near
    proximal_log_ratio: torch.Tensor


def advantages_and_targets(
    cfg: Config, gamma: float, batch: dict, returns: torch.Tensor, log_ratio: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, value targets) of time-major [T, B] steps, from values in return units [T+1, B]
    (the last row bootstraps) and the log importance ratios: V-trace, or GAE with --with_vtrace
    False."""
    rewards = (batch["rewards"] * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
    discounts = gamma * (~batch["dones"]).float()
    if cfg.with_vtrace:
        vt = from_importance_weights(
            log_ratio,
            discounts,
            rewards,
            returns[:-1],
            returns[-1],
            cfg.vtrace_rho,
            cfg.vtrace_pg_rho,
            cfg.vtrace_c,
            batch["valid"],
        )
        return vt.pg_advantages, vt.vs
    return losses.gae(rewards, returns[:-1], returns[-1], discounts, cfg.gae_lambda, batch["valid"])


class TrajectoryMinibatches:
    def __init__(self, cfg: Config, model: torch.nn.Module, autocast_dtype: torch.dtype | None):
        self.cfg = cfg
        self.model = model
        self.autocast_dtype = autocast_dtype

    def epoch(self, batch: dict, gamma: float) -> Iterator[dict]:
        """--num_batches_per_epoch minibatches of whole trajectories (always that many, some maybe empty: under torchrun
        every rank takes as many optimizer steps as the others, from batches of different sizes). In the batch's first
        epoch each minibatch's forward pass gives its samples their proximal outputs, kept for the later epochs."""
        first_epoch = "proximal_values" not in batch
        for trajectories in torch.randperm(batch["valid"].shape[1]).tensor_split(
            self.cfg.num_batches_per_epoch
        ):
            trajectories = trajectories.to(batch["valid"].device)
            mb = {
                k: v.index_select(1, trajectories)
                for k, v in batch.items()
                if not (first_epoch and k in PROXIMAL)
            }
            yield mb
            # the learner made its forward pass (an empty one makes none)
            if first_epoch and "proximal_values" in mb:
                for k in PROXIMAL:
                    if k not in batch:
                        batch[k] = torch.zeros_like(batch["valid"], dtype=mb[k].dtype)
                    batch[k].index_copy_(1, trajectories, mb[k])

    def forward(self, mb: dict, gamma: float) -> Forward:
        """The forward pass over whole trajectories; where the minibatch comes without proximal
        outputs (its samples' first update in this batch) its own outputs are those, and it keeps
        them."""
        params, values = self.model.forward_sequence(
            mb["obs"], mb["rnn_states"], mb["state_starts"], mb["dones"], self.autocast_dtype
        )
        log_ratio, entropy, kl = policy_at(self.model, params[:-1], mb)
        returns = self.model.returns(values.detach())
        advantages, targets = advantages_and_targets(
            self.cfg, gamma, mb, returns, log_ratio.detach()
        )
        if "proximal_values" not in mb:
            mb.update(proximal_values=returns[:-1], proximal_log_ratio=self.proximal(log_ratio))
        return Forward(
            log_ratio,
            entropy,
            kl,
            values[:-1],
            returns[:-1],
            advantages,
            targets,
            mb["proximal_values"],
            mb["proximal_log_ratio"],
        )

    def proximal(self, log_ratio: torch.Tensor) -> torch.Tensor:
        """log pi_prox - log mu from the log ratio of a sample's first forward pass in the batch:
        that pass's policy with --decoupled_ppo, else the acting policy itself (0)."""
        return log_ratio.detach() if self.cfg.decoupled_ppo else torch.zeros_like(log_ratio)


class SampleMinibatches(TrajectoryMinibatches):
    def epoch(self, batch: dict, gamma: float) -> Iterator[dict]:
        """--num_batches_per_epoch minibatches of the batch's learned samples in random order, each sample with the
        advantage, target and proximal outputs of a pass over the whole batch before its first epoch."""
        self.before_first_epoch(batch, gamma)
        steps = {
            k: batch[k].flatten(0, 1) for k in (*STEP_TENSORS, "advantages", "targets", *PROXIMAL)
        }
        steps["obs"] = batch["obs"][:-1].flatten(0, 1)
        learned = batch["mask"].flatten().nonzero().squeeze(1)
        for samples in learned[torch.randperm(len(learned), device=learned.device)].tensor_split(
            self.cfg.num_batches_per_epoch
        ):
            mb = {k: v.index_select(0, samples) for k, v in steps.items()}
            mb["valid"] = mb["mask"]
            yield mb

    @torch.no_grad()
    def before_first_epoch(self, batch: dict, gamma: float) -> None:
        # the pass gives the batch its proximal outputs too
        if "advantages" not in batch:
            whole = super().forward(batch, gamma)
            batch.update(advantages=whole.advantages, targets=whole.targets)

    def forward(self, mb: dict, gamma: float) -> Forward:
        features = self.model.encode(mb["obs"], self.autocast_dtype)
        params, values = self.model.heads(features, self.model.action_mask(mb["obs"]))
        log_ratio, entropy, kl = policy_at(self.model, params, mb)
        return Forward(
            log_ratio,
            entropy,
            kl,
            values,
            self.model.returns(values.detach()),
            mb["advantages"],
            mb["targets"],
            mb["proximal_values"],
            mb["proximal_log_ratio"],
        )


def policy_at(model: torch.nn.Module, params: torch.Tensor, mb: dict) -> tuple:
    """The current policy at the minibatch's steps: its log ratio to the acting policy (padding
    steps hold stale actions and log-probs: they get ratio 1, so nothing overflows), its entropy and
    KL(acting || current). With --rpo_alpha all are RPO's perturbed policy's (V-trace's importance
    weights see it too)."""
    logp, entropy, kl = model.learning_terms(params, mb["behavior_params"], mb["actions"])
    log_ratio = torch.where(mb["valid"], logp - mb["behavior_logp"], torch.zeros_like(logp))
    return log_ratio, entropy, kl


def minibatches(
    cfg: Config, model: torch.nn.Module, autocast_dtype: torch.dtype | None
) -> TrajectoryMinibatches:
    return (SampleMinibatches if cfg.shuffle_samples else TrajectoryMinibatches)(
        cfg, model, autocast_dtype
    )
