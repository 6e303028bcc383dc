"""Envs with MultiDiscrete and MultiBinary actions for the tests (`--env
tests.action_envs:multi_discrete`)."""

import gymnasium as gym
import numpy as np

EPISODE_STEPS = 16


class MatchTargets(gym.Env):
    """Each step shows a random target per action dimension (one-hot); the reward is the share of
    dimensions whose action hits its target, so a policy must learn every dimension, each from its
    own part of the observation."""

    def __init__(self, action_space: gym.Space):
        self.action_space = action_space
        self.sizes = (
            [2] * action_space.n
            if isinstance(action_space, gym.spaces.MultiBinary)
            else action_space.nvec.tolist()
        )
        self.observation_space = gym.spaces.Box(0, 1, (sum(self.sizes),), np.float32)

    def _observe(self):
        self.targets = [int(self.np_random.integers(n)) for n in self.sizes]
        obs = np.zeros(sum(self.sizes), np.float32)
        obs[np.cumsum([0] + self.sizes[:-1]) + self.targets] = 1
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        reward = float(np.mean(np.asarray(action) == self.targets))
        self.t += 1
        return self._observe(), reward, False, self.t >= EPISODE_STEPS, {}


def multi_discrete(**options):
    return MatchTargets(gym.spaces.MultiDiscrete([3, 4]))


def multi_binary(**options):
    return MatchTargets(gym.spaces.MultiBinary(3))


class LegalMoves(gym.Env):
    """Each step allows a random half of the choices of each action dimension (the action mask) and
    shows one allowed choice per dimension as its target (one-hot); the reward is the share of
    dimensions that hit their target. An illegal action ends the episode with reward -1 and counts
    in episode_stats["illegal"]: with the mask kept, none is taken, from the first step on. The mask
    is in a Dict observation (its "action_mask" entry, Sample Factory's and PettingZoo's
    convention), or with mask_in_info in info["action_mask"] (gymnasium's Taxi's)."""

    def __init__(self, action_space: gym.Space, mask_in_info: bool = False):
        self.action_space = action_space
        self.mask_in_info = mask_in_info
        self.sizes = (
            [int(action_space.n)]
            if isinstance(action_space, gym.spaces.Discrete)
            else action_space.nvec.tolist()
        )
        targets = gym.spaces.Box(0, 1, (sum(self.sizes),), np.float32)
        mask = gym.spaces.Box(0, 1, (sum(self.sizes),), np.int8)
        self.observation_space = (
            targets if mask_in_info else gym.spaces.Dict({"targets": targets, "action_mask": mask})
        )

    def _observe(self):
        self.masks = []
        self.targets = []
        for n in self.sizes:
            allowed = self.np_random.permutation(n)[: max(1, n // 2)]
            self.masks.append(np.isin(np.arange(n), allowed).astype(np.int8))
            self.targets.append(int(allowed[0]))
        shown = np.concatenate(
            [np.eye(n, dtype=np.float32)[t] for n, t in zip(self.sizes, self.targets)]
        )
        mask = np.concatenate(self.masks)
        if self.mask_in_info:
            return shown, {"action_mask": mask}
        return {"targets": shown, "action_mask": mask}, {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.illegal = 0
        return self._observe()

    def step(self, action):
        action = np.atleast_1d(action)
        self.t += 1
        if not all(mask[a] for mask, a in zip(self.masks, action)):
            obs, info = self._observe()
            return obs, -1.0, True, False, {**info, "episode_stats": {"illegal": 1}}
        reward = float(np.mean(action == self.targets))
        obs, info = self._observe()
        truncated = self.t >= EPISODE_STEPS
        return (
            obs,
            reward,
            False,
            truncated,
            {**info, **({"episode_stats": {"illegal": 0}} if truncated else {})},
        )


def legal_moves(**options):
    return LegalMoves(gym.spaces.MultiDiscrete([4, 6]))


gym.register(
    "LegalMovesInInfo-v0", entry_point=lambda **options: LegalMoves(gym.spaces.Discrete(6), True)
)
