"""A turn-based PettingZoo game for the tests (`--env tests.turn_envs:take_turns`)."""

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv

CHOICES = 4
MOVES = 4


class TakeTurns(AECEnv):
    """Two players take turns, MOVES moves each. The player to move sees a target among CHOICES
    (one-hot), how many moves it made (over MOVES) and an action mask allowing half the choices, the
    target among them; a hit scores 1, paid at the other player's next move (the last move's at the
    game's end). So every reward but the last arrives while its player waits for its turn: a player
    learns only if those rewards count for its own last move. An illegal move ends the game with -1
    for its player (episode_stats["illegal"] counts it). With `truncate` the game's normal end is a
    time limit, not a termination."""

    metadata = {"name": "take_turns", "is_parallelizable": False}
    possible_agents = ["first", "second"]

    def __init__(self, truncate: bool = False):
        self.truncate = truncate

    def observation_space(self, agent):
        return gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(0, 1, (CHOICES + 1,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (CHOICES,), np.int8),
            }
        )

    def action_space(self, agent):
        return gym.spaces.Discrete(CHOICES)

    def reset(self, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.moves = {a: 0 for a in self.agents}
        self.pending = {a: 0.0 for a in self.agents}
        self.illegal = 0
        self._turn("first")

    def _turn(self, agent: str) -> None:
        self.agent_selection = agent
        allowed = self.rng.permutation(CHOICES)[: CHOICES // 2]
        self.target = int(allowed[0])
        self.mask = np.isin(np.arange(CHOICES), allowed).astype(np.int8)

    def observe(self, agent):
        if agent != self.agent_selection:
            return {
                "observation": np.zeros(CHOICES + 1, np.float32),
                "action_mask": np.zeros(CHOICES, np.int8),
            }
        shown = np.append(np.eye(CHOICES, dtype=np.float32)[self.target], self.moves[agent] / MOVES)
        return {"observation": shown.astype(np.float32), "action_mask": self.mask.copy()}

    def step(self, action):
        mover = self.agent_selection
        if self.terminations[mover] or self.truncations[mover]:
            self._was_dead_step(action)
            return
        other = self.agents[1 - self.agents.index(mover)]
        self._cumulative_rewards[mover] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}
        # the other's last move is paid now
        self.rewards[other] = self.pending[other]
        self.pending[other] = 0.0
        self.pending[mover] = float(action == self.target)
        self.moves[mover] += 1
        if not self.mask[action]:
            self.illegal += 1
            self.rewards[mover] = -1.0
            self._end(self.terminations)
        elif all(m == MOVES for m in self.moves.values()):
            self.rewards[mover] += self.pending[mover]
            self._end(self.truncations if self.truncate else self.terminations)
        else:
            self._turn(other)
        self._accumulate_rewards()

    def _end(self, ended: dict) -> None:
        for a in self.agents:
            ended[a] = True
            self.infos[a] = {"episode_stats": {"illegal": self.illegal}}


def take_turns(**options):
    return TakeTurns(**options)
