"""The flags of what runs: the env, the folders, the seed and the device; the algorithm and
the ranks under torchrun."""

from __future__ import annotations

import os
from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag

# Synchronous (on-policy) algorithms: weights do not change while a rollout is collected (see
# policy_worker.py).
SYNC_ALGOS = ("ppo", "ver")
ALGOS = ("appo", *SYNC_ALGOS)


@dataclass
class RunFlags:
    """What to run and where"""

    env: str | None = flag(
        None, "Environment name: a registered asyncrl env (see `asyncrl envs`) or any gymnasium id."
    )
    experiment: str = flag(
        "default_experiment", "Experiment name; files go to <train_dir>/<experiment>/."
    )
    train_dir: str = flag("train_dir", "Root folder for experiments.", path=True)
    restart_behavior: str = flag(
        "resume",
        "resume: continue from the last checkpoint of this experiment; restart: delete it and start over.",
        choices=["resume", "restart"],
    )
    seed: int | None = flag(
        None,
        "Base random seed: each env's seed comes from (seed, worker, env), the model's "
        "initial weights and each process's sampling from it too. None: random.",
    )
    deterministic: bool = flag(
        False,
        "Make a run with processes a function of its --seed (on one machine, torch build and config: "
        "the same actions, updates, weights and learner stats at each train step). Envs step in lock-step "
        "rounds of --rollout steps; each update learns whole rounds in a fixed order; each round acts with the "
        "weights of a fixed earlier update (appo: one update behind, so sampling overlaps learning; ppo and ver: "
        "on-policy, ver's rollouts lock-step like ppo's). Several policies, rollout and policy workers are "
        "covered; self-play's frozen pool, PBT and torchrun are not. A worker restart, a resume and "
        "--train_for_seconds's end are timing: warned of. No --seed: one is drawn and saved in config.json.",
    )
    device: str = flag(
        "auto",
        "Device of the policy workers and learners: auto (cuda if available), cpu, cuda or cuda:N.",
    )
    serial_mode: bool = flag(
        False, "Run every component in the main process, in turn (for debugging and tests)."
    )
    sampler_only: bool = flag(
        False,
        "Collect experience without learning: learners count the samples and recycle the "
        "slots (a benchmark of sampling).",
    )
    torch_threads: int = flag(
        1,
        "torch threads per process (rollout/policy workers; learners too unless pinned to cores "
        "of their own); 1 avoids oversubscribing cores.",
    )
    tune: bool = flag(
        False,
        "Use the fastest sampling and learning flags `asyncrl tune` measured for this env on this "
        "machine (~/.cache/asyncrl/tune/<env>.json; tunes first if there are none). Flags you give win.",
    )
    set_workers_cpu_affinity: bool = flag(
        True,
        "Pin processes to cores: a CPU learner gets half the cores to itself, "
        "each rollout worker (and its VizDoom engines) one of the rest, round-robin.",
    )

    @property
    def experiment_dir(self) -> str:
        """<train_dir>/<experiment>: the run's folder."""
        return os.path.join(self.train_dir, self.experiment)


@dataclass
class AlgorithmFlags:
    """The algorithm, and the ranks under torchrun"""

    algo: str = flag(
        "appo",
        "appo: asynchronous PPO with V-trace (collection never waits for learning). ppo: "
        "synchronous PPO, every env steps exactly --rollout steps per update in lock-step (Sample Factory's "
        "--async_rl False). ver: synchronous PPO with variable experience rollouts (VER): each update "
        "learns from --batch_size steps of whichever envs produced them, so fast envs contribute more and "
        "slow ones do not hold them back. ppo and ver learn on-policy (weights "
        "fixed during collection) with GAE.",
        choices=list(ALGOS),
    )

    preemption_rule: str = flag(
        "ddppo",
        "Under torchrun, when a rank stops collecting for an update. ddppo: DD-PPO's "
        "straggler rule (--preemption_threshold). optimal (--algo ppo/ver): VER's estimate: "
        "every rank stops at the collection time that maximises the steps all ranks collect per "
        "second of an update, from their rates in the last update and the time learning took.",
        choices=["ddppo", "optimal"],
    )
    preemption_threshold: float = flag(
        0.6,
        "Under torchrun (DD-PPO's straggler rule): once this fraction of the ranks "
        "has collected its batch for an update, the others stop collecting as soon as "
        "they hold --preemption_min_fraction of theirs, and "
        "learn from that. 1: never preempt.",
    )
    preemption_min_fraction: float = flag(
        0.25, "The least fraction of its batch a rank collects before it may be preempted."
    )
    dist_timeout: float = flag(
        30.0,
        "Under torchrun (several ranks): seconds a rank waits for the others in a "
        "collective (the gradient all-reduce) before it declares one dead and stops the run.",
    )

    @property
    def synchronous(self) -> bool:
        """ppo and ver: collection waits for each update (rollouts.py)."""
        return self.algo in SYNC_ALGOS
