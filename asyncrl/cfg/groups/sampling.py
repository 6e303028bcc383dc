"""The flags of sampling: the rollout workers, their envs, the policy workers."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag


@dataclass
class SamplingFlags:
    """Sampling: rollout workers, their envs, policy workers"""

    num_workers: int = flag(2, "Rollout worker processes.")
    num_envs_per_worker: int = flag(
        4, "Envs per rollout worker, split into --worker_num_splits groups stepped alternately."
    )
    worker_num_splits: int = flag(
        2,
        "Env groups per rollout worker (2 = double-buffered sampling: one group simulates "
        "while the other's actions are computed).",
    )
    num_policies: int = flag(
        1, "Policies trained at once; each agent's episode is assigned to one of them at random."
    )
    pbt_mix_policies_in_one_env: bool = flag(
        True,
        "In a multi-agent env, each agent draws its own policy per episode; "
        "False: all agents of an env play an episode with one policy.",
    )
    agents_per_env: int = flag(
        -1,
        "Agents in each env: -1 (auto) takes the env's own count (1 for a gymnasium env, its "
        "possible_agents for a PettingZoo env); another value must equal it (a check that --env "
        "is the env you mean).",
    )
    policy_workers_per_policy: int = flag(
        -1,
        "Inference processes per policy. -1 (auto): 1, or 2 when nothing learns on "
        "the CPU (--sampler_only on a CPU), where one single-threaded policy worker "
        "cannot use the cores a learner would take; next to a CPU learner a second one "
        "would take the learner's core; none with --worker_inference.",
    )
    worker_inference: bool = flag(
        False,
        "Each rollout worker acts for its own env groups with its own copy of the model on the "
        "CPU (the learner's weights read from shared memory), in place of policy worker processes: "
        "no hand-off between processes at each step, which for a cheap env and a small model costs "
        "more than the forward pass. --algo appo without --deterministic; an env's default True gives way "
        "to --algo ppo/ver, --deterministic and a --policy_workers_per_policy count.",
    )
    rollout: int = flag(
        32, "Length of a trajectory slot: env steps per agent sent to the learner at once."
    )
    max_policy_lag: int = flag(
        100,
        "Samples more than this many policy versions older than the learner are masked from the loss.",
    )
    env_frameskip: int | None = flag(
        None,
        "Env frames per agent step (the action repeats; VizDoom's default is 4). None: the env's default.",
    )
    env_options: dict = flag(
        {}, "Extra keyword options for the env's constructor, as JSON (e.g. '{\"step_us\": 500}')."
    )
    env_backend: str = flag(
        "per_env",
        "How a rollout worker steps an env group. per_env: each env in turn, in "
        "Python. vector: the group as one vector env, all its envs in one call (e.g. in ALE's C++ "
        "threads): for envs that have one (atari_<game>, gymnasium ids, a factory's make_vector).",
        choices=["per_env", "vector"],
    )

    env_step_timeout: float = flag(
        60.0,
        "A rollout worker stuck this many seconds (an env step or reset hangs) is killed and the workers restart.",
    )
    max_worker_restarts: int = flag(
        10,
        "Rollout/policy worker restarts allowed within 5 minutes; one more stops the run with an error.",
    )

    @property
    def envs_per_group(self) -> int:
        return self.num_envs_per_worker // self.worker_num_splits

    def env_kwargs(self) -> dict:
        """Keyword options for the env's constructor (`make_env(cfg.env, **cfg.env_kwargs())`)."""
        if self.env_frameskip is None:
            return dict(self.env_options)
        return {**self.env_options, "frameskip": self.env_frameskip}
