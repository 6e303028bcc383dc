"""Reward scaling by the running standard deviation of the discounted return (--scale_rewards): what
CleanRL's PPO and gymnasium's NormalizeReward wrapper do, with one set of statistics per policy.

Each rollout worker runs every agent's discounted return on across rollouts, R_t = gamma * R_{t-1} * (1 - done_{t-1})
+ r_t (done: the episode ended with that step, terminated or truncated, as OpenAI baselines' VecNormalize resets it;
gymnasium's wrapper carries a terminal step's reward into the next episode instead), and writes it beside the step's
reward (buffers.traj_discounted_returns). The policy's learner merges a batch's R into running moments kept with the
model (ActorCritic.reward_std: in checkpoints and PBT's copies, the same on every DD-PPO rank) and learns from
r_t / sqrt(Var[R] + eps) (divided, not centred), before --reward_scale and --reward_clip. One set for all of a
policy's workers: with a set per worker, the same step's reward was scaled differently by each (on Hopper two workers'
own statistics learned ~950 less than the defaults, where one worker's learned as much).
"""

from __future__ import annotations

import numpy as np


class DiscountedReturns:
    def __init__(self, num_agents: int, gamma: float, out: np.ndarray):
        # out: traj_discounted_returns [S, T]
        self.gamma = gamma
        self.out = out
        # R of each agent's episode so far
        self.returns = np.zeros(num_agents)
        # its last step ended the episode: R starts over
        self.ended = np.zeros(num_agents, bool)

    def __call__(
        self,
        agents: np.ndarray,
        rewards: np.ndarray,
        ended: np.ndarray,
        stepped,
        slots: np.ndarray,
        steps: np.ndarray,
    ) -> None:
        """One step of `agents` (local indices; `stepped` selects those that acted, the others keep
        their R): R_t goes to each acting agent's (slot, step)."""
        acted = agents[stepped]
        self.returns[acted] = (
            self.returns[acted] * self.gamma * ~self.ended[acted] + rewards[stepped]
        )
        self.ended[acted] = ended[stepped]
        self.out[slots[stepped], steps[stepped]] = self.returns[acted]


def untracked(agents, rewards, ended, stepped, slots, steps) -> None:
    """Without --scale_rewards: nothing to record."""
