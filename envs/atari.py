"""Atari 2600 games through ale-py: `atari_<game>` for every ROM ale-py ships (`atari_pong`,
`atari_breakout`, ...).

Every game is ALE's own C++ preprocessing (ale_py.vector_env.AtariVectorEnv): a rollout worker steps
a group's games as one vector env (`--env_backend vector`, the Atari default:
vector_backend.VectorBackend), or each game as a vector env of one (`--env_backend per_env`, AtariGame
below). Both give the same observations for the same seeds and actions.

Two presets, chosen with `--env_options '{"preset": "..."}'`:
- "baselines" (the default; what CleanRL and Sample Factory report): 4 frames per step, max-pooled over the last two;
  up to 30 no-op starts; FIRE on reset in games that need it; a lost life is terminal for the learner (the info flag
  "life_lost") while the game goes on, and the step after it presses FIRE whatever the action (baselines' FireResetEnv
  after its EpisodicLifeEnv, EnvPool's episodic-life reset: without it Breakout's ball waits for a FIRE the policy
  must learn first); no sticky actions; the minimal action set.
- "machado" (Machado et al. 2018, "Revisiting the ALE"): sticky actions (0.25), the full action set, no life-loss
  signal, no FIRE reset, and no no-op starts (sticky actions are the paper's source of randomness instead).
Both: 84x84 grayscale, 4 frames stacked, and a game cut at 108,000 frames (a truncation, bootstrapped; option
max_frames). Rewards come unclipped: the reported return is the game's score over a whole game; the learner clips
them (--reward_clip 1, the family's default config). With render_mode="rgb_array" (enjoy --save_video) a twin of the
game at full size in color plays in lockstep for the frames (ALE's vector env renders nothing of its own).

The option `"engine": "envpool"` runs the same presets on EnvPool's C++ Atari instead of ALE's
vector env (EnvPoolGames below; pip install -e ".[envpool]"): the same games and settings, not the
same pixels (each resizes its own way).
"""

from __future__ import annotations

import difflib
import functools

import gymnasium as gym
import numpy as np

from asyncrl.cfg.extras import require
from asyncrl.envs.registry import EnvEntry, EnvError, register_env_family

PREFIX = "atari_"
MAX_FRAMES_PER_GAME = 108_000
PRESETS = {
    "baselines": {
        "repeat_action_probability": 0.0,
        "full_action_space": False,
        "noop_max": 30,
        "use_fire_reset": True,
        "life_loss": True,
    },
    "machado": {
        "repeat_action_probability": 0.25,
        "full_action_space": True,
        "noop_max": 0,
        "use_fire_reset": False,
        "life_loss": False,
    },
}
FRAMESKIP = 4
# Sample Factory's Atari settings (sf_examples/atari, chosen there to match CleanRL's PPO): the
# Nature conv encoder, no RNN, 128-step rollouts, 4 epochs of 4 minibatches, GAE targets, clipped
# rewards, a linearly decaying rate; and CleanRL's raw value targets: clipped rewards keep returns
# small, and on Breakout return normalization learned half as much per frame (3.5 against 6.2 at
# 0.68M frames, where CleanRL's script had 6.1).
ATARI_DEFAULTS = {
    "encoder": "conv",
    "encoder_conv_architecture": "convnet_atari",
    "normalize_returns": False,
    "use_rnn": False,
    "rollout": 128,
    "batch_size": 1024,
    "num_batches_per_epoch": 4,
    "num_epochs": 4,
    "with_vtrace": False,
    "gae_lambda": 0.95,
    "gamma": 0.99,
    "ppo_clip_ratio": 0.1,
    "value_loss_coeff": 0.5,
    "exploration_loss_coeff": 0.01,
    "max_grad_norm": 0.5,
    "learning_rate": 2.5e-4,
    "lr_schedule": "linear_decay",
    "adam_eps": 1e-5,
    "reward_clip": 1.0,
    "train_for_env_steps": 10_000_000,
    "num_envs_per_worker": 8,
    "env_backend": "vector",
}


def games() -> list[str]:
    """Every game ale-py has a ROM for."""
    return sorted(_ale().roms.get_all_rom_ids())


