"""VizDoom scenarios shipped with the `vizdoom` package, headless, as gymnasium envs.

The engine renders straight into CHW uint8 (screen format CRCGCB) at 256x144, and the env returns
every second row and column: a 128x72 observation (Sample Factory's model input size, without its
aspect distortion) as a strided view, which costs nothing until it is copied into shared memory.
Each agent step repeats the action `frameskip` times inside the engine (`make_action(action,
frameskip)`), which returns the summed reward, as Sample Factory does. At an episode's end,
`info["episode_stats"]` holds the scenario's counters (kills, health, ammo, frags, deaths), which
the engine reports. With measurements=True the observation is a Dict of the screen and the player's
game variables (MEASUREMENTS and the cfg's own).
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from asyncrl.core.reaper import announce_engines
from asyncrl.envs.registry import EnvError, register_env


@dataclass(frozen=True)
class Scenario:
    # config file in vizdoom.scenarios_path
    cfg: str
    description: str
    # applied by the learner; reported returns stay the env's own
    reward_scale: float = 1.0
    # extra actions: buttons pressed together, e.g. ("MOVE_FORWARD", "TURN_LEFT")
    combos: tuple = ()
    # game variables reported at episode end
    stats: tuple = ()
    # replaces the cfg's buttons (multiplayer cfgs have analog ones)
    buttons: tuple = ()
    # built-in bots in a single-player deathmatch (net games add their own)
    bots: int = 0
    # the episode stat that is the true_objective (PBT, ratings): "win", "frags"
    objective: str | None = None
    # (field, value) pairs: this scenario's own config defaults, over DOOM_DEFAULTS
    config: tuple = ()


FORWARD_TURNS = (("MOVE_FORWARD", "TURN_LEFT"), ("MOVE_FORWARD", "TURN_RIGHT"))
DEATHMATCH_BUTTONS = (
    "ATTACK",
    "MOVE_FORWARD",
    "MOVE_BACKWARD",
    "MOVE_LEFT",
    "MOVE_RIGHT",
    "TURN_LEFT",
    "TURN_RIGHT",
)
DEATHMATCH_COMBOS = FORWARD_TURNS + (("MOVE_FORWARD", "ATTACK"),)
DEATHMATCH_STATS = ("frags", "deaths", "damage")

SCENARIOS = {
    "doom_basic": Scenario(
        "basic.cfg", "shoot the monster in front of you", 0.01, stats=("kills", "ammo")
    ),
    # half the batch (twice the updates per sample) and Sample Factory's Doom entropy weight: +0.68
    # ± 0.23 at 600k env steps over 20 seeds paired, on two machines
    # (benchmarks/studies/results/defend_the_center_seeds.md)
    "doom_defend_the_center": Scenario(
        "defend_the_center.cfg",
        "turn and shoot monsters approaching from all sides",
        stats=("kills", "health", "ammo"),
        config=(("batch_size", 512), ("exploration_loss_coeff", 0.001)),
    ),
    "doom_defend_the_line": Scenario(
        "defend_the_line.cfg",
        "shoot monsters approaching along a line",
        stats=("kills", "health", "ammo"),
    ),
    "doom_health_gathering": Scenario(
        "health_gathering.cfg",
        "collect medkits on an acid floor to survive",
        0.01,
        FORWARD_TURNS,
        ("health",),
    ),
    "doom_health_gathering_supreme": Scenario(
        "health_gathering_supreme.cfg",
        "health gathering in a maze with poison",
        0.01,
        FORWARD_TURNS,
        ("health",),
    ),
    "doom_my_way_home": Scenario(
        "my_way_home.cfg", "find the vest in a maze (sparse reward)", 1.0, FORWARD_TURNS
    ),
    "doom_deadly_corridor": Scenario(
        "deadly_corridor.cfg",
        "reach the vest through a corridor of shooting monsters",
        0.01,
        FORWARD_TURNS + (("MOVE_FORWARD", "ATTACK"),),
        ("kills", "health"),
    ),
    "doom_take_cover": Scenario(
        "take_cover.cfg", "dodge fireballs to survive", 0.01, stats=("health",)
    ),
    "doom_predict_position": Scenario("predict_position.cfg", "shoot a rocket at a moving target"),
    "doom_deathmatch_bots": Scenario(
        "multi.cfg",
        "deathmatch against 7 built-in bots (+1 frag, -1 death)",
        1.0,
        DEATHMATCH_COMBOS,
        DEATHMATCH_STATS + ("health",),
        DEATHMATCH_BUTTONS,
        bots=7,
        objective="frags",
    ),
    "doom_duel_bots": Scenario(
        "multi_duel.cfg",
        "duel against a built-in bot (+1 frag, -1 death)",
        1.0,
        DEATHMATCH_COMBOS,
        DEATHMATCH_STATS,
        DEATHMATCH_BUTTONS,
        bots=1,
        objective="win",
    ),
}

# Sample Factory's VizDoom model (convnet_simple + 512-unit GRU) with per-pixel input normalization,
# as it uses; a learning rate of 5e-4 (theirs is 1e-4) makes doom_basic rise within ~60 updates
# here.
DOOM_DEFAULTS = {
    "encoder": "conv",
    "use_rnn": True,
    "rnn_size": 512,
    "num_envs_per_worker": 8,
    "normalize_input": True,
    "learning_rate": 5e-4,
}

_STAT_VARIABLES = {
    "kills": "KILLCOUNT",
    "health": "HEALTH",
    "ammo": "AMMO2",
    "frags": "FRAGCOUNT",
    "deaths": "DEATHCOUNT",
    "damage": "DAMAGECOUNT",
}
# --env_options '{"measurements": true}'
MEASUREMENTS = ("HEALTH", "ARMOR", "SELECTED_WEAPON", "SELECTED_WEAPON_AMMO")
_DEATHMATCH_ARGS = (
    "-host 1 -deathmatch +sv_forcerespawn 1 +sv_noautoaim 1 +sv_respawnprotect 1 "
    "+sv_spawnfarthest 1 +sv_nocrouch 1 +viz_respawn_delay 0 +viz_nocheat 1"
)


def scenario_file(name: str) -> str:
    import vizdoom as vzd

    path = os.path.join(vzd.scenarios_path, name)
    if not os.path.isfile(path):
        raise EnvError(f"VizDoom scenario file missing: {path} (reinstall the vizdoom package)")
    return path


def frag_table(game) -> np.ndarray:
    """Every player's frags this episode, bots included, by player number (PLAYER1_FRAGCOUNT, ... up
    to the game's PLAYER_COUNT)."""
    import vizdoom as vzd

    count = int(game.get_game_variable(vzd.GameVariable.PLAYER_COUNT))
    return np.array(
        [
            game.get_game_variable(getattr(vzd.GameVariable, f"PLAYER{i}_FRAGCOUNT"))
            for i in range(1, count + 1)
        ]
    )


