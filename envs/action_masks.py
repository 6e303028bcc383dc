"""Action masks: an env's mask of the actions allowed now, from its info or its Dict observation,
carried in the observation the engine stores (ObservationWithActionMask)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from asyncrl.envs.observations import ObservedWithInfo, flat_space, flatten, is_flattenable
from asyncrl.envs.registry import EnvError

# the key of an env's action mask: in a Dict observation, or in the info dict
ACTION_MASK = "action_mask"


class ObservationWithActionMask(gym.spaces.Box):
    """A float32 vector observation whose last `mask_size` entries are the env's action mask: 1 for
    each action the agent may take now, 0 for the others (for MultiDiscrete actions each dimension's
    choices one after another). The model keeps its policy off the illegal actions
    (distributions.legal_logits); its encoder sees the mask as features too. The mask travels inside
    the observation, so shared memory, the learner's batches, remote envs and the ONNX graph carry
    it as they carry observations."""

    def __init__(self, features: gym.spaces.Box, mask_size: int):
        low, high = (
            np.concatenate([bound.ravel(), np.full(mask_size, value)]).astype(np.float32)
            for bound, value in ((features.low, 0), (features.high, 1))
        )
        super().__init__(low, high, dtype=np.float32)
        self.mask_size = mask_size


class ActionMaskInObservation(ObservedWithInfo, gym.utils.RecordConstructorArgs):
    """An env's action mask appended to its observation, flattened into one vector
    (ObservationWithActionMask). The mask comes from a Dict observation's "action_mask" entry
    (Sample Factory's and PettingZoo's convention), or, with from_info, from info["action_mask"] at
    every reset and step (gymnasium's Taxi); a step without one allows every action."""

    def __init__(self, env: gym.Env, name: str, from_info: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, name=name, from_info=from_info)
        gym.Wrapper.__init__(self, env)
        self.from_info = from_info
        self.features, self.observation_space = masked_observation_space(
            name, env.observation_space, env.action_space, from_info
        )

    def _observe(self, obs, info: dict) -> np.ndarray:
        mask_size = self.observation_space.mask_size
        if self.from_info:
            return observe_with_mask(self.features, obs, info.get(ACTION_MASK), mask_size)
        return observe_with_mask(self.features, *split_mask(obs), mask_size)


def has_action_mask(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces


def split_mask(parts: dict, as_dict=dict) -> tuple:
    """(features, mask) of a Dict observation or of its space's entries: the one other entry, or the
    others as one as_dict."""
    rest = {key: part for key, part in parts.items() if key != ACTION_MASK}
    return (next(iter(rest.values())) if len(rest) == 1 else as_dict(rest)), parts[ACTION_MASK]


def masked_observation_space(
    name: str, space: gym.Space, action_space: gym.Space, from_info: bool = False
) -> tuple[gym.Space, ObservationWithActionMask]:
    """(the space of the observation's features, the vector space of features and mask) of an env
    whose mask is in its Dict observation, or in its info (from_info). EnvError if the features
    cannot be one vector or the actions take no mask."""
    features = space if from_info else split_mask(space.spaces, gym.spaces.Dict)[0]
    mask_size = mask_size_of(name, action_space)
    if not is_flattenable(features):
        raise EnvError(
            f"env {name!r}: an action mask beside the observation {features} is not supported yet (a "
            f"vector observation, or discrete and composite ones without images)"
        )
    return features, ObservationWithActionMask(flat_space(features), mask_size)


def mask_size_of(name: str, action_space: gym.Space) -> int:
    """The entries of an action mask for these actions (each categorical dimension's choices);
    EnvError if the actions take no mask."""
    sizes = categorical_sizes(action_space)
    if sizes is None:
        raise EnvError(
            f"env {name!r}: an action mask needs Discrete, 1-D MultiDiscrete or MultiBinary actions, not {action_space}"
        )
    return sum(sizes)


def observe_with_mask(features: gym.Space, obs, mask, mask_size: int) -> np.ndarray:
    """The observation's features and its mask as one float32 vector."""
    return np.concatenate([flatten(features, obs), mask_vector(mask, mask_size)])


def mask_vector(mask, mask_size: int) -> np.ndarray:
    """An env's action mask as mask_size floats (None: every action allowed; a tuple: one array per
    action dimension)."""
    if mask is None:
        mask = np.ones(mask_size, np.float32)
    elif isinstance(mask, (tuple, list)):
        mask = np.concatenate([np.ravel(part) for part in mask])
    mask = np.asarray(mask, np.float32).ravel()
    if mask.size != mask_size:
        raise EnvError(
            f"the env's action mask has {mask.size} entries, and its actions {mask_size} choices"
        )
    return mask


def categorical_sizes(space: gym.Space) -> list[int] | None:
    """The sizes of the categorical distributions an action is drawn from: [n] for Discrete, one per
    dimension for a 1-D MultiDiscrete or MultiBinary (drawn independently, Sample Factory's and
    CleanRL's factorized policy); None for anything else (a Box's actions are a Gaussian's)."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if (
        isinstance(space, gym.spaces.MultiDiscrete)
        and len(space.shape) == 1
        and not space.start.any()
    ):
        return space.nvec.tolist()
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return [2] * space.shape[0]
    return None
