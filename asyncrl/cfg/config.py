"""The one typed config of a run: every field has a help line, cross-field checks live in
`validate`.

Flags are generated from the dataclass, so `--num_workers 4` sets `Config.num_workers`. Names follow
Sample Factory's where the concept is the same. Booleans take `True`/`False` like Sample Factory's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

# Learning hyperparameters each policy holds for itself: --policy_overrides sets them per policy,
# PBT mutates them.
PER_POLICY_HPARAMS = (
    "learning_rate",
    "exploration_loss_coeff",
    "value_loss_coeff",
    "max_grad_norm",
    "ppo_clip_ratio",
    "ppo_clip_value",
    "gamma",
)


# The range of each learning hyperparameter: (whether a value is in it, what to say if not). The flags and every
# --policy_overrides value are checked against it.
POSITIVE = (lambda v: v > 0, "positive")
AT_LEAST_0 = (lambda v: v >= 0, ">= 0")
IN_0_1 = (lambda v: 0 <= v <= 1, "in [0, 1]")
IN_0_1_OPEN = (lambda v: 0 <= v < 1, "in [0, 1)")
HPARAM_RANGES = {
    "learning_rate": POSITIVE,
    "exploration_loss_coeff": AT_LEAST_0,
    "value_loss_coeff": AT_LEAST_0,
    "max_grad_norm": AT_LEAST_0,
    "ppo_clip_ratio": POSITIVE,
    "ppo_clip_value": AT_LEAST_0,
    "gamma": IN_0_1,
    "kl_loss_coeff": AT_LEAST_0,
    "gae_lambda": IN_0_1,
    "vtrace_rho": POSITIVE,
    "vtrace_c": POSITIVE,
    "vtrace_pg_rho": POSITIVE,
    "reward_scale": POSITIVE,
    "reward_clip": POSITIVE,
    "adam_eps": POSITIVE,
    "adam_beta1": IN_0_1_OPEN,
    "adam_beta2": IN_0_1_OPEN,
}

# Synchronous (on-policy) algorithms: weights do not change while a rollout is collected (see
# policy_worker.py).
SYNC_ALGOS = ("ppo", "ver")
ALGOS = ("appo", *SYNC_ALGOS)


class ConfigError(ValueError):
    """A user error: the CLI prints it as one line and exits with code 2, before any process
    starts."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and what is wrong. (Here, not
    in checkpoint.py, so the command line catches it without importing torch.)"""


def _f(default, help_text, choices=None, path=False):
    """A field with its help line. A list or dict default is copied per instance. A path's flag
    expands '~' (the shell does not in `--train_dir=~/runs`, which made a folder named '~')."""
    metadata = {"help": help_text, "choices": choices, "path": path}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class Config:
    # --- what to run and where
    env: str | None = _f(
        None, "Environment name: a registered asyncrl env (see `asyncrl envs`) or any gymnasium id."
    )
    experiment: str = _f(
        "default_experiment", "Experiment name; files go to <train_dir>/<experiment>/."
    )
    train_dir: str = _f("train_dir", "Root folder for experiments.", path=True)
    restart_behavior: str = _f(
        "resume",
        "resume: continue from the last checkpoint of this experiment; restart: delete it and start over.",
        choices=["resume", "restart"],
    )
    seed: int | None = _f(
        None,
        "Base random seed: each env's seed comes from (seed, worker, env), the model's "
        "initial weights and each process's sampling from it too. None: random.",
    )
    device: str = _f(
        "auto",
        "Device of the policy workers and learners: auto (cuda if available), cpu, cuda or cuda:N.",
    )
    serial_mode: bool = _f(
        False, "Run every component in the main process, in turn (for debugging and tests)."
    )
    sampler_only: bool = _f(
        False,
        "Collect experience without learning: learners count the samples and recycle the "
        "slots (a benchmark of sampling).",
    )
    torch_threads: int = _f(
        1,
        "torch threads per process (rollout/policy workers; learners too unless pinned to cores "
        "of their own); 1 avoids oversubscribing cores.",
    )
    tune: bool = _f(
        False,
        "Use the fastest sampling and learning flags `asyncrl tune` measured for this env on this "
        "machine (~/.cache/asyncrl/tune/<env>.json; tunes first if there are none). Flags you give win.",
    )
    set_workers_cpu_affinity: bool = _f(
        True,
        "Pin processes to cores: a CPU learner gets half the cores to itself, "
        "each rollout worker (and its VizDoom engines) one of the rest, round-robin.",
    )

    # --- algorithm
    algo: str = _f(
        "appo",
        "appo: asynchronous PPO with V-trace (collection never waits for learning). ppo: "
        "synchronous PPO, every env steps exactly --rollout steps per update in lock-step (Sample Factory's "
        "--async_rl False). ver: synchronous PPO with variable experience rollouts (VER): each update "
        "learns from --batch_size steps of whichever envs produced them, so fast envs contribute more and "
        "slow ones do not hold them back. ppo and ver learn on-policy (weights "
        "fixed during collection) with GAE.",
        choices=list(ALGOS),
    )

    preemption_rule: str = _f(
        "ddppo",
        "Under torchrun, when a rank stops collecting for an update. ddppo: DD-PPO's "
        "straggler rule (--preemption_threshold). optimal (--algo ppo/ver): VER's estimate: "
        "every rank stops at the collection time that maximises the steps all ranks collect per "
        "second of an update, from their rates in the last update and the time learning took.",
        choices=["ddppo", "optimal"],
    )
    preemption_threshold: float = _f(
        0.6,
        "Under torchrun (DD-PPO's straggler rule): once this fraction of the ranks "
        "has collected its batch for an update, the others stop collecting as soon as "
        "they hold --preemption_min_fraction of theirs, and "
        "learn from that. 1: never preempt.",
    )
    preemption_min_fraction: float = _f(
        0.25, "The least fraction of its batch a rank collects before it may be preempted."
    )
    dist_timeout: float = _f(
        30.0,
        "Under torchrun (several ranks): seconds a rank waits for the others in a "
        "collective (the gradient all-reduce) before it declares one dead and stops the run.",
    )

    # --- sampling
    num_workers: int = _f(2, "Rollout worker processes.")
    num_envs_per_worker: int = _f(
        4, "Envs per rollout worker, split into --worker_num_splits groups stepped alternately."
    )
    worker_num_splits: int = _f(
        2,
        "Env groups per rollout worker (2 = double-buffered sampling: one group simulates "
        "while the other's actions are computed).",
    )
    num_policies: int = _f(
        1, "Policies trained at once; each agent's episode is assigned to one of them at random."
    )
    pbt_mix_policies_in_one_env: bool = _f(
        True,
        "In a multi-agent env, each agent draws its own policy per episode; "
        "False: all agents of an env play an episode with one policy.",
    )
    agents_per_env: int = _f(
        -1,
        "Agents in each env: -1 (auto) takes the env's own count (1 for a gymnasium env, its "
        "possible_agents for a PettingZoo env); another value must equal it (a check that --env "
        "is the env you mean).",
    )
    policy_workers_per_policy: int = _f(
        -1,
        "Inference processes per policy. -1 (auto): 1, or 2 when nothing learns on "
        "the CPU (--sampler_only on a CPU), where one single-threaded policy worker "
        "cannot use the cores a learner would take; next to a CPU learner a second one "
        "would take the learner's core.",
    )
    rollout: int = _f(
        32, "Length of a trajectory slot: env steps per agent sent to the learner at once."
    )
    max_policy_lag: int = _f(
        100,
        "Samples more than this many policy versions older than the learner are masked from the loss.",
    )
    env_frameskip: int | None = _f(
        None,
        "Env frames per agent step (the action repeats; VizDoom's default is 4). None: the env's default.",
    )
    env_options: dict = _f(
        {}, "Extra keyword options for the env's constructor, as JSON (e.g. '{\"step_us\": 500}')."
    )
    env_backend: str = _f(
        "per_env",
        "How a rollout worker steps an env group. per_env: each env in turn, in "
        "Python. vector: the group as one vector env, all its envs in one call (e.g. in ALE's C++ "
        "threads): for envs that have one (atari_<game>, gymnasium ids, a factory's make_vector).",
        choices=["per_env", "vector"],
    )

    env_step_timeout: float = _f(
        60.0,
        "A rollout worker stuck this many seconds (an env step or reset hangs) is killed and the workers restart.",
    )
    max_worker_restarts: int = _f(
        10,
        "Rollout/policy worker restarts allowed within 5 minutes; one more stops the run with an error.",
    )

    # --- learning
    batch_size: int = _f(1024, "Samples (env steps of one agent) per learner update.")
    num_batches_per_epoch: int = _f(
        1, "Minibatches per --batch_size samples; each is one optimizer step."
    )
    num_epochs: int = _f(1, "Passes over each batch.")
    shuffle_samples: bool = _f(
        False,
        "Minibatches of samples drawn from the whole batch, whose advantages are "
        "computed over the batch once, before its first epoch (as CleanRL's PPO); False: "
        "minibatches of whole trajectories, each computing its own. Needs --use_rnn False.",
    )
    pack_sequences: bool = _f(
        True,
        "Pack part-filled slots (ver's rollout ends, agents that leave early) into "
        "fewer trajectories for the learner, each piece followed by its bootstrap row, "
        "instead of padding each to --rollout steps (VER's sequence packing).",
    )
    learning_rate: float = _f(1e-4, "Adam learning rate.")
    lr_schedule: str = _f(
        "constant",
        "constant; linear_decay to 0 over --train_for_env_steps; kl_adaptive_minibatch "
        "or kl_adaptive_epoch: divided by 1.5 after a minibatch (or an epoch) whose KL from the "
        "acting policy is above twice --lr_schedule_kl_threshold, multiplied by 1.5 below half of it.",
        choices=["constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch"],
    )
    lr_schedule_kl_threshold: float = _f(
        0.008, "The KL the kl_adaptive schedules keep the updates near."
    )
    lr_adaptive_min: float = _f(1e-6, "The lowest learning rate of the kl_adaptive schedules.")
    lr_adaptive_max: float = _f(1e-2, "The highest learning rate of the kl_adaptive schedules.")
    adam_eps: float = _f(1e-6, "Adam epsilon.")
    adam_beta1: float = _f(0.9, "Adam beta1.")
    adam_beta2: float = _f(0.999, "Adam beta2.")
    max_grad_norm: float = _f(4.0, "Gradient norm clipping; 0 disables.")
    gamma: float = _f(0.99, "Discount factor.")
    with_vtrace: bool = _f(
        True, "V-trace off-policy correction (APPO); False uses GAE targets and advantages."
    )
    vtrace_rho: float = _f(
        1.0, "V-trace rho-bar: clip of the importance weight in the value targets."
    )
    vtrace_c: float = _f(1.0, "V-trace c-bar: clip of the trace-cutting coefficients.")
    vtrace_pg_rho: float = _f(
        1.0, "Clip of the importance weight in the V-trace policy-gradient advantage."
    )
    value_bootstrap: bool = _f(
        True,
        "At a time limit (gymnasium's truncated, VizDoom's episode timeout) bootstrap "
        "from the value of the episode's final observation; False treats it as a death (Sample "
        "Factory's default), which biases the value of every state near the limit.",
    )
    gae_lambda: float = _f(0.95, "GAE lambda (used with --with_vtrace False).")
    ppo_clip_ratio: float = _f(0.1, "PPO clip: ratio is kept in [1/(1+c), 1+c].")
    decoupled_ppo: bool = _f(
        False,
        "Take the ratio clip around the policy before a sample's first update in the "
        "batch, with importance weights for the acting policy (decoupled PPO); False: around the "
        "acting policy, which under APPO's lag is several updates older.",
    )
    ppo_clip_value: float = _f(
        1.0,
        "Value clip around the estimates before a sample's first update in the batch; 0 disables.",
    )
    value_loss_coeff: float = _f(0.5, "Weight of the value loss.")
    exploration_loss_coeff: float = _f(0.003, "Weight of the entropy bonus.")
    kl_loss_coeff: float = _f(
        0.0,
        "Weight of a penalty on KL(acting policy || current policy) per sample (PPO's "
        "fixed-KL penalty); holds each update near the policy that acted.",
    )
    rpo_alpha: float = _f(
        0.0,
        "Box actions: Robust Policy Optimization (Rahman & Xue 2022; CleanRL's "
        "rpo_continuous_action uses 0.5): the update takes the acted actions' log-probabilities "
        "under the Gaussian with its means shifted by noise from U(-alpha, alpha). 0: plain PPO.",
    )
    normalize_advantage: bool = _f(True, "Normalize advantages per minibatch.")
    normalize_input: bool | None = _f(
        None,
        "Normalize observations with a running per-element mean/std (learned "
        "by the learner). None (auto): on for vector observations, off for images "
        "(scaled by 1/255).",
    )
    normalize_returns: bool = _f(
        True,
        "The value head learns returns normalized by their running mean/std; V-trace "
        "and GAE see them in return units (the reported value stays in return units).",
    )
    reward_scale: float = _f(
        1.0, "Rewards are multiplied by this before learning (reported returns stay the env's own)."
    )
    reward_clip: float = _f(1000.0, "Scaled rewards are clipped to [-c, c].")
    scale_rewards: bool = _f(
        False,
        "Rewards are divided by the running std of the discounted return before learning "
        "(CleanRL's PPO, gymnasium's NormalizeReward; one set of statistics per policy); then "
        "--reward_scale and --reward_clip apply. Reported returns stay the env's own.",
    )

    # --- model
    encoder: str = _f(
        "auto",
        "auto (conv for images, mlp for vectors), conv, mlp, or the name of an encoder registered with "
        "asyncrl.register_encoder.",
    )
    encoder_source: str | None = _f(
        None,
        "Where a registered --encoder is defined: a module's name, or a script's path; importing it registers the "
        "encoder. A run records it by itself, for enjoy, export and asyncrl.load.",
    )
    encoder_conv_architecture: str = _f(
        "convnet_simple",
        "The conv encoder: convnet_simple (three convs, the last "
        "halving the map; ELU) or convnet_atari (the Nature DQN encoder; ReLU).",
        choices=["convnet_simple", "convnet_atari"],
    )
    encoder_mlp_layers: list = _f(
        [512, 512], "Hidden sizes of the MLP encoder, e.g. 256 256 or '[256, 256]'."
    )
    nonlinearity: str = _f(
        "auto",
        "The encoder's activation: elu, relu or tanh; auto: tanh in an MLP, the conv "
        "architecture's own in a conv encoder.",
        choices=["auto", "elu", "relu", "tanh"],
    )
    actor_critic_share_weights: bool = _f(
        True,
        "The actor and the critic share the encoder; False gives the critic "
        "an encoder of its own (needs --use_rnn False).",
    )
    critic_mlp_layers: list = _f(
        [],
        "Hidden sizes of the critic's own MLP with --actor_critic_share_weights False, "
        "e.g. 256 256 (a wider critic than actor); none given: --encoder_mlp_layers.",
    )
    initial_stddev: float = _f(
        1.0,
        "Box actions: the Gaussian policy's standard deviation at the start (each "
        "action dimension's log-std is learned from there).",
    )
    use_rnn: bool = _f(True, "Recurrent core after the encoder.")
    rnn_type: str = _f("gru", "gru or lstm.", choices=["gru", "lstm"])
    rnn_size: int = _f(512, "Hidden size of the recurrent core.")
    recurrence: int = _f(
        -1, "BPTT length in steps; must divide --rollout. -1: --rollout with an RNN, 1 without."
    )
    precision: str = _f(
        "auto",
        "float32, or bfloat16: learners run the encoder under bfloat16 autocast (float32 "
        "master weights, core and heads) and policy workers keep the model's weights in bfloat16 "
        "(outputs float32). auto: bfloat16 for a conv encoder on hardware with native bfloat16 (CPUs "
        "with AVX512-BF16/AMX, recent GPUs), else float32.",
        choices=["auto", "float32", "bfloat16"],
    )

    # --- remote envs (--env remote:HOST:PORT[,HOST:PORT...], served by `asyncrl env-server`)
    remote_reconnect: bool = _f(
        False,
        "When an env server cannot be reached, wait for it (its envs rejoin when it is "
        "back) while the other envs train; False: stop the run with one "
        "line (the checkpoint is kept).",
    )
    remote_timeout: float = _f(
        10.0,
        "Seconds an env server call may take before it counts as failed (safe calls are retried with backoff first).",
    )
    remote_auth_token_file: str | None = _f(
        None,
        "A file whose first line is the env servers' auth token (their --auth_token).",
        path=True,
    )
    remote_tls_ca_cert: str | None = _f(
        None,
        "PEM certificate (the servers' own or their CA's) to reach env servers over TLS.",
        path=True,
    )
    remote_agents: list = _f(
        [],
        "The agents of each remote env this run acts for (another run, or another client, "
        "acts for the rest: UDE's multi-client envs); []: all.",
    )
    env_side_channel: dict = _f(
        {},
        "Side-channel values sent to remote envs when they are opened, as JSON (e.g. "
        "'{\"difficulty\": 2}'); values are bool, int, float, str.",
    )

    # --- when to stop, what to save
    train_for_env_steps: int = _f(
        10_000_000_000, "Stop when every policy has this many env frames (frameskip included)."
    )
    train_for_seconds: float = _f(10_000_000_000, "Stop after this many seconds of this launch.")
    save_every_sec: float = _f(120, "Checkpoint interval in seconds.")
    keep_checkpoints: int = _f(2, "Checkpoints kept per policy (the newest).")
    save_milestones_sec: float = _f(
        -1,
        "Keep a checkpoint at least this many seconds apart for good, in "
        "checkpoint_p<id>/milestones/ (to evaluate the run's past later); -1: never.",
    )
    experiment_summaries_interval: float = _f(
        5, "Seconds between progress lines, TensorBoard points and stats.jsonl rows."
    )
    stats_avg: int = _f(100, "Episodes in the moving average of reported episode stats.")
    log_level: str = _f(
        "info",
        "The engine's log lines shown and written: debug, info, warning or error (the progress line is always shown).",
        choices=["debug", "info", "warning", "error"],
    )
    log_to_file: bool = _f(
        True, "Also write the engine's log lines, with their time, to <experiment>/log.txt."
    )
    with_wandb: bool = _f(
        False,
        "Also log the run to Weights & Biases (wandb): the TensorBoard scalars, the config "
        "and enjoy's replay videos; a resumed run goes on in the same wandb run.",
    )
    wandb_user: str | None = _f(
        None, "The wandb entity (user or team) of the run; None: your default one."
    )
    wandb_project: str = _f("asyncrl", "The wandb project of the run.")
    wandb_group: str | None = _f(
        None, "The wandb group of the run (e.g. the runs of one sweep); None: none."
    )
    wandb_job_type: str = _f("train", "The wandb job type of the run.")
    wandb_tags: list = _f([], "wandb tags of the run, e.g. doom baseline.")

    # --- evaluation during training
    eval_every_env_steps: int = _f(
        0,
        "Every this many env steps (frames) of a policy, an evaluator process plays "
        "--eval_episodes with its newest weights on fixed seeds: eval/ curves in "
        "TensorBoard, eval.jsonl, and best_checkpoint.pth by evaluation score; a run that reaches its limit "
        "evaluates its final weights too. 0: off.",
    )
    eval_episodes: int = _f(10, "Episodes per evaluation.")
    eval_deterministic: bool = _f(
        False,
        "Evaluate (and `asyncrl enjoy`) with the most likely action instead of a sampled one.",
    )

    # --- self-play against frozen past versions (multi-agent envs)
    selfplay_snapshot_every_env_steps: int = _f(
        0,
        "Every this many env steps of a policy, a frozen copy of its "
        "weights joins that policy's pool of past versions in shared memory "
        "(up to --selfplay_pool_size; the oldest is replaced). 0: no pool.",
    )
    selfplay_pool_size: int = _f(4, "Frozen past versions kept per policy.")
    selfplay_frozen_fraction: float = _f(
        0.5,
        "Fraction of a multi-agent env's episodes in which one learning policy "
        "plays against frozen past versions (once a pool holds any); their samples "
        "never reach a learner.",
    )
    matchmaking: str = _f(
        "uniform",
        "How frozen opponents are chosen: uniform, or rating (likelier the closer their "
        "skill rating to the learning policy's).",
        choices=["uniform", "rating"],
    )

    # --- per-policy hyperparameters and population-based training (Sample Factory's flags and defaults)
    policy_overrides: dict = _f(
        {},
        'Starting hyperparameters per policy, as JSON: \'{"1": {"learning_rate": '
        "1e-7}}'. Keys: learning_rate, exploration_loss_coeff, value_loss_coeff, "
        "max_grad_norm, ppo_clip_ratio, ppo_clip_value, gamma.",
    )
    with_pbt: bool = _f(
        False,
        "Population-based training: every --pbt_period_env_steps of the population's mean "
        "env steps, a policy in the bottom "
        "--pbt_replace_fraction copies a top policy's weights and optimizer state (in memory) and "
        "hyperparameters; every policy's hyperparameters mutate. Decisions go to "
        "<experiment>/pbt.jsonl.",
    )
    pbt_period_env_steps: int = _f(
        5_000_000,
        "The population's mean env steps between PBT decisions (each one decides for every policy).",
    )
    pbt_start_mutation: int = _f(
        20_000_000, "The first PBT decisions come once the population's mean env steps pass this."
    )
    pbt_replace_fraction: float = _f(
        0.3,
        "Fraction of the population (rounded up) that counts as bottom, and as top; in (0, 0.5].",
    )
    pbt_mutation_rate: float = _f(
        0.15, "Probability that each hyperparameter mutates at a PBT update."
    )
    pbt_replace_reward_gap: float = _f(
        0.1,
        "A bottom policy copies a top one only if the top one's objective is "
        "higher by this fraction of its magnitude (and by "
        "--pbt_replace_reward_gap_absolute).",
    )
    pbt_replace_reward_gap_absolute: float = _f(
        1e-6, "The least objective gap for a copy (see --pbt_replace_reward_gap)."
    )
    pbt_optimize_gamma: bool = _f(False, "Mutate gamma too (through 1 - gamma).")
    pbt_perturb_min: float = _f(
        1.1, "A mutation multiplies or divides a hyperparameter by U[min, max]."
    )
    pbt_perturb_max: float = _f(1.5, "See --pbt_perturb_min.")
    pbt_target_objective: str = _f(
        "true_objective",
        "The episode stat (info['episode_stats']) PBT ranks policies by, "
        "averaged over the last --stats_avg episodes; envs without it are ranked by return.",
    )

    # ------------------------------------------------------------------
    @property
    def experiment_dir(self) -> str:
        return os.path.join(self.train_dir, self.experiment)

    def env_kwargs(self) -> dict:
        """Keyword options for the env's constructor (`make_env(cfg.env, **cfg.env_kwargs())`)."""
        if self.env_frameskip is None:
            return dict(self.env_options)
        return {**self.env_options, "frameskip": self.env_frameskip}

    @property
    def bptt_len(self) -> int:
        if self.recurrence == -1:
            return self.rollout if self.use_rnn else 1
        return self.recurrence

    @property
    def envs_per_group(self) -> int:
        return self.num_envs_per_worker // self.worker_num_splits

    def validate(self) -> None:
        """All cross-field checks, in one place (the functions below). Raises ConfigError with a
        message that says how to fix it."""
        for check in (_check_values, _check_shapes, _check_population, _check_algo):
            check(self)

    @property
    def synchronous(self) -> bool:
        """ppo and ver: collection waits for each update (rollouts.py)."""
        return self.algo in SYNC_ALGOS

    def policy_hparams(self, policy_id: int) -> dict:
        """The starting values of a policy's own hyperparameters (PER_POLICY_HPARAMS): the flags, then
        --policy_overrides."""
        return {
            **{name: float(getattr(self, name)) for name in PER_POLICY_HPARAMS},
            **self.policy_overrides.get(str(policy_id), {}),
        }

    @property
    def frozen_pool_size(self) -> int:
        """Frozen past versions per policy in shared memory (0 without self-play snapshots)."""
        return self.selfplay_pool_size if self.selfplay_snapshot_every_env_steps else 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# --- the checks Config.validate makes
