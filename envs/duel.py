"""grid_duel: a small two-player shooting duel (PettingZoo's parallel API), for self-play that
learns in minutes.

Two agents on a size x size grid. Actions: 0 wait, 1-4 face up/down/left/right and step that way (a step off the
grid or onto the other agent only turns), 5 shoot along the facing direction. A shot hits the other agent if it is
anywhere ahead on the same row or column: the shooter wins (+1, the other -1, episode over); two hits in the same
step are a draw (0). After `max_steps` the episode is truncated as a draw. Observations (per agent, its own view):
its position, the other's position relative to it, both facings (one-hot) and the time left, as 13 floats.
info["episode_stats"] has "win" (1, 0.5 for a draw, 0) and "true_objective" (the same, for PBT and ratings).

`scripted_action(agent)` is a fixed opponent for evaluation (never for training): it lines up with
the other agent, turns to face it, and shoots once it has had it in its line of fire for
REACTION_STEPS step ends (a reaction time a quick learner can beat; a random player wins under 10%
of games against it).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from asyncrl.envs.gym_adapter import VECTOR_ENV_DEFAULTS
from asyncrl.envs.multi_agent import ParallelEnvBase
from asyncrl.envs.registry import EnvError, register_env

# facing direction -> (dx, dy)
MOVES = {1: (0, -1), 2: (0, 1), 3: (-1, 0), 4: (1, 0)}
SHOOT = 5
# the scripted opponent shoots once it has had the other agent in its line of fire this long
REACTION_STEPS = 2
# one object per agent (PettingZoo's API test)
OBSERVATION_SPACE = gym.spaces.Box(-1.0, 1.0, (13,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(6)


class GridDuel(ParallelEnvBase):
    metadata = {"name": "grid_duel", "render_modes": []}

    def __init__(self, size: int = 7, max_steps: int = 40):
        if size < 3 or max_steps < 1:
            raise EnvError(f"grid_duel: size {size} must be >= 3 and max_steps {max_steps} >= 1")
        self.size = size
        self.max_steps = max_steps
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.pos = {a: np.zeros(2, np.int64) for a in self.possible_agents}
        self.facing = {a: 1 for a in self.possible_agents}
        # steps in line of fire (the scripted one's reaction)
        self.aimed_for = {a: 0 for a in self.possible_agents}
        self.t = 0

    def observation_space(self, agent):
        return OBSERVATION_SPACE

    def action_space(self, agent):
        return ACTION_SPACE

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        cells = self.rng.choice(self.size * self.size, size=2, replace=False)
        for a, cell in zip(self.possible_agents, cells):
            self.pos[a] = np.array(divmod(int(cell), self.size))[::-1].copy()
            self.facing[a] = int(self.rng.integers(1, 5))
            self.aimed_for[a] = 0
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        hits = {a: int(actions[a]) == SHOOT and self._in_line_of_fire(a) for a in self.agents}
        if not any(hits.values()):
            for a in self.agents:
                if int(actions[a]) in MOVES:
                    self._move(a, int(actions[a]))
        for a in self.agents:
            self.aimed_for[a] = self.aimed_for[a] + 1 if self._in_line_of_fire(a) else 0
        a, b = self.possible_agents
        over = hits[a] or hits[b]
        wins = {a: 0.5, b: 0.5} if hits[a] == hits[b] else {a: float(hits[a]), b: float(hits[b])}
        rewards = {x: (2 * wins[x] - 1) if over else 0.0 for x in self.agents}
        truncated = not over and self.t >= self.max_steps
        ended = over or truncated
        infos = {
            x: {"episode_stats": {"win": wins[x], "true_objective": wins[x]}} if ended else {}
            for x in self.agents
        }
        obs = {x: self._observe(x) for x in self.agents}
        terminations = {x: over for x in self.agents}
        truncations = {x: truncated for x in self.agents}
        if ended:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def scripted_action(self, agent: str) -> int:
        """The evaluation opponent (see the module docstring)."""
        other = self._other(agent)
        d = self.pos[other] - self.pos[agent]
        if self._in_line_of_fire(agent):
            return SHOOT if self.aimed_for[agent] >= REACTION_STEPS else 0
        # lined up: turn (and step) towards it
        if d[0] == 0 or d[1] == 0:
            return self._direction(np.sign(d))
        # close the smaller gap to line up sooner
        axis = 0 if abs(d[0]) <= abs(d[1]) else 1
        step = np.zeros(2, np.int64)
        step[axis] = np.sign(d[axis])
        return self._direction(step)

    # --- the rules
    def _other(self, agent: str) -> str:
        return self.possible_agents[1 - self.possible_agents.index(agent)]

    def _in_line_of_fire(self, agent: str) -> bool:
        d = self.pos[self._other(agent)] - self.pos[agent]
        fx, fy = MOVES[self.facing[agent]]
        return (fx != 0 and d[1] == 0 and np.sign(d[0]) == fx) or (
            fy != 0 and d[0] == 0 and np.sign(d[1]) == fy
        )

    def _move(self, agent: str, action: int) -> None:
        self.facing[agent] = action
        target = self.pos[agent] + MOVES[action]
        if (
            (0 <= target).all()
            and (target < self.size).all()
            and not (target == self.pos[self._other(agent)]).all()
        ):
            self.pos[agent] = target

    @staticmethod
    def _direction(step: np.ndarray) -> int:
        return next(action for action, move in MOVES.items() if tuple(step) == move)

    def _observe(self, agent: str) -> np.ndarray:
        other = self._other(agent)
        scale = self.size - 1
        return np.concatenate(
            [
                self.pos[agent] / scale,
                (self.pos[other] - self.pos[agent]) / scale,
                np.eye(4)[self.facing[agent] - 1],
                np.eye(4)[self.facing[other] - 1],
                [1 - self.t / self.max_steps],
            ]
        ).astype(np.float32)


register_env(
    "grid_duel",
    lambda **options: GridDuel(**options),
    "two-player grid shooting duel (PettingZoo) for self-play; scripted opponent for evaluation",
    {**VECTOR_ENV_DEFAULTS, "selfplay_snapshot_every_env_steps": 50_000, "gamma": 0.98},
)
