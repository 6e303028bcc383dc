"""The flags of learning: the batch, the optimizer, the losses and their targets, the
normalizers."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag


@dataclass
class LearningFlags:
    """Learning: the batch, the optimizer, the losses, the normalizers"""

    batch_size: int = flag(1024, "Samples (env steps of one agent) per learner update.")
    num_batches_per_epoch: int = flag(
        1, "Minibatches per --batch_size samples; each is one optimizer step."
    )
    num_epochs: int = flag(1, "Passes over each batch.")
    shuffle_samples: bool = flag(
        False,
        "Minibatches of samples drawn from the whole batch, whose advantages are "
        "computed over the batch once, before its first epoch (as CleanRL's PPO); False: "
        "minibatches of whole trajectories, each computing its own. Needs --use_rnn False.",
    )
    pack_sequences: bool = flag(
        True,
        "Pack part-filled slots (ver's rollout ends, agents that leave early) into "
        "fewer trajectories for the learner, each piece followed by its bootstrap row, "
        "instead of padding each to --rollout steps (VER's sequence packing).",
    )
    compile_learner: bool = flag(
        False,
        "Compile the learner's minibatch step (the model's forward pass, targets and loss, and their backward "
        "pass) with torch.compile into fewer, fused kernels. Costs a compile when learning starts (10-20 s on 2 "
        "cores for CartPole's or Atari's model; less from torch's cache of an earlier run) and another where a "
        "hyperparameter the step reads changes (PBT; after 8, torch runs the step uncompiled). Feed-forward "
        "models only (--use_rnn False); not with torchrun's ranks.",
    )
    learning_rate: float = flag(1e-4, "Adam learning rate.")
    lr_schedule: str = flag(
        "constant",
        "constant; linear_decay to 0 over --train_for_env_steps; kl_adaptive_minibatch "
        "or kl_adaptive_epoch: divided by 1.5 after a minibatch (or an epoch) whose KL from the "
        "acting policy is above twice --lr_schedule_kl_threshold, multiplied by 1.5 below half of it.",
        choices=["constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch"],
    )
    lr_schedule_kl_threshold: float = flag(
        0.008, "The KL the kl_adaptive schedules keep the updates near."
    )
    lr_adaptive_min: float = flag(1e-6, "The lowest learning rate of the kl_adaptive schedules.")
    lr_adaptive_max: float = flag(1e-2, "The highest learning rate of the kl_adaptive schedules.")
    adam_eps: float = flag(1e-6, "Adam epsilon.")
    adam_beta1: float = flag(0.9, "Adam beta1.")
    adam_beta2: float = flag(0.999, "Adam beta2.")
    max_grad_norm: float = flag(4.0, "Gradient norm clipping; 0 disables.")
    gamma: float = flag(0.99, "Discount factor.")
    with_vtrace: bool = flag(
        True, "V-trace off-policy correction (APPO); False uses GAE targets and advantages."
    )
    vtrace_rho: float = flag(
        1.0, "V-trace rho-bar: clip of the importance weight in the value targets."
    )
    vtrace_c: float = flag(1.0, "V-trace c-bar: clip of the trace-cutting coefficients.")
    vtrace_pg_rho: float = flag(
        1.0, "Clip of the importance weight in the V-trace policy-gradient advantage."
    )
    value_bootstrap: bool = flag(
        True,
        "At a time limit (gymnasium's truncated, VizDoom's episode timeout) bootstrap "
        "from the value of the episode's final observation; False treats it as a death (Sample "
        "Factory's default), which biases the value of every state near the limit.",
    )
    gae_lambda: float = flag(0.95, "GAE lambda (used with --with_vtrace False).")
    ppo_clip_ratio: float = flag(0.1, "PPO clip: ratio is kept in [1/(1+c), 1+c].")
    decoupled_ppo: bool = flag(
        False,
        "Take the ratio clip around the policy before a sample's first update in the "
        "batch, with importance weights for the acting policy (decoupled PPO); False: around the "
        "acting policy, which under APPO's lag is several updates older.",
    )
    ppo_clip_value: float = flag(
        1.0,
        "Value clip around the estimates before a sample's first update in the batch; 0 disables.",
    )
    value_loss_coeff: float = flag(0.5, "Weight of the value loss.")
    exploration_loss_coeff: float = flag(0.003, "Weight of the entropy bonus.")
    kl_loss_coeff: float = flag(
        0.0,
        "Weight of a penalty on KL(acting policy || current policy) per sample (PPO's "
        "fixed-KL penalty); holds each update near the policy that acted.",
    )
    rpo_alpha: float = flag(
        0.0,
        "Box actions: Robust Policy Optimization (Rahman & Xue 2022; CleanRL's "
        "rpo_continuous_action uses 0.5): the update takes the acted actions' log-probabilities "
        "under the Gaussian with its means shifted by noise from U(-alpha, alpha). 0: plain PPO.",
    )
    normalize_advantage: bool = flag(True, "Normalize advantages per minibatch.")
    normalize_input: bool | None = flag(
        None,
        "Normalize observations with a running per-element mean/std (learned "
        "by the learner). None (auto): on for vector observations, off for images "
        "(scaled by 1/255).",
    )
    normalize_returns: bool = flag(
        True,
        "The value head learns returns normalized by their running mean/std; V-trace "
        "and GAE see them in return units (the reported value stays in return units).",
    )
    reward_scale: float = flag(
        1.0, "Rewards are multiplied by this before learning (reported returns stay the env's own)."
    )
    reward_clip: float = flag(1000.0, "Scaled rewards are clipped to [-c, c].")
    scale_rewards: bool = flag(
        False,
        "Rewards are divided by the running std of the discounted return before learning "
        "(CleanRL's PPO, gymnasium's NormalizeReward; one set of statistics per policy); then "
        "--reward_scale and --reward_clip apply. Reported returns stay the env's own.",
    )
