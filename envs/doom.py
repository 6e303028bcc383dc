"""VizDoom scenarios shipped with the `vizdoom` package, headless, as gymnasium envs.

The engine renders straight into CHW uint8 (screen format CRCGCB) at 256x144, and the env returns
every second row and column: a 128x72 observation (Sample Factory's model input size, without its
aspect distortion) as a strided view, which costs nothing until it is copied into shared memory. Each agent step repeats the action `frameskip` times inside the engine
(`make_action(action, frameskip)`), which returns the summed reward, as Sample Factory does.
"""

from __future__ import annotations

import os
import tempfile

import gymnasium as gym
import numpy as np

from envs import EnvError, register_env

# name -> (scenario config in vizdoom.scenarios_path, description, reward scale the learner applies)
SCENARIOS = {
    "doom_basic": ("basic.cfg", "shoot the monster in front of you (reward ~ +1 per episode after scaling)", 0.01),
    "doom_defend_the_center": ("defend_the_center.cfg", "turn and shoot monsters approaching from all sides", 1.0),
    "doom_defend_the_line": ("defend_the_line.cfg", "shoot monsters approaching along a line", 1.0),
    "doom_health_gathering": ("health_gathering.cfg", "collect medkits on an acid floor to survive", 1.0),
    "doom_health_gathering_supreme": ("health_gathering_supreme.cfg", "health gathering in a maze with poison", 1.0),
    "doom_my_way_home": ("my_way_home.cfg", "find the vest in a maze (sparse reward)", 1.0),
    "doom_deadly_corridor": ("deadly_corridor.cfg", "reach the vest through a corridor of shooting monsters", 0.01),
    "doom_take_cover": ("take_cover.cfg", "dodge fireballs to survive", 1.0),
    "doom_predict_position": ("predict_position.cfg", "shoot a rocket at a moving target", 1.0),
}

# Sample Factory's VizDoom model (convnet_simple + 512-unit GRU) with per-pixel input normalization, as it
# uses; a learning rate of 5e-4 (theirs is 1e-4) makes doom_basic rise within ~60 updates here.
DOOM_DEFAULTS = {"encoder": "conv", "use_rnn": True, "rnn_size": 512, "num_envs_per_worker": 8,
                 "normalize_input": True, "learning_rate": 5e-4}


class DoomEnv(gym.Env):
    """One VizDoom game. Actions: Discrete(n + 1): no-op, or press one of the scenario's n buttons."""

    metadata = {"render_modes": []}

    def __init__(self, scenario_cfg: str, frameskip: int = 4, seed: int | None = None):
        import vizdoom as vzd

        self.frameskip = frameskip
        cfg_path = os.path.join(vzd.scenarios_path, scenario_cfg)
        if not os.path.isfile(cfg_path):
            raise EnvError(f"VizDoom scenario file missing: {cfg_path} (reinstall the vizdoom package)")
        self.game = vzd.DoomGame()
        self.game.load_config(cfg_path)
        wad = os.path.join(vzd.scenarios_path, os.path.basename(self.game.get_doom_scenario_path()))
        if not os.path.isfile(wad):
            raise EnvError(f"VizDoom scenario file missing: {wad} (reinstall the vizdoom package)")
        self.game.set_doom_scenario_path(wad)
        # the engine writes its ini file here instead of into the user's working directory
        self.game.set_doom_config_path(os.path.join(tempfile.gettempdir(), "asyncrl_vizdoom.ini"))
        self.game.set_window_visible(False)
        self.game.set_sound_enabled(False)
        self.game.set_mode(vzd.Mode.PLAYER)
        self.game.set_screen_resolution(vzd.ScreenResolution.RES_256X144)
        self.game.set_screen_format(vzd.ScreenFormat.CRCGCB)
        if seed is not None:
            self.game.set_seed(seed)
        self._initialized = False

        num_buttons = self.game.get_available_buttons_size()
        self._actions = np.eye(num_buttons + 1, num_buttons, k=-1).tolist()  # row 0 = no-op, row i = button i-1
        self.action_space = gym.spaces.Discrete(len(self._actions))
        self.observation_space = gym.spaces.Box(0, 255, (3, 72, 128), dtype=np.uint8)
        self._last_obs = np.zeros(self.observation_space.shape, np.uint8)

    def _observe(self) -> np.ndarray:
        state = self.game.get_state()
        if state is not None:  # None after the episode ended: repeat the last frame
            self._last_obs = state.screen_buffer[:, ::2, ::2]
        return self._last_obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.game.set_seed(int(seed) % (2 ** 31))
        if not self._initialized:
            self.game.init()
            self._initialized = True
        self.game.new_episode()
        return self._observe(), {}

    def step(self, action):
        reward = self.game.make_action(self._actions[int(action)], self.frameskip)
        terminated = self.game.is_episode_finished()
        truncated = terminated and self.game.is_episode_timeout_reached()
        return self._observe(), float(reward), terminated and not truncated, truncated, {}

    def close(self):
        if self._initialized:
            self.game.close()
            self._initialized = False


def _register():
    for name, (cfg, description, reward_scale) in SCENARIOS.items():
        register_env(name, lambda cfg=cfg, **options: DoomEnv(cfg, **options), f"VizDoom: {description}",
                     {**DOOM_DEFAULTS, "reward_scale": reward_scale})


_register()