def _check_values(cfg: Config) -> None:
    """Each flag's own range."""
    if not cfg.env:
        raise ConfigError(
            "--env is required (e.g. --env CartPole-v1; `asyncrl envs` lists the registered ones)"
        )
    positive = [
        "num_workers",
        "num_envs_per_worker",
        "worker_num_splits",
        "num_policies",
        "rollout",
        "batch_size",
        "num_batches_per_epoch",
        "num_epochs",
        "rnn_size",
        "torch_threads",
        "keep_checkpoints",
        "stats_avg",
        "max_policy_lag",
    ]
    for name in positive:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"--{name} must be positive, got {getattr(cfg, name)}")
    if cfg.agents_per_env <= 0 and cfg.agents_per_env != -1:
        raise ConfigError(
            f"--agents_per_env must be positive or -1 (auto), got {cfg.agents_per_env}"
        )
    if cfg.policy_workers_per_policy <= 0 and cfg.policy_workers_per_policy != -1:
        raise ConfigError(
            f"--policy_workers_per_policy must be positive or -1 (auto), got {cfg.policy_workers_per_policy}"
        )
    if cfg.env_frameskip is not None and cfg.env_frameskip <= 0:
        raise ConfigError(f"--env_frameskip must be positive, got {cfg.env_frameskip}")
    parts = cfg.experiment.rstrip("/").split("/")
    if os.path.isabs(cfg.experiment) or any(part in ("", ".", "..") for part in parts):
        # the experiment's folder must lie inside --train_dir: restart empties it, and "" would be
        # train_dir itself
        raise ConfigError(
            f"--experiment must name a folder inside --train_dir (a name, or names joined by '/'), "
            f"got {cfg.experiment!r}"
        )
    if cfg.eval_every_env_steps < 0:
        raise ConfigError(
            f"--eval_every_env_steps must be >= 0 (0: no evaluation), got {cfg.eval_every_env_steps}"
        )
    if cfg.eval_every_env_steps and cfg.eval_episodes <= 0:
        raise ConfigError(f"--eval_episodes must be positive, got {cfg.eval_episodes}")
    if cfg.max_worker_restarts < 0:
        raise ConfigError(f"--max_worker_restarts must be >= 0, got {cfg.max_worker_restarts}")
    for name in [
        "env_step_timeout",
        "dist_timeout",
        "train_for_env_steps",
        "train_for_seconds",
        "save_every_sec",
        "experiment_summaries_interval",
        "initial_stddev",
    ]:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"--{name} must be positive, got {getattr(cfg, name)}")
    for name, (in_range, says) in HPARAM_RANGES.items():
        if not in_range(getattr(cfg, name)):
            raise ConfigError(f"--{name} must be {says}, got {getattr(cfg, name)}")
    if cfg.rpo_alpha < 0:
        raise ConfigError(f"--rpo_alpha must be >= 0 (0: plain PPO), got {cfg.rpo_alpha}")
    if not 0 < cfg.lr_adaptive_min <= cfg.lr_adaptive_max or cfg.lr_schedule_kl_threshold <= 0:
        raise ConfigError(
            f"--lr_adaptive_min and --lr_adaptive_max must satisfy 0 < min <= max and "
            f"--lr_schedule_kl_threshold must be positive, got {cfg.lr_adaptive_min}, "
            f"{cfg.lr_adaptive_max} and {cfg.lr_schedule_kl_threshold}"
        )
    if not 0 < cfg.preemption_threshold <= 1 or not 0 <= cfg.preemption_min_fraction <= 1:
        raise ConfigError(
            f"--preemption_threshold must be in (0, 1] and --preemption_min_fraction in [0, 1], got "
            f"{cfg.preemption_threshold} and {cfg.preemption_min_fraction}"
        )


