"""Gymnasium envs as the engine takes them: any gymnasium id, and every env's spaces checked, with
image observations made CHW uint8 once, here, not in the model."""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings

import gymnasium as gym
import numpy as np

from asyncrl.cfg.extras import require
from asyncrl.envs.registry import EnvEntry, EnvError, register_ale_ids


class ChannelsFirst(gym.ObservationWrapper):
    """HWC image observations -> CHW (a transposed view made contiguous once per step)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = channels_first(env.observation_space)

    def observation(self, observation):
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Discrete, MultiDiscrete, MultiBinary, Tuple and Dict observations (gymnasium's toy-text envs:
    FrozenLake, Taxi, Blackjack) as one float32 vector, each Discrete part one-hot, as gymnasium's
    spaces.flatten lays them out: an MLP's input."""

    def __init__(self, env: gym.Env):
        # so that gymnasium can remake the env from its spec
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        self.observation_space = flat_space(env.observation_space)

    def observation(self, observation):
        return flatten(self.env.observation_space, observation)


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


class ObservedWithInfo(gym.Wrapper):
    """A wrapper whose observation is made from the env's and the step's info (gymnasium's
    ObservationWrapper sees no info): `_observe(obs, info)` at every reset and step."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._observe(obs, info), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs, info), reward, terminated, truncated, info


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


class PackedObservation(gym.spaces.Box):
    """Images beside other entries (a Dict observation with an image; an image with an action mask)
    as one uint8 vector: each image's CHW bytes in turn, then, from a 4-byte boundary, the other
    entries as one float32 vector (gymnasium's spaces.flatten of them, in the Dict's order) whose
    last `mask_size` floats are the env's action mask. Shared memory, the learner's batches and the
    vector envs carry it as any uint8 observation, and the model reads its parts back as views
    (model.unpack_observation), as PufferLib's emulation packs structured observations into one
    buffer. `unpack` gives the parts by name: each image's key, and "vector"."""

    def __init__(
        self, image_shapes: dict[str, tuple[int, ...]], vector_size: int, mask_size: int = 0
    ):
        self.image_shapes = dict(image_shapes)
        self.vector_size = vector_size
        self.mask_size = mask_size
        ends = np.cumsum([0] + [int(np.prod(shape)) for shape in self.image_shapes.values()])
        self.image_offsets = ends[:-1].tolist()
        # a float32 view needs its first byte 4-aligned
        self.vector_offset = -(-int(ends[-1]) // 4) * 4
        super().__init__(0, 255, (self.vector_offset + 4 * vector_size,), np.uint8)

    def __repr__(self) -> str:
        return f"PackedObservation(images {self.image_shapes}, vector of {self.vector_size}, mask of {self.mask_size})"

    def pack(self, images: list[np.ndarray], vector: np.ndarray) -> np.ndarray:
        packed = np.zeros(self.shape, np.uint8)
        for offset, image in zip(self.image_offsets, images):
            packed[offset : offset + image.size] = image.ravel()
        packed[self.vector_offset :].view(np.float32)[:] = vector
        return packed

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Views of the parts of one observation or a batch [..., bytes]: each image [..., C, H, W]
        by its key, and the float32 "vector" [..., vector_size] (as the ONNX graph of `asyncrl
        export` takes them)."""
        lead = packed.shape[:-1]
        parts = {
            key: packed[..., offset : offset + int(np.prod(shape))].reshape(*lead, *shape)
            for (key, shape), offset in zip(self.image_shapes.items(), self.image_offsets)
        }
        parts["vector"] = np.ascontiguousarray(packed[..., self.vector_offset :]).view(np.float32)
        return parts

    def sample(self, *args, **kwargs) -> np.ndarray:
        """Random images and a standard normal vector (random bytes would read back as NaNs among
        the floats)."""
        images = [
            self.np_random.integers(0, 256, shape, dtype=np.uint8)
            for shape in self.image_shapes.values()
        ]
        return self.pack(
            images, self.np_random.standard_normal(self.vector_size).astype(np.float32)
        )


class ImagesAndVector:
    """Turns an env's observations with images beside other entries (and an action mask: in the
    Dict, or in the info with from_info) into a PackedObservation's: HWC images made CHW, the rest
    flattened, the mask after it."""

    def __init__(
        self, name: str, space: gym.Space, action_space: gym.Space, from_info: bool = False
    ):
        entries = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {"obs": space}
        self.images = [key for key, entry in entries.items() if is_image_space(entry)]
        self.to_chw = [is_hwc_image(entries[key]) for key in self.images]
        self.rest = gym.spaces.Dict(
            {
                key: entry
                for key, entry in entries.items()
                if key not in self.images and key != ACTION_MASK
            }
        )
        if not is_flattenable(self.rest):
            raise EnvError(
                f"env {name!r}: the observation entries {self.rest} beside its images cannot be one vector"
            )
        mask_size = mask_size_of(name, action_space) if from_info or ACTION_MASK in entries else 0
        self.from_info = from_info
        self.dict_obs = isinstance(space, gym.spaces.Dict)
        shapes = {
            key: channels_first(entries[key]).shape if chw else entries[key].shape
            for key, chw in zip(self.images, self.to_chw)
        }
        rest_size = gym.spaces.flatdim(self.rest) if self.rest.spaces else 0
        self.space = PackedObservation(shapes, rest_size + mask_size, mask_size)

    def observe(self, obs, info: dict | None = None) -> np.ndarray:
        entries = obs if self.dict_obs else {"obs": obs}
        images = [
            np.transpose(entries[key], (2, 0, 1)) if chw else entries[key]
            for key, chw in zip(self.images, self.to_chw)
        ]
        rest = {key: entries[key] for key in self.rest.spaces}
        vector = flatten(self.rest, rest) if rest else np.zeros(0, np.float32)
        if self.space.mask_size:
            mask = (info or {}).get(ACTION_MASK) if self.from_info else entries[ACTION_MASK]
            vector = np.concatenate([vector, mask_vector(mask, self.space.mask_size)])
        return self.space.pack(images, vector)


class PackImages(ObservedWithInfo, gym.utils.RecordConstructorArgs):
    """An env whose observations have images beside other entries, observed as a PackedObservation
    (ImagesAndVector)."""

    def __init__(self, env: gym.Env, name: str, from_info: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, name=name, from_info=from_info)
        gym.Wrapper.__init__(self, env)
        self.packer = ImagesAndVector(name, env.observation_space, env.action_space, from_info)
        self.observation_space = self.packer.space
        self._observe = self.packer.observe


def with_mask_from_info(env: gym.Env, name: str) -> gym.Env:
    """An env whose action mask comes in its info (gymnasium's Taxi), the mask appended to its
    observation (packed beside an image)."""
    return (PackImages if is_image_space(env.observation_space) else ActionMaskInObservation)(
        env, name, from_info=True
    )


def has_images_beside(space: gym.Space) -> bool:
    """A Dict observation with an image entry (it is packed: PackImages), not one of vectors
    alone."""
    return isinstance(space, gym.spaces.Dict) and any(map(is_image_space, space.spaces.values()))


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


def flat_space(space: gym.Space) -> gym.spaces.Box:
    """The float32 vector space of a flattenable one (is_flattenable)."""
    flat = gym.spaces.flatten_space(space)
    return gym.spaces.Box(
        flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
    )


def flatten(space: gym.Space, observation) -> np.ndarray:
    return gym.spaces.flatten(space, observation).astype(np.float32)


def is_flattenable(space: gym.Space) -> bool:
    """Observations that become one vector (FlatObservation, and a PettingZoo env's agents): of
    discrete parts and arrays, but no image (it would lose its layout)."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return True
    if isinstance(space, gym.spaces.Box):
        return not is_image_space(space)
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        return all(
            map(
                is_flattenable,
                space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces,
            )
        )
    return False


def channels_first(space: gym.spaces.Box) -> gym.spaces.Box:
    return gym.spaces.Box(
        np.transpose(space.low, (2, 0, 1)), np.transpose(space.high, (2, 0, 1)), dtype=np.uint8
    )


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def has_image(space: gym.Space) -> bool:
    """An image observation, or a Dict observation with one, packed or not (the engine's defaults
    then suit it, not a vector's)."""
    return is_image_space(space) or has_images_beside(space) or isinstance(space, PackedObservation)


def is_hwc_image(space: gym.Space) -> bool:
    return is_image_space(space) and space.shape[-1] in (1, 3, 4)


def adapt(name: str, env: gym.Env) -> gym.Env:
    """Any env as the engine takes it: spaces checked, HWC image observations turned CHW, discrete
    and composite ones flattened into a vector, an action mask in a Dict observation appended to the
    rest, images beside other entries packed with them into one observation (PackImages)."""
    if has_images_beside(env.observation_space):
        env = PackImages(env, name)
    elif has_action_mask(env.observation_space):
        env = ActionMaskInObservation(env, name)
    elif not isinstance(env.observation_space, gym.spaces.Box) and is_flattenable(
        env.observation_space
    ):
        env = FlatObservation(env)
    check_spaces(name, env.observation_space, env.action_space)
    return ChannelsFirst(env) if is_hwc_image(env.observation_space) else env


def check_spaces(name: str, obs: gym.Space, act: gym.Space) -> None:
    if not isinstance(obs, gym.spaces.Box):
        raise EnvError(
            f"env {name!r}: observation space {obs} is not supported yet (Box observations, and discrete "
            f"or composite ones without images, which gymnasium envs get flattened)"
        )
    if not (categorical_sizes(act) or isinstance(act, gym.spaces.Box) and len(act.shape) == 1):
        raise EnvError(
            f"env {name!r}: action space {act} is not supported yet (Discrete, 1-D MultiDiscrete or "
            f"MultiBinary, or 1-D Box)"
        )


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


def registered_id(gym_id: str) -> str:
    """The id of `gym_id` (or of gymnasium's `package:EnvId` form), once what registers it is
    imported (the package; ale-py for ALE/ ids), in whichever process makes the env; MuJoCo's
    warnings are routed (quiet_mujoco) first."""
    package, _, env_id = gym_id.rpartition(":")
    if package:
        importlib.import_module(package)
    if env_id.startswith("ALE/"):
        register_ale_ids()
    if env_id in gym.envs.registry and "mujoco" in str(gym.spec(env_id).entry_point):
        quiet_mujoco()
    return env_id


def quiet_mujoco() -> None:
    """MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working directory: send them to Python's
    warnings instead, less its deprecations of gymnasium's model files (mujoco 4's `settotalmass`:
    not the user's to act on, and gymnasium shows each once per process, so every rollout worker
    would print it)."""
    require("mujoco", "MuJoCo envs")
    try:
        import mujoco
    except Exception as e:  # noqa: BLE001 - mujoco loads the OpenGL library MUJOCO_GL names as it is imported
        raise EnvError(
            f"mujoco fails to import with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} ({type(e).__name__}: "
            f"{e}): unset MUJOCO_GL, or install that library (egl: libegl1, osmesa: libosmesa6)"
        ) from None

    def forward(message: str) -> None:
        if "deprecated" not in message:
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(forward)


def make_gym_env(gym_id: str, **options) -> gym.Env:
    registered_id(gym_id)
    try:
        env = gym.make(gym_id, **options)
    # an option the env's constructor does not take
    except TypeError as e:
        raise EnvError(f"env {gym_id!r} does not take the options {sorted(options)}: {e}") from None
    except (
        gym.error.DependencyNotInstalled
        # e.g. Box2D for LunarLander: gymnasium's message says what to install
    ) as e:
        raise EnvError(f"env {gym_id!r}: {e}") from None
    return env


# Vector-observation gymnasium envs (classic control, Box2D, MuJoCo): a small MLP, no RNN, many
# cheap envs per worker, and several PPO epochs per batch, since samples are cheap but learning from
# them is not.
VECTOR_ENV_DEFAULTS = {
    "use_rnn": False,
    "encoder_mlp_layers": [64, 64],
    "num_envs_per_worker": 16,
    "learning_rate": 1e-3,
    "num_epochs": 4,
    "num_batches_per_epoch": 4,
}
# Continuous control (any env with Box actions: MuJoCo, Box2D, classic control): Sample Factory's
# MuJoCo settings, synchronous PPO (its async_rl False) with a Gaussian policy and a learned log-std
# on a small tanh MLP, observations and returns normalized, GAE (without its --kl_loss_coeff 0.1: on
# Hopper it moved nothing past the seeds). The Gaussian starts at std 0.5, not 1.0, and learns 4
# epochs a batch, not 2, with a small entropy bonus (0.003) that keeps the std from collapsing
# before Hopper hops: every MuJoCo task in README's table learned more (each change measured in
# hopper_settings.md). Synchronous PPO's batch is every env's rollout (config.algo_defaults): 2
# workers x 16 envs x 64 steps = 2048.
CONTINUOUS_DEFAULTS = {
    **VECTOR_ENV_DEFAULTS,
    "algo": "ppo",
    "initial_stddev": 0.5,
    "rollout": 64,
    "num_epochs": 4,
    "num_batches_per_epoch": 4,
    "with_vtrace": False,
    "gae_lambda": 0.95,
    "gamma": 0.99,
    "ppo_clip_ratio": 0.2,
    "value_loss_coeff": 1.3,
    "exploration_loss_coeff": 0.003,
    "max_grad_norm": 3.5,
    "learning_rate": 0.00295,
    "lr_schedule": "linear_decay",
    "normalize_input": True,
    "normalize_returns": True,
    "value_bootstrap": True,
}
# Per-id additions: returns in the hundreds want scaled rewards for the value head to keep up.
GYM_ID_DEFAULTS = {"CartPole-v1": {"reward_scale": 0.1}, "CartPole-v0": {"reward_scale": 0.1}}


def gym_entry(gym_id: str):
    # the observation space decides the defaults; gymnasium envs are cheap to make
    probe = make_gym_env(gym_id)
    if isinstance(probe.action_space, gym.spaces.Box):
        defaults = dict(CONTINUOUS_DEFAULTS)
    else:
        defaults = {} if has_image(probe.observation_space) else dict(VECTOR_ENV_DEFAULTS)
    defaults.update(GYM_ID_DEFAULTS.get(gym_id, {}))
    # gymnasium's Taxi gives its action mask in the info
    mask_in_info = ACTION_MASK in probe.reset(seed=0)[1]
    probe.close()
    make_masked = (
        (lambda **options: with_mask_from_info(make_gym_env(gym_id, **options), gym_id))
        if mask_in_info
        else None
    )
    return EnvEntry(
        make_masked or (lambda **options: make_gym_env(gym_id, **options)),
        f"gymnasium {gym_id}",
        defaults,
        lambda num_envs, **options: make_gym_vector(gym_id, num_envs, make_masked, **options),
    )


def make_gym_vector(
    gym_id: str, num_envs: int, make_masked=None, **options
) -> gym.vector.VectorEnv:
    """num_envs of a gymnasium id as one vector env: its own vector implementation if it has one
    (e.g. CartPole's), else gymnasium's SyncVectorEnv of the envs this module adapts (make_masked's,
    for an env with its action mask in its info). ALE/ ids' own is ale-py's preprocessing vector env
    (84x84 stacks), not the raw game the id makes alone (atari_<game> is the family that steps
    it)."""
    env_id = registered_id(gym_id)
    if make_masked or gym.spec(env_id).vector_entry_point is None or env_id.startswith("ALE/"):
        make = make_masked or (lambda **kwargs: make_gym_env(gym_id, **kwargs))
        return sync_vector(lambda: adapt(gym_id, make(**options)), num_envs)
    try:
        return gym.make_vec(gym_id, num_envs, **options)
    except TypeError as e:
        raise EnvError(f"env {gym_id!r} does not take the options {sorted(options)}: {e}") from None


def sync_vector(make_one, num_envs: int) -> gym.vector.VectorEnv:
    """num_envs envs of make_one() as one vector env, stepped in turn in this process (same-step
    autoreset)."""
    return gym.vector.SyncVectorEnv(
        [make_one] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
