"""Gymnasium envs as the engine takes them: any gymnasium id, and every env's spaces checked, with image
observations made CHW uint8 once, here, not in the model."""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings

import gymnasium as gym
import numpy as np


class ChannelsFirst(gym.ObservationWrapper):
    """HWC image observations -> CHW (a transposed view made contiguous once per step)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = channels_first(env.observation_space)

    def observation(self, observation):
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Discrete, MultiDiscrete, MultiBinary, Tuple and Dict observations (gymnasium's toy-text envs: FrozenLake, Taxi,
    Blackjack) as one float32 vector, each Discrete part one-hot, as gymnasium's spaces.flatten lays them out: an
    MLP's input."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)  # so that gymnasium can remake the env from its spec
        gym.ObservationWrapper.__init__(self, env)
        self.observation_space = flat_space(env.observation_space)

    def observation(self, observation):
        return flatten(self.env.observation_space, observation)


def flat_space(space: gym.Space) -> gym.spaces.Box:
    """The float32 vector space of a flattenable one (is_flattenable)."""
    flat = gym.spaces.flatten_space(space)
    return gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)


def flatten(space: gym.Space, observation) -> np.ndarray:
    return gym.spaces.flatten(space, observation).astype(np.float32)


def is_flattenable(space: gym.Space) -> bool:
    """Observations that become one vector (FlatObservation, and a PettingZoo env's agents): of discrete parts and
    arrays, but no image (it would lose its layout)."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return True
    if isinstance(space, gym.spaces.Box):
        return not is_image_space(space)
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        return all(map(is_flattenable, space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces))
    return False


def channels_first(space: gym.spaces.Box) -> gym.spaces.Box:
    return gym.spaces.Box(np.transpose(space.low, (2, 0, 1)), np.transpose(space.high, (2, 0, 1)), dtype=np.uint8)


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def is_hwc_image(space: gym.Space) -> bool:
    return is_image_space(space) and space.shape[-1] in (1, 3, 4)


def adapt(name: str, env: gym.Env) -> gym.Env:
    """Any env as the engine takes it: spaces checked, HWC image observations turned CHW, discrete and composite
    ones flattened into a vector."""
    if not isinstance(env.observation_space, gym.spaces.Box) and is_flattenable(env.observation_space):
        env = FlatObservation(env)
    check_spaces(name, env.observation_space, env.action_space)
    return ChannelsFirst(env) if is_hwc_image(env.observation_space) else env


def check_spaces(name: str, obs: gym.Space, act: gym.Space) -> None:
    from asyncrl.envs import EnvError
    if not isinstance(obs, gym.spaces.Box):
        raise EnvError(f"env {name!r}: observation space {obs} is not supported yet (Box observations, and discrete "
                       f"or composite ones without images, which gymnasium envs get flattened)")
    if not (categorical_sizes(act) or isinstance(act, gym.spaces.Box) and len(act.shape) == 1):
        raise EnvError(f"env {name!r}: action space {act} is not supported yet (Discrete, 1-D MultiDiscrete or "
                       f"MultiBinary, or 1-D Box)")


def categorical_sizes(space: gym.Space) -> list[int] | None:
    """The sizes of the categorical distributions an action is drawn from: [n] for Discrete, one per dimension for a
    1-D MultiDiscrete or MultiBinary (drawn independently, Sample Factory's and CleanRL's factorized policy); None for
    anything else (a Box's actions are a Gaussian's)."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiDiscrete) and len(space.shape) == 1 and not space.start.any():
        return space.nvec.tolist()
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return [2] * space.shape[0]
    return None


def registered_id(gym_id: str) -> str:
    """The id of `gym_id` (or of gymnasium's `package:EnvId` form), once what registers it is imported (the package;
    ale-py for ALE/ ids), in whichever process makes the env; MuJoCo's warnings are routed (quiet_mujoco) first."""
    from asyncrl.envs import register_ale_ids
    package, _, env_id = gym_id.rpartition(":")
    if package:
        importlib.import_module(package)
    if env_id.startswith("ALE/"):
        register_ale_ids()
    if env_id in gym.envs.registry and "mujoco" in str(gym.spec(env_id).entry_point):
        quiet_mujoco()
    return env_id


def quiet_mujoco() -> None:
    """MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working directory: send them to Python's warnings instead,
    less its deprecations of gymnasium's model files (mujoco 4's `settotalmass`: not the user's to act on, and
    gymnasium shows each once per process, so every rollout worker would print it)."""
    from asyncrl.envs import EnvError
    if importlib.util.find_spec("mujoco") is None:
        raise EnvError('MuJoCo envs need mujoco: pip install -e ".[mujoco]"')
    try:
        import mujoco
    except Exception as e:  # noqa: BLE001 - mujoco loads the OpenGL library MUJOCO_GL names as it is imported
        raise EnvError(f"mujoco fails to import with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} ({type(e).__name__}: "
                       f"{e}): unset MUJOCO_GL, or install that library (egl: libegl1, osmesa: libosmesa6)") from None

    def forward(message: str) -> None:
        if "deprecated" not in message:
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(forward)


def make_gym_env(gym_id: str, **options) -> gym.Env:
    from asyncrl.envs import EnvError
    registered_id(gym_id)
    try:
        env = gym.make(gym_id, **options)
    except TypeError as e:  # an option the env's constructor does not take
        raise EnvError(f"env {gym_id!r} does not take the options {sorted(options)}: {e}") from None
    except gym.error.DependencyNotInstalled as e:  # e.g. Box2D for LunarLander: gymnasium's message says what to install
        raise EnvError(f"env {gym_id!r}: {e}") from None
    return env


# Vector-observation gymnasium envs (classic control, Box2D, MuJoCo): a small MLP, no RNN, many cheap envs
# per worker, and several PPO epochs per batch, since samples are cheap but learning from them is not.
VECTOR_ENV_DEFAULTS = {"use_rnn": False, "encoder_mlp_layers": [64, 64], "num_envs_per_worker": 16,
                       "learning_rate": 1e-3, "num_epochs": 4, "num_batches_per_epoch": 4}
# Continuous control (any env with Box actions: MuJoCo, Box2D, classic control): Sample Factory's MuJoCo settings,
# synchronous PPO (its async_rl False) with a Gaussian policy and a learned log-std on a small tanh MLP, observations
# and returns normalized, GAE (without its --kl_loss_coeff 0.1: on Hopper it moved nothing past the seeds). The
# Gaussian starts at std 0.5, not 1.0, and learns 4 epochs a batch, not 2, with a small entropy bonus (0.003) that
# keeps the std from collapsing before Hopper hops: every MuJoCo task in README's table learned more (each change
# measured in hopper_settings.md). Synchronous PPO's batch is every env's rollout (config.algo_defaults):
# 2 workers x 16 envs x 64 steps = 2048.
CONTINUOUS_DEFAULTS = {**VECTOR_ENV_DEFAULTS, "algo": "ppo", "initial_stddev": 0.5, "rollout": 64, "num_epochs": 4,
                       "num_batches_per_epoch": 4, "with_vtrace": False, "gae_lambda": 0.95, "gamma": 0.99,
                       "ppo_clip_ratio": 0.2, "value_loss_coeff": 1.3, "exploration_loss_coeff": 0.003,
                       "max_grad_norm": 3.5, "learning_rate": 0.00295, "lr_schedule": "linear_decay",
                       "normalize_input": True, "normalize_returns": True, "value_bootstrap": True}
# Per-id additions: returns in the hundreds want scaled rewards for the value head to keep up.
GYM_ID_DEFAULTS = {"CartPole-v1": {"reward_scale": 0.1}, "CartPole-v0": {"reward_scale": 0.1}}


def gym_entry(gym_id: str):
    from asyncrl.envs import EnvEntry
    probe = make_gym_env(gym_id)  # the observation space decides the defaults; gymnasium envs are cheap to make
    if isinstance(probe.action_space, gym.spaces.Box):
        defaults = dict(CONTINUOUS_DEFAULTS)
    else:
        defaults = {} if is_image_space(probe.observation_space) else dict(VECTOR_ENV_DEFAULTS)
    defaults.update(GYM_ID_DEFAULTS.get(gym_id, {}))
    probe.close()
    return EnvEntry(lambda **options: make_gym_env(gym_id, **options), f"gymnasium {gym_id}", defaults,
                    lambda num_envs, **options: make_gym_vector(gym_id, num_envs, **options))


def make_gym_vector(gym_id: str, num_envs: int, **options) -> gym.vector.VectorEnv:
    """num_envs of a gymnasium id as one vector env: its own vector implementation if it has one (e.g. CartPole's),
    else gymnasium's SyncVectorEnv of the envs this module adapts. ALE/ ids' own is ale-py's preprocessing vector env
    (84x84 stacks), not the raw game the id makes alone (atari_<game> is the family that steps it)."""
    from asyncrl.envs import EnvError
    env_id = registered_id(gym_id)
    if gym.spec(env_id).vector_entry_point is None or env_id.startswith("ALE/"):
        return sync_vector(lambda: adapt(gym_id, make_gym_env(gym_id, **options)), num_envs)
    try:
        return gym.make_vec(gym_id, num_envs, **options)
    except TypeError as e:
        raise EnvError(f"env {gym_id!r} does not take the options {sorted(options)}: {e}") from None


def sync_vector(make_one, num_envs: int) -> gym.vector.VectorEnv:
    """num_envs envs of make_one() as one vector env, stepped in turn in this process (same-step autoreset)."""
    return gym.vector.SyncVectorEnv([make_one] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
