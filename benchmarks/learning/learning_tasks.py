"""The learning suites: each suite's tasks, budget, seeds and normalizing scores, and the reference
system that runs beside asyncrl. learning_suite.py runs them, learning_report.py reports them."""

from __future__ import annotations

import dataclasses

# CleanRL's score: its last this many training episodes
CLEANRL_LAST_EPISODES = 10


@dataclasses.dataclass(frozen=True)
class Peer:
    """A reference system run here beside asyncrl; its run files are
    results/learning/<suite>/<method>/."""

    # the name of its run files' folder, and its action of learning_suite.py
    method: str
    # how a report names it
    name: str
    # how one of its runs is scored
    scored_by: str
    # what its curve in a run file is
    curve: str


PEERS = {
    "cleanrl": Peer(
        "cleanrl",
        "CleanRL's script",
        f"the mean of its last {CLEANRL_LAST_EPISODES} training episodes",
        "its training episodes' returns",
    ),
    "samplefactory": Peer(
        "samplefactory",
        "Sample Factory 2.1.1",
        "evaluation episodes of its final policy (sampled actions), in the reward of VizDoom's own scenario file",
        "the mean training reward it logs, in its own scenario files' reward and shaping (health_gathering's pays "
        "0.01 a tic alive and 1 a medkit, so that curve runs near 0 on the plot's scale)",
    ),
}


@dataclasses.dataclass(frozen=True)
class Suite:
    # task (an asyncrl env) -> (low, high): a score is normalized as (score - low) / (high - low); a
    # low of None is the mean score of a random policy here (`random` runs), a high of None the
    # peer's mean score here
    tasks: dict
    # what low and high are
    normalized_by: str
    # per run
    env_steps: int
    # seeds 1..seeds
    seeds: int
    # evaluation episodes per run
    episodes: int = 10
    # the key in PEERS of the reference run beside asyncrl
    peer: str | None = None
    # task -> the env the peer trains, where its name differs
    peer_ids: dict = dataclasses.field(default_factory=dict)

    def peer_id(self, task: str) -> str:
        return self.peer_ids.get(task, task)


SUITES = {
    # CleanRL's ppo_continuous_action.py, mean at 1M steps over its seeds (gymnasium v4 tasks; its
    # benchmark page, docs/benchmark/ppo_continuous_action.md); Ant has no published row, so its
    # high is CleanRL's mean run here
    "mujoco": Suite(
        tasks={
            "mujoco_halfcheetah": (0.0, 1442.64),
            "mujoco_hopper": (0.0, 2382.86),
            "mujoco_walker2d": (0.0, 2287.95),
            "mujoco_ant": (0.0, None),
            "mujoco_humanoid": (0.0, 716.11),
        },
        normalized_by="CleanRL's ppo_continuous_action.py, its published mean return at 1M steps (Ant: its mean "
        "run here)",
        env_steps=1_000_000,
        seeds=5,
        peer="cleanrl",
        peer_ids={
            "mujoco_halfcheetah": "HalfCheetah-v4",
            "mujoco_hopper": "Hopper-v4",
            "mujoco_walker2d": "Walker2d-v4",
            "mujoco_ant": "Ant-v4",
            "mujoco_humanoid": "Humanoid-v4",
        },
    ),
    # Sample Factory's VizDoom example with its defaults, at the same env frames (frameskip 4
    # counted, as both count them); a score is in the reward of VizDoom's own scenario file (no
    # shaping, no scaling); 0 is a random policy's score here, 1 Sample Factory's mean score here
    "doom": Suite(
        tasks={
            "doom_basic": (None, None),
            "doom_defend_the_center": (None, None),
            "doom_health_gathering": (None, None),
            "doom_deadly_corridor": (None, None),
        },
        normalized_by="a random policy's mean score here (0) and Sample Factory 2.1.1's mean score here (1)",
        env_steps=1_000_000,
        seeds=3,
        # its VizDoom envs have asyncrl's names
        peer="samplefactory",
    ),
    # random and human scores of the DQN papers (Mnih et al., 2015), as the Atari 100k literature
    # uses them
    "atari": Suite(
        tasks={
            "atari_pong": (-20.7, 14.6),
            "atari_breakout": (1.7, 30.5),
            "atari_beam_rider": (363.9, 16926.5),
        },
        normalized_by="random and human scores (Mnih et al., 2015): 0 plays at random, 1 as the human tester",
        env_steps=2_000_000,
        seeds=3,
    ),
    # what the tests run: one task, two seeds, seconds each
    "smoke": Suite(
        tasks={"CartPole-v1": (None, 500.0)},
        normalized_by="a random policy's mean score here (0) and CartPole-v1's most return (1)",
        env_steps=10_000,
        seeds=2,
        episodes=3,
    ),
}
