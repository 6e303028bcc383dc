"""Reward scaling by the running standard deviation of the discounted return (--scale_rewards): what CleanRL's PPO
and gymnasium's NormalizeReward wrapper do, at the rollout worker where each agent's return runs on across rollouts.

For each agent, R_t = gamma * R_{t-1} * (1 - done_{t-1}) + r_t, done: the episode ended with that step (terminated
or truncated, as OpenAI baselines' VecNormalize resets it; gymnasium's wrapper carries a terminal step's reward into
the next episode instead). The learner sees r_t / sqrt(Var[R] + eps), the variance over every R the worker has seen
(the rewards are divided, not centred). The statistics are the worker's own, over all its agents, kept for the
run's life in its process: a restarted worker or a resumed run estimates them anew.
"""

from __future__ import annotations

import numpy as np

from asyncrl.model import merge_moments


class RunningVariance:
    """Mean and variance of every value seen, merged a batch at a time, starting from one nearly weightless sample of
    mean 0 and variance 1 as gymnasium's RunningMeanStd does (and RunningNorm)."""

    def __init__(self):
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0

    def update(self, values: np.ndarray) -> None:
        if len(values):
            self.count, self.mean, self.var = merge_moments(self.count, self.mean, self.var, len(values),
                                                            values.mean(), values.var())


class ReturnStdScaling:
    def __init__(self, num_agents: int, gamma: float, epsilon: float = 1e-8):
        self.gamma, self.epsilon = gamma, epsilon
        self.returns = np.zeros(num_agents)  # R of each agent's episode so far
        self.ended = np.zeros(num_agents, bool)  # its last step ended the episode: R starts over
        self.stats = RunningVariance()

    def __call__(self, agents: np.ndarray, rewards: np.ndarray, ended: np.ndarray, stepped) -> np.ndarray:
        """The rewards the learner sees for one step of `agents` (local indices); `stepped` selects the agents that
        acted (the others' rewards are 0 and leave their returns as they are)."""
        acted = agents[stepped]
        self.returns[acted] = self.returns[acted] * self.gamma * ~self.ended[acted] + rewards[stepped]
        self.ended[acted] = ended[stepped]
        self.stats.update(self.returns[acted])
        return rewards / np.sqrt(self.stats.var + self.epsilon)


def unscaled(agents: np.ndarray, rewards: np.ndarray, ended: np.ndarray, stepped) -> np.ndarray:
    return rewards