def win_of(frags: np.ndarray, me: int) -> float:
    """1 for the most frags alone, 0.5 for the most tied with another player, else 0."""
    best_other = np.delete(frags, me).max(initial=-np.inf)
    if frags[me] == best_other:
        return 0.5
    return 1.0 if frags[me] > best_other else 0.0


def every_second_pixel(screen: np.ndarray) -> np.ndarray:
    """screen[:, ::2, ::2] of a CHW uint8 screen, as a contiguous array. On little-endian machines
    each pair of pixels of a row, read as one uint16, keeps the first pixel in its low byte: the
    cast to uint8 is then a vectorized copy (6 us instead of the 19 us of copying a stride-2 view,
    and the workers' copy of a contiguous frame into shared memory takes 1 us)."""
    if sys.byteorder == "little" and screen.shape[-1] % 2 == 0 and screen.flags.c_contiguous:
        return screen.view(np.uint16)[:, ::2].astype(np.uint8)
    return np.ascontiguousarray(screen[:, ::2, ::2])


class DoomEnv(gym.Env):
    """One VizDoom game. Actions: Discrete: no-op, each button alone, then the scenario's button
    combos."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 35}

    def __init__(
        self,
        scenario: Scenario,
        frameskip: int = 4,
        episode_timeout: int | None = None,
        restart_every_episodes: int = 1000,
        render_mode: str | None = None,
        measurements: bool = False,
    ):
        import vizdoom as vzd

        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"VizDoom envs render only rgb_array frames, not {render_mode!r}")
        self.scenario = scenario
        self.frameskip = frameskip
        self.render_mode = render_mode
        # the engine's memory grows with every new episode (measured: ~1 MiB a minute per engine
        # once doom_basic episodes get short), so each engine is restarted after this many episodes
        # (a restart costs ~0.1 s)
        self.restart_every_episodes = restart_every_episodes
        self._episodes_since_init = 0
        self.game = game = vzd.DoomGame()
        game.load_config(scenario_file(scenario.cfg))
        game.set_doom_scenario_path(scenario_file(os.path.basename(game.get_doom_scenario_path())))
        # the engine writes its ini file here instead of into the user's working directory
        game.set_doom_config_path(os.path.join(tempfile.gettempdir(), "asyncrl_vizdoom.ini"))
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)
        game.set_screen_resolution(vzd.ScreenResolution.RES_256X144)
        game.set_screen_format(vzd.ScreenFormat.CRCGCB)
        if scenario.buttons:
            game.set_available_buttons([getattr(vzd.Button, b) for b in scenario.buttons])
        if scenario.bots:
            game.set_doom_map("map01")
            game.add_game_args(_DEATHMATCH_ARGS)
            game.set_frag_reward(1.0)
            game.set_episode_timeout(4200)
        if episode_timeout is not None:
            game.set_episode_timeout(episode_timeout)
        self._stat_variables = {
            name: getattr(vzd.GameVariable, _STAT_VARIABLES[name]) for name in scenario.stats
        }
        self._actions = self._action_table(
            [b.name for b in game.get_available_buttons()], scenario.combos
        )
        self.action_space = gym.spaces.Discrete(len(self._actions))
        screen = gym.spaces.Box(0, 255, (3, 72, 128), dtype=np.uint8)
        self._last_obs = np.zeros(screen.shape, np.uint8)
        self._measured = self._measure(game) if measurements else []
        self._last_measurements = np.zeros(len(self._measured), np.float32)
        self.observation_space = (
            gym.spaces.Dict(
                {
                    "screen": screen,
                    "measurements": gym.spaces.Box(
                        -np.inf, np.inf, self._last_measurements.shape, np.float32
                    ),
                }
            )
            if measurements
            else screen
        )
        # HWC, the full rendered frame (render_mode only)
        self._last_screen = np.zeros((144, 256, 3), np.uint8)
        self._initialized = False

    @staticmethod
    def _measure(game) -> list:
        """The game variables measurements=True shows beside the screen (Sample Factory's doom
        measurements): the player's health, armor, weapon and its ammo, then those the scenario's
        cfg makes available."""
        import vizdoom as vzd

        names = dict.fromkeys(
            [*MEASUREMENTS, *(v.name for v in game.get_available_game_variables())]
        )
        measured = [getattr(vzd.GameVariable, name) for name in names]
        game.set_available_game_variables(measured)
        return measured

    @staticmethod
    def _action_table(buttons: list[str], combos: tuple) -> list[list[float]]:
        table = [[0.0] * len(buttons)]
        for pressed in [(b,) for b in buttons] + list(combos):
            table.append([1.0 if b in pressed else 0.0 for b in buttons])
        return table

    def _observe(self) -> np.ndarray | dict:
        state = self.game.get_state()
        # None after the episode ended: repeat the last frame
        if state is not None:
            self._last_obs = every_second_pixel(state.screen_buffer)
            if self._measured:
                self._last_measurements = np.asarray(state.game_variables, np.float32)
            if self.render_mode == "rgb_array":
                self._last_screen = np.ascontiguousarray(state.screen_buffer.transpose(1, 2, 0))
        return (
            {"screen": self._last_obs, "measurements": self._last_measurements}
            if self._measured
            else self._last_obs
        )

    def render(self):
        """The last frame at full resolution (256x144), HWC RGB; with render_mode="rgb_array"
        only."""
        return self._last_screen if self.render_mode == "rgb_array" else None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.game.set_seed(int(seed) % (2**31))
            if self.scenario.bots and self._initialized:
                # bots draw from the engine's start-up seed: restart the engine to reseed them
                self.close()
        if self._initialized and self._episodes_since_init >= self.restart_every_episodes:
            self.close()
            # reproducible, and not a replay of the start
            self.game.set_seed(int(self.np_random.integers(2**31)))
        if not self._initialized:
            self.game.init()
            # its reaper then removes its /dev/shm segments whatever happens to us
            announce_engines()
            self._initialized = True
            self._episodes_since_init = 0
        self.game.new_episode()
        self._episodes_since_init += 1
        if self.scenario.bots:
            self.game.send_game_command("removebots")
            for _ in range(self.scenario.bots):
                self.game.send_game_command("addbot")
        return self._observe(), {}

    def step(self, action):
        reward = self.game.make_action(self._actions[int(action)], self.frameskip)
        terminated = self.game.is_episode_finished()
        if self.scenario.bots and not terminated and self.game.is_player_dead():
            # a deathmatch goes on after a death; the death penalty was paid. Not after the
            # episode's end: a respawn there starts the next episode, whose end this step would then
            # never report
            self.game.respawn_player()
        truncated = terminated and self.game.is_episode_timeout_reached()
        info = {}
        if terminated:
            info["episode_stats"] = self._episode_stats()
        return self._observe(), float(reward), terminated and not truncated, truncated, info

    def _episode_stats(self) -> dict:
        import vizdoom as vzd

        stats = {
            name: float(self.game.get_game_variable(v)) for name, v in self._stat_variables.items()
        }
        if self.scenario.bots:
            me = int(self.game.get_game_variable(vzd.GameVariable.PLAYER_NUMBER))
            stats["win"] = win_of(frag_table(self.game), me)
        if self.scenario.objective:
            stats["true_objective"] = stats[self.scenario.objective]
        return stats

    def close(self):
        if self._initialized:
            self.game.close()
            self._initialized = False


def _register():
    for name, scenario in SCENARIOS.items():
        register_env(
            name,
            lambda scenario=scenario, **options: DoomEnv(scenario, **options),
            f"VizDoom: {scenario.description}",
            {**DOOM_DEFAULTS, "reward_scale": scenario.reward_scale, **dict(scenario.config)},
        )


_register()