def _check_shapes(cfg: Config) -> None:
    """Sizes that must fit together, and the lists and names a flag takes."""
    if cfg.num_envs_per_worker % cfg.worker_num_splits:
        raise ConfigError(
            f"--num_envs_per_worker ({cfg.num_envs_per_worker}) must be divisible by "
            f"--worker_num_splits ({cfg.worker_num_splits})"
        )
    if cfg.recurrence != -1 and (cfg.recurrence <= 0 or cfg.rollout % cfg.recurrence):
        raise ConfigError(
            f"--recurrence ({cfg.recurrence}) must divide --rollout ({cfg.rollout}), or be -1"
        )
    if not cfg.use_rnn and cfg.recurrence not in (-1, 1):
        raise ConfigError(
            f"--recurrence {cfg.recurrence} needs --use_rnn True (without an RNN it must be 1 or -1)"
        )
    if cfg.use_rnn and not cfg.actor_critic_share_weights:
        raise ConfigError(
            "--actor_critic_share_weights False needs --use_rnn False (a critic with a recurrent core "
            "of its own is not built)"
        )
    if cfg.use_rnn and cfg.shuffle_samples:
        raise ConfigError(
            "--shuffle_samples True needs --use_rnn False (a recurrent model learns from whole trajectories)"
        )
    if cfg.batch_size % cfg.rollout:
        raise ConfigError(
            f"--batch_size ({cfg.batch_size}) must be a multiple of --rollout ({cfg.rollout})"
        )
    slots_per_minibatch, rem = divmod(cfg.batch_size // cfg.rollout, cfg.num_batches_per_epoch)
    if rem or slots_per_minibatch == 0:
        raise ConfigError(
            f"--batch_size/--rollout ({cfg.batch_size // cfg.rollout} trajectories) must be a "
            f"multiple of --num_batches_per_epoch ({cfg.num_batches_per_epoch})"
        )
    for name in ("encoder_mlp_layers", "critic_mlp_layers"):
        if any(not isinstance(n, int) or n <= 0 for n in getattr(cfg, name)):
            raise ConfigError(f"--{name} must be a list of positive ints, got {getattr(cfg, name)}")
    if cfg.critic_mlp_layers and cfg.actor_critic_share_weights:
        raise ConfigError(
            "--critic_mlp_layers sizes the critic's own MLP: it needs --actor_critic_share_weights False"
        )
    if not (cfg.device in ("auto", "cpu", "cuda") or cfg.device.startswith("cuda:")):
        raise ConfigError(f"--device must be auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    if cfg.selfplay_snapshot_every_env_steps < 0 or cfg.selfplay_pool_size <= 0:
        raise ConfigError(
            "--selfplay_snapshot_every_env_steps must be >= 0 and --selfplay_pool_size positive"
        )
    if not 0 <= cfg.selfplay_frozen_fraction <= 1:
        raise ConfigError(
            f"--selfplay_frozen_fraction must be in [0, 1], got {cfg.selfplay_frozen_fraction}"
        )


def _check_population(cfg: Config) -> None:
    """Per-policy hyperparameters and population-based training."""
    for key, overrides in cfg.policy_overrides.items():
        if not (key.isdigit() and int(key) < cfg.num_policies):
            raise ConfigError(
                f"--policy_overrides: {key!r} is not a policy index (0..{cfg.num_policies - 1})"
            )
        if not isinstance(overrides, dict):
            raise ConfigError(
                f"--policy_overrides: policy {key} needs an object of hyperparameters, got {overrides!r}"
            )
        for name, value in overrides.items():
            if name not in PER_POLICY_HPARAMS:
                raise ConfigError(
                    f"--policy_overrides: unknown key {name!r} for policy {key}; per-policy keys: "
                    f"{', '.join(PER_POLICY_HPARAMS)}"
                )
            in_range, says = HPARAM_RANGES[name]
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError(
                    f"--policy_overrides: {name} of policy {key} must be a number, got {value!r}"
                )
            if not in_range(value):
                raise ConfigError(
                    f"--policy_overrides: {name} of policy {key} must be {says}, got {value!r}"
                )
    if not cfg.with_pbt:
        return
    if cfg.num_policies < 2:
        raise ConfigError("--with_pbt True needs a population: --num_policies 2 or more")
    if not 0 < cfg.pbt_replace_fraction <= 0.5:
        raise ConfigError(
            f"--pbt_replace_fraction must be in (0, 0.5] (bottom and top must not overlap), "
            f"got {cfg.pbt_replace_fraction}"
        )
    if not 0 <= cfg.pbt_mutation_rate <= 1:
        raise ConfigError(f"--pbt_mutation_rate must be in [0, 1], got {cfg.pbt_mutation_rate}")
    if not 1 < cfg.pbt_perturb_min <= cfg.pbt_perturb_max:
        raise ConfigError(
            f"--pbt_perturb_min/max must satisfy 1 < min <= max, got {cfg.pbt_perturb_min}, {cfg.pbt_perturb_max}"
        )
    if cfg.pbt_period_env_steps <= 0 or cfg.pbt_start_mutation < 0:
        raise ConfigError("--pbt_period_env_steps must be positive and --pbt_start_mutation >= 0")


def _check_algo(cfg: Config) -> None:
    """Options only asynchronous APPO has: with --algo ppo/ver one line that says which to drop (and
    the one option APPO lacks)."""
    if not cfg.synchronous:
        if cfg.preemption_rule == "optimal":
            raise ConfigError(
                "--preemption_rule optimal ends rollouts, which only --algo ppo and --algo ver have; "
                "use --preemption_rule ddppo with --algo appo"
            )
        return
    only_appo = [
        ("--with_vtrace True", cfg.with_vtrace),
        ("--num_policies > 1", cfg.num_policies > 1),
        ("--with_pbt True", cfg.with_pbt),
        ("--selfplay_snapshot_every_env_steps", cfg.selfplay_snapshot_every_env_steps > 0),
        ("--policy_workers_per_policy > 1", cfg.policy_workers_per_policy > 1),
        ("--remote_reconnect True", cfg.remote_reconnect),
    ]
    given = [name for name, used in only_appo if used]
    if given:
        raise ConfigError(
            f"--algo {cfg.algo} is synchronous and on-policy: {', '.join(given)} only works with "
            f"--algo appo; drop it or use --algo appo"
        )


class OneLineErrorParser(argparse.ArgumentParser):
    """Every command's parser: a bad flag is one line (a ConfigError), not argparse's usage
    block."""

    def error(self, message):
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def default_value(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def schema_defaults() -> dict:
    """Every field's default, by name."""
    return {f.name: default_value(f) for f in dataclasses.fields(Config)}


def experiment_dir_of(given: dict) -> str:
    """<train_dir>/<experiment> for the flags given (the defaults where not given)."""
    return os.path.join(
        given.get("train_dir", Config.train_dir), given.get("experiment", Config.experiment)
    )


def read_saved_config(experiment_dir: str) -> dict | None:
    """The config.json a run left in experiment_dir, or None if there is none; ConfigError if it is
    unreadable."""
    path = os.path.join(experiment_dir, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"cannot read {path} ({e}); fix or delete it, or use --restart_behavior restart"
        ) from None


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def _parse_json(kind):
    def parse(text: str):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise argparse.ArgumentTypeError(f"expected JSON, got {text!r}") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(f"expected a JSON {kind.__name__}, got {text!r}")
        return value

    return parse


def parse_int(text: str) -> int:
    """An integer, also as researchers write step counts: 1e6, 2.5e7, 1_000_000."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def _optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else parse_int(text)


def _optional_bool(text: str) -> bool | None:
    return None if text.lower() == "none" else parse_bool(text)


def _list_item(text: str):
    """One word of a list flag: JSON where it parses (a whole '[256, 256]', a number), else the word
    itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class _ListAction(argparse.Action):
    """A list flag takes JSON (--encoder_mlp_layers '[256, 256]') or words, as Sample Factory's
    (--encoder_mlp_layers 256 256)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(
            namespace,
            self.dest,
            values[0] if len(values) == 1 and isinstance(values[0], list) else values,
        )


_PARSERS = {
    "bool": parse_bool,
    "int": parse_int,
    "float": float,
    "str": str,
    "list": _list_item,
    "dict": _parse_json(dict),
    "int | None": _optional_int,
    "bool | None": _optional_bool,
    "str | None": str,
}


def add_config_arguments(parser: argparse.ArgumentParser, this_run: dict | None = None) -> None:
    """One flag per Config field. Defaults are suppressed so we can tell which flags the user gave.
    `this_run`: the values a command would run with, shown in the help where they differ from the
    defaults (an env's own, say)."""
    for f in dataclasses.fields(Config):
        default = default_value(f)
        differs = this_run is not None and this_run[f.name] != default
        as_list = dict(nargs="+", action=_ListAction) if f.type == "list" else {}
        parse = os.path.expanduser if f.metadata["path"] else _PARSERS[f.type]
        parser.add_argument(
            f"--{f.name}",
            type=parse,
            default=argparse.SUPPRESS,
            **as_list,
            choices=f.metadata.get("choices"),
            metavar=f.type.upper().removesuffix(" | NONE"),
            help=f"{f.metadata['help']} (default: {default}"
            + (f"; this run: {this_run[f.name]})" if differs else ")"),
        )


def algo_defaults(values: dict, world_size: int = 1) -> dict:
    """Fields whose default follows --algo: ppo and ver learn on-policy with GAE, and ppo's batch is every agent's
    --rollout steps (agents per env: 1 until the env says otherwise, which the runner then checks)."""
    if values["algo"] not in SYNC_ALGOS:
        return {}
    defaults = {"with_vtrace": False}
    # under torchrun --batch_size is the batch of all ranks together
    if values["algo"] == "ppo":
        defaults["batch_size"] = (
            values["num_workers"]
            * values["num_envs_per_worker"]
            * max(1, values["agents_per_env"])
            * values["rollout"]
            * world_size
        )
    return defaults
