"""Gymnasium envs as the engine takes them: any gymnasium id, and every env's spaces checked, with
image observations made CHW uint8 once, here, not in the model."""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings

import gymnasium as gym

from asyncrl.cfg.extras import require
from asyncrl.envs.action_masks import (
    ACTION_MASK,
    ActionMaskInObservation,
    categorical_sizes,
    has_action_mask,
)
from asyncrl.envs.observations import (
    ChannelsFirst,
    FlatObservation,
    has_images_beside,
    is_flattenable,
    is_hwc_image,
    is_image_space,
)
from asyncrl.envs.packed_observations import PackImages, has_image
from asyncrl.envs.registry import EnvEntry, EnvError, register_ale_ids


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
# them is not. 32 envs a worker, 16 a group: each request to a policy worker and each step of a
# group costs the same handful of process wake-ups and numpy calls whatever its size, so larger
# groups share them among more steps (CartPole-v1 on 2 cores, 5 seeds each: 22,631 -> 34,037
# training frames/s against 16 envs, a mean return of 475 after 4.35 -> 3.41 s of the run, median;
# 64 envs: 34,835 frames/s, 4.42 s: a batch is then more rounds behind).
VECTOR_ENV_DEFAULTS = {
    "use_rnn": False,
    "encoder_mlp_layers": [64, 64],
    "num_envs_per_worker": 32,
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
    "num_envs_per_worker": 16,
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
# Per-id additions. CartPole: returns in the hundreds want scaled rewards for the value head to
# keep up. And its step costs microseconds, so a policy worker process's hand-off each step takes
# longer than the forward pass, and the learner's update (per-op overhead, not arithmetic) is the
# limit: each rollout worker acts for its one group of 64 envs itself (--worker_inference), and 2
# epochs a batch halve the update. On 2 cores, 3 seeds each in one run: 22,373 -> 41,123 training
# frames/s, a mean return of 475 after 4.91 -> 3.46 s of the run (median; 128 envs a group: 44,845
# frames/s against 22,665, 5.00 s: a batch is more rounds behind). Not for every cheap-looking env:
# Acrobot-v1's step costs four times more (`asyncrl bench --mode raw`: 34,261 frames/s against
# 148,289), and there the same settings reached a mean return of -100 later (2 seeds each: 14.9 s
# against 10.5 s; 4 epochs: 12.9 s against 11.1 s).
CARTPOLE_DEFAULTS = {
    "reward_scale": 0.1,
    "num_envs_per_worker": 64,
    "worker_num_splits": 1,
    "worker_inference": True,
    "num_epochs": 2,
}
GYM_ID_DEFAULTS = {"CartPole-v1": CARTPOLE_DEFAULTS, "CartPole-v0": CARTPOLE_DEFAULTS}


def spaces_defaults(observation_space: gym.Space, action_space: gym.Space) -> dict:
    """The defaults an env gets for its spaces: Box actions the continuous-control ones, vector
    observations the small MLP's and PPO's epochs, images none (the conv encoder's are the engine's
    own)."""
    if isinstance(action_space, gym.spaces.Box):
        return dict(CONTINUOUS_DEFAULTS)
    return {} if has_image(observation_space) else dict(VECTOR_ENV_DEFAULTS)


def gym_entry(gym_id: str):
    # the spaces decide the defaults; gymnasium envs are cheap to make
    probe = make_gym_env(gym_id)
    defaults = spaces_defaults(probe.observation_space, probe.action_space)
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


def with_mask_from_info(env: gym.Env, name: str) -> gym.Env:
    """An env whose action mask comes in its info (gymnasium's Taxi), the mask appended to its
    observation (packed beside an image)."""
    return (PackImages if is_image_space(env.observation_space) else ActionMaskInObservation)(
        env, name, from_info=True
    )