def _ale():
    require("atari", "atari_<game> envs")
    # the atari extra's, checked above
    import ale_py
    import ale_py.roms  # noqa: F401

    return ale_py


AGENT_VIEW = {"img_height": 84, "img_width": 84, "grayscale": True, "stack_num": 4}
# the game's own screen
SCREEN_VIEW = {"img_height": 210, "img_width": 160, "grayscale": False, "stack_num": 1}


def make_vector_game(
    game: str,
    num_envs: int,
    preset: str = "baselines",
    num_threads: int = 1,
    max_frames: int = MAX_FRAMES_PER_GAME,
    view: dict = AGENT_VIEW,
    engine: str = "ale",
) -> gym.vector.VectorEnv:
    """`num_envs` copies of one game with the preset's preprocessing, reset as their episodes end
    (same step: the final observation is in info["final_obs"]), with info["life_lost"] per env; a
    game is cut (truncated) after max_frames frames. `view` sets the observations only: for the same
    seeds and actions, the games are the same."""
    if engine == "envpool":
        env = EnvPoolGames(game, num_envs, num_threads, max_frames, preset)
    elif engine == "ale":
        from ale_py.vector_env import AtariVectorEnv

        env = AtariVectorEnv(
            game,
            num_envs,
            num_threads=num_threads,
            frameskip=FRAMESKIP,
            maxpool=True,
            **view,
            reward_clipping=False,
            episodic_life=False,
            life_loss_info=False,
            max_num_frames_per_episode=max_frames,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            **emulator_settings(preset),
        )
    else:
        raise EnvError(f"unknown Atari engine {engine!r}: choose ale or envpool")
    settings = _preset(preset)
    fire = fire_action(game, settings["full_action_space"]) if settings["use_fire_reset"] else None
    return AtariGames(env, settings["life_loss"], fire)


# loading the ROM into an interface takes ~0.1 s: once per game in a process, not once per env
@functools.cache
def fire_action(game: str, full_action_space: bool) -> int | None:
    """The index of FIRE in the game's action set (None if the game has no FIRE)."""
    ale_py = _ale()
    # before the interface: no banner
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.loadROM(ale_py.roms.get_rom_path(game))
    actions = list(ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet())
    return actions.index(ale_py.Action.FIRE) if ale_py.Action.FIRE in actions else None


def emulator_settings(preset: str) -> dict:
    """The preset's settings of the emulator itself (ALE's names; EnvPool takes the same), less the
    life-loss signal, which AtariGames gives."""
    return {k: v for k, v in _preset(preset).items() if k != "life_loss"}


def make_envpool(
    game: str, num_envs: int, num_threads: int, max_frames: int, preset: str, seeds: list[int]
):
    """EnvPool's own vector env of a game with the preset's preprocessing (AGENT_VIEW, rewards
    unclipped, no episodic life), in sync mode (every step steps all its games), env i seeded
    seeds[i]."""
    require("envpool", 'engine "envpool"')
    # the envpool extra's, checked above
    import envpool

    tasks = {task[:-3].lower(): task for task in envpool.list_all_envs() if task.endswith("-v5")}
    task = tasks.get(game.replace("_", ""))
    if task is None:
        raise EnvError(f"EnvPool has no Atari game {game!r}; use the engine ale")
    settings = emulator_settings(preset)
    # 1 is no no-op either; EnvPool 1.2 crashes on 0
    settings["noop_max"] = max(1, settings["noop_max"])
    return envpool.make_gymnasium(
        task,
        num_envs=num_envs,
        batch_size=num_envs,
        num_threads=num_threads,
        env_seed=seeds,
        frame_skip=FRAMESKIP,
        img_height=84,
        img_width=84,
        gray_scale=True,
        stack_num=4,
        max_episode_steps=max_frames // FRAMESKIP,
        episodic_life=False,
        reward_clip=False,
        **settings,
    )


