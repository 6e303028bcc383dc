"""Who acts at a step of an env's episode, chosen once per rollout worker from its env backend:
every agent in its episode (EveryAgent), or in a turn-based game only the agent whose turn it is
(TakingTurns; the env is a multi_agent.TurnBasedAgents, e.g. a PettingZoo classic board game).

In a turn-based game an agent's sample is one of its own moves: its row t holds what it saw and did
at its turn, and every reward until its next turn. While it waits, no player acts for it (its
agent_player is NO_PLAYER: no policy computes its action), its row stays where it is, and each
turn's observation refreshes that row, so it holds the agent's view when its turn comes. What the
others' turns give it (a reward, the episode's end) is credited to its last move, and its full slot
goes to the learner only once its turn comes, when that move's outcome is all in.
"""

from __future__ import annotations

import numpy as np

from asyncrl.core.buffers import NO_PLAYER


class EveryAgent:
    """Every agent in its episode acts at every step: nobody ever waits (the rollout worker's hot
    path: nothing here costs more than the step itself needs)."""

    def action_steps(self, steps: np.ndarray) -> np.ndarray:
        """The rows that hold the agents' actions for the next step."""
        return steps

    def obs_rows(self, local: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The rows a step's observations go to: the next row of each agent that acts."""
        return steps + 1

    def stepped(self, local: np.ndarray, playing: list):
        """Those that took the step: the agents in their episode whose env did not raise (all of
        them: a slice)."""
        return slice(None) if all(playing) else np.array(playing)

    def credit(self, local, slots, steps, rewards, terminal, playing) -> None:
        pass

    def update(self, group: int) -> None:
        pass

    def ready(self, local: np.ndarray, full: np.ndarray) -> np.ndarray:
        """Of the agents whose slot is full, those whose slot goes to the learner now."""
        return full


class TakingTurns:
    """A turn-based game: after every step and reset, the backend says who waits for its turn. It
    reads the worker's shared buffers and its per-agent arrays (`playing`: in its episode, `player`:
    who plays it this episode)."""

    def __init__(
        self,
        rollout: int,
        backend,
        shared,
        group_agents: list,
        group_local: list,
        playing: np.ndarray,
        player: np.ndarray,
    ):
        self.rollout = rollout
        self.backend = backend
        self.shared = shared
        self.group_agents = group_agents
        self.group_local = group_local
        self.playing = playing
        self.player = player
        # per local agent: in its episode, another agent acts next
        self.waits = np.zeros(len(playing), bool)

    def action_steps(self, steps: np.ndarray) -> np.ndarray:
        """A waiting agent's row may be past its full slot's last step: it has no action there, and
        needs none."""
        return np.minimum(steps, self.rollout - 1)

    def obs_rows(self, local: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """A waiting agent's observation refreshes its current row: it holds the agent's view when
        its turn comes."""
        return steps + ~self.waits[local]

    def stepped(self, local: np.ndarray, playing: list) -> np.ndarray:
        return np.array(playing) & ~self.waits[local]

    def credit(
        self,
        local: np.ndarray,
        slots: np.ndarray,
        steps: np.ndarray,
        rewards: np.ndarray,
        terminal: np.ndarray,
        playing: list,
    ) -> None:
        """What a turn gave the agents that waited in it counts for each one's last move: the row
        before its current one, if that move is of this episode (its row is not done).
        (--scale_rewards' running returns leave these rewards out.)"""
        waited = np.array(playing) & self.waits[local] & (steps > 0)
        slots = slots[waited]
        rows = steps[waited] - 1
        this_episode = ~self.shared.traj_dones[slots, rows]
        slots = slots[this_episode]
        rows = rows[this_episode]
        self.shared.traj_rewards[slots, rows] += rewards[waited][this_episode]
        self.shared.traj_dones[slots, rows] = terminal[waited][this_episode]

    def update(self, group: int) -> None:
        """After a group's step or reset: who waits at its next step, with nobody acting for it."""
        local = self.group_local[group]
        playing = self.playing[self.group_local[group]]
        self.waits[local] = self.backend.waiting(group) & playing
        self.shared.agent_player[self.group_agents[group]] = np.where(
            playing & ~self.waits[local], self.player[local], NO_PLAYER
        )

    def ready(self, local: np.ndarray, full: np.ndarray) -> np.ndarray:
        """A waiting agent's full slot goes once its turn comes: the turns before may still pay for
        its last move."""
        return full & ~self.waits[local]


def turns(
    cfg,
    backend,
    shared,
    group_agents: list,
    group_local: list,
    playing: np.ndarray,
    player: np.ndarray,
):
    """How a rollout worker's agents take their steps: TakingTurns where its backend's envs are
    turn-based."""
    if backend.turn_based:
        return TakingTurns(cfg.rollout, backend, shared, group_agents, group_local, playing, player)
    return EveryAgent()