class EnvPoolGames(gym.vector.VectorEnv):
    """EnvPool's Atari (sync mode: every step steps all its games) with ALE's vector env's face:
    same-step autoreset (EnvPool resets an ended game in its next step; here the ended games are
    reset at once, each alone, and their final observations go in info["final_obs"]), and seeds per
    reset (EnvPool fixes them when made: a reset with seeds makes it anew with them)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, game: str, num_envs: int, num_threads: int, max_frames: int, preset: str):
        self.make_pool = lambda seeds: make_envpool(
            game, num_envs, num_threads, max_frames, preset, seeds
        )
        self.num_envs = num_envs
        self.pool = self.make_pool(list(range(num_envs)))
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            seeds = np.arange(self.num_envs) + seed if np.ndim(seed) == 0 else np.asarray(seed)
            self.pool.close()
            self.pool = self.make_pool([int(s) for s in seeds])
        return self.pool.reset()

    def step(self, actions):
        obs, rewards, terminated, truncated, info = self.pool.step(np.asarray(actions))
        ended = np.flatnonzero(terminated | truncated)
        if len(ended):
            # copies: the reset below reuses EnvPool's buffers
            info["final_obs"] = obs.copy()
            obs = obs.copy()
            first_obs, first_info = self.pool.reset(env_id=ended)
            obs[ended] = first_obs
            info["lives"] = info["lives"].copy()
            # as ALE's: the next game's lives
            info["lives"][ended] = first_info["lives"]
        return obs, rewards, terminated, truncated, info

    def close(self, **kwargs):
        self.pool.close()


def _preset(preset: str) -> dict:
    if preset not in PRESETS:
        raise EnvError(f"unknown Atari preset {preset!r}: choose one of {', '.join(PRESETS)}")
    return PRESETS[preset]


class AtariGames(gym.vector.VectorWrapper):
    """ALE's vector env with info["life_lost"][i]: env i's player lost a life and its game goes on
    (a learner treats that step as terminal; the reported episode is the whole game); always False
    without the signal (the machado preset). With `fire` (FIRE's action index) the step after a lost
    life presses FIRE whatever action was taken: the new life starts as a game does, and the
    learner's record stays the policy's own (at that state every action has the same effect). Seeds
    are taken modulo 2**31 (ALE's are C ints)."""

    def __init__(self, env: gym.vector.VectorEnv, signal: bool, fire: int | None = None):
        super().__init__(env)
        self.signal = signal
        self.fire = fire
        self.lives = np.zeros(env.num_envs, np.int64)
        # env i lost a life in its last step: its next one is FIRE
        self.relaunch = np.zeros(env.num_envs, bool)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            seed = int(seed) % 2**31 if np.ndim(seed) == 0 else np.asarray(seed, np.int64) % 2**31
        obs, info = self.env.reset(seed=seed, options=options)
        self.lives[info["env_id"]] = info["lives"]
        self.relaunch[info["env_id"]] = False
        return obs, info

    def step(self, actions):
        if self.fire is not None:
            actions = np.where(self.relaunch, self.fire, actions)
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        lives = info["lives"]
        info["life_lost"] = (lives < self.lives) & ~(terminated | truncated) & self.signal
        # after a game's end: the next game's lives (it was reset in this step)
        self.lives[:] = lives
        self.relaunch[:] = info["life_lost"]
        return obs, rewards, terminated, truncated, info


class AtariGame(gym.Env):
    """One game as a gymnasium.Env: a vector env of one, so this path and the vector path preprocess
    alike. A game that ends is reset at once (in its last step); reset() without a seed then returns
    that new game. With render_mode="rgb_array" a twin of the game in SCREEN_VIEW takes the same
    seeds and actions, for render() (engine ale; EnvPool's games render the agent's view)."""

    # the console's frames a second: videos in real time
    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}

    def __init__(
        self,
        game: str,
        preset: str = "baselines",
        render_mode: str | None = None,
        max_frames: int = MAX_FRAMES_PER_GAME,
        engine: str = "ale",
    ):
        self.name = PREFIX + game
        self.game = make_vector_game(game, 1, preset, max_frames=max_frames, engine=engine)
        self.screen = (
            make_vector_game(game, 1, preset, max_frames=max_frames, view=SCREEN_VIEW)
            if render_mode == "rgb_array" and engine == "ale"
            else None
        )
        self.observation_space = self.game.single_observation_space
        self.action_space = self.game.single_action_space
        self.frameskip = FRAMESKIP
        self.render_mode = render_mode
        # (obs, info) of the game started as the last one ended
        self.next_game = None
        self.last_obs = None
        # the twin's frames, as last_obs and next_game's
        self.last_screen = None
        self.next_screen = None

    def reset(self, *, seed: int | None = None, options=None):
        if seed is None and self.next_game is not None:
            self.last_obs, info = self.next_game
            self.next_game = None
            self.last_screen = self.next_screen
            return self.last_obs, info
        if seed is None and self.screen is not None:
            # the twin must start the same game
            seed = int(np.random.randint(2**31))
        seeds = None if seed is None else np.array([seed])
        obs, _ = self.game.reset(seed=seeds)
        if self.screen is not None:
            self.last_screen = self.screen.reset(seed=seeds)[0][0, -1]
        self.next_game = None
        self.last_obs = obs[0]
        return obs[0], {}

    def step(self, action):
        actions = np.array([action], np.int64)
        obs, rewards, terminated, truncated, info = self.game.step(actions)
        if self.screen is not None:
            self._step_screen(actions, info)
        step_info = {"life_lost": bool(info["life_lost"][0])}
        if terminated[0] or truncated[0]:
            self.next_game = (obs[0], {})
            obs = info["final_obs"]
        self.last_obs = obs[0]
        return obs[0], float(rewards[0]), bool(terminated[0]), bool(truncated[0]), step_info

    def _step_screen(self, actions: np.ndarray, game_info: dict) -> None:
        screen, _, terminated, truncated, info = self.screen.step(actions)
        if any(info[k][0] != game_info[k][0] for k in ("episode_frame_number", "lives")):
            raise EnvError(
                f"{self.name}: the screen's twin of the game left lockstep (frame "
                f"{info['episode_frame_number'][0]} vs {game_info['episode_frame_number'][0]})"
            )
        self.last_screen = screen[0, -1]
        if terminated[0] or truncated[0]:
            self.next_screen = self.last_screen
            self.last_screen = info["final_obs"][0][-1]

    def render(self):
        """With render_mode="rgb_array" and engine ale the game's screen (210x160 RGB, max-pooled as
        the agent's frames are); else the newest 84x84 frame the agent saw, gray as RGB."""
        if self.screen is not None:
            return self.last_screen
        return np.repeat(self.last_obs[-1][:, :, None], 3, axis=2)

    def close(self):
        self.game.close()
        if self.screen is not None:
            self.screen.close()


def atari_entry(name: str) -> EnvEntry:
    """The entry of `atari_<game>`; EnvError naming near matches for an unknown game."""
    game = name[len(PREFIX) :]
    known = games()
    if game not in known:
        near = difflib.get_close_matches(game, known, n=3, cutoff=0.6)
        hint = (
            f"; did you mean {', '.join(PREFIX + g for g in near)}?"
            if near
            else "; see `asyncrl envs`"
        )
        raise EnvError(f"unknown Atari game {game!r}{hint}")

    def make(
        preset: str = "baselines",
        num_threads: int = 1,
        max_frames: int = MAX_FRAMES_PER_GAME,
        render_mode: str | None = None,
        engine: str = "ale",
        **options,
    ) -> AtariGame:
        _check_options(name, options)
        # a vector env of one: one thread
        return AtariGame(game, preset, render_mode, max_frames, engine)

    def make_vector(
        num_envs: int,
        preset: str = "baselines",
        num_threads: int = 1,
        max_frames: int = MAX_FRAMES_PER_GAME,
        engine: str = "ale",
        **options,
    ):
        _check_options(name, options)
        return make_vector_game(game, num_envs, preset, num_threads, max_frames, engine=engine)

    return EnvEntry(make, f"Atari {game} (ALE)", dict(ATARI_DEFAULTS), make_vector)


def _check_options(name: str, options: dict) -> None:
    if options:
        raise EnvError(
            f"env {name!r} takes the options preset ({' or '.join(PRESETS)}), max_frames (per game), "
            f"num_threads (vector envs) and engine (ale or envpool), not {sorted(options)}"
        )


register_env_family(
    PREFIX,
    atari_entry,
    "Atari 2600 (ALE): atari_pong, atari_breakout, ... every game in "
    "ale_py.roms.get_all_rom_ids(); --env_options preset: baselines|machado, engine: ale|envpool",
    member="game",
    default_config=ATARI_DEFAULTS,
)
