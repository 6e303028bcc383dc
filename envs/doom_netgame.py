"""VizDoom network games as one multi-agent env (PettingZoo's parallel API): doom_duel (two learning
players) and doom_deathmatch_full (4 learning players and 4 built-in bots, which the host adds).

Each player is a VizDoom engine of its own in synchronous mode (Mode.PLAYER): the host (`-host N
-port P`) and the others (`-join 127.0.0.1:P`) on loopback UDP, on a port the OS hands out (bound
and released just before the host starts; a failed start retries on a new one). A thread per player
ticks its engine one tic at a time, so the players' engines run at once (advance_action releases the
GIL). An env step gives each player its action and waits until every player's engine has run
`frameskip` tics.

Why a thread per player that may run a little ahead: an engine that waits for its controller stops
exchanging tics with the others, so a player that has waited KICK_AFTER_S for its next action runs
one more tic with its last action (at most frameskip - 1 past the step; those tics count towards the
next step). Stepped in lock-step, two players played slower (benchmarks/studies/vizdoom_netgame.py).

Tics are counted on the engine's clock (get_episode_time), not by calls: one advance_action(1) may
run two game tics when ZDoom catches up with tics its peers already sent. Counted by calls, two
players' counts drifted apart under CPU contention, and each thread waited for a tic the other had
already run (8 games on 2 cores stalled every ~10 s; none in 28,000 steps since). Because a call may
jump past the step's last tic, the last two tics are rendered.

A step that does not end within `step_timeout` seconds (a peer died or the game stalled) raises
EnvError; the game is then broken and the next reset starts a new one (new engines, new port).
Rewards: +1 a frag, -1 a death. An episode ends at the time limit, for every player at once
(truncated: a deathmatch has no terminal state), with each player's frags, deaths, damage and win
(the most frags of all players, bots included: 1, 0.5 tied, 0) in info["episode_stats"]; win is also
the true_objective that PBT and the ratings use.
"""

from __future__ import annotations

import socket
import threading
import time
from functools import partial

import psutil

from asyncrl.core.reaper import announce_engines, remove_vizdoom_segments, vizdoom_instance_id
from asyncrl.envs.doom import (
    DEATHMATCH_BUTTONS,
    DEATHMATCH_COMBOS,
    DEATHMATCH_STATS,
    DOOM_DEFAULTS,
    DoomEnv,
    Scenario,
    frag_table,
    win_of,
)
from asyncrl.envs.doom_player import Player
from asyncrl.envs.multi_agent import ParallelEnvBase
from asyncrl.envs.registry import EnvError, register_env

START_ATTEMPTS = 3
# the engines give up connecting after 10 s (+viz_connect_timeout)
START_TIMEOUT_S = 20.0
# how long a call timed out is given to return once its engines are killed
STUCK_CALL_GRACE_S = 5.0
NET_ARGS = (
    "-deathmatch +sv_forcerespawn 1 +sv_noautoaim 1 +sv_respawnprotect 1 +sv_spawnfarthest 1 "
    "+sv_nocrouch 1 +viz_respawn_delay 0 +viz_nocheat 1"
)
DUEL = Scenario(
    "multi_duel.cfg",
    "two learning players duel (self-play over loopback UDP)",
    combos=DEATHMATCH_COMBOS,
    stats=DEATHMATCH_STATS,
    buttons=DEATHMATCH_BUTTONS,
    objective="win",
)
DEATHMATCH = Scenario(
    "multi.cfg",
    "learning players and built-in bots in a deathmatch (self-play over loopback UDP)",
    combos=DEATHMATCH_COMBOS,
    stats=DEATHMATCH_STATS,
    buttons=DEATHMATCH_BUTTONS,
    objective="win",
)
# players the map has starts for, bots included (a third duel player crashed)
MAP_STARTS = {DUEL: 2, DEATHMATCH: 8}


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_engines(port: int) -> None:
    """SIGKILL this process's VizDoom engines of the game on `port` (host: -port P, the others:
    -join HOST:P) and remove their /dev/shm segments (a game whose thread is stuck inside it is
    never closed, which would remove them)."""
    instance_ids = set()
    for child in psutil.Process().children():
        try:
            args = child.cmdline()
            if (
                ("-port", str(port)) in zip(args, args[1:]) or f"127.0.0.1:{port}" in args
            ) and "-iwad" in args:
                child.kill()
                instance_ids.add(vizdoom_instance_id(args))
        except psutil.Error:
            # gone already
            pass
    remove_vizdoom_segments(instance_ids - {None})


class DoomNetGame(ParallelEnvBase):
    """`players` learning players (the agents) and `bots` built-in bots in one network game."""

    metadata = {"name": "doom_net_game", "render_modes": []}

    def __init__(
        self,
        scenario: Scenario = DUEL,
        players: int = 2,
        bots: int = 0,
        frameskip: int = 4,
        timelimit_minutes: float = 2.0,
        step_timeout: float = 10.0,
    ):
        if players < 2 or bots < 0 or frameskip < 1 or timelimit_minutes <= 0 or step_timeout <= 0:
            raise EnvError(
                f"doom net game: players {players} must be >= 2, bots {bots} >= 0, frameskip {frameskip} "
                f">= 1, timelimit_minutes and step_timeout positive"
            )
        if players + bots > MAP_STARTS[scenario]:
            raise EnvError(
                f"doom net game: {players} players and {bots} bots, but {scenario.cfg}'s map has starts "
                f"for {MAP_STARTS[scenario]}"
            )
        self.scenario = scenario
        self.num_players = players
        self.bots = bots
        self.frameskip = frameskip
        self.timelimit_minutes = timelimit_minutes
        self.step_timeout = step_timeout
        self.possible_agents = [f"player_{i}" for i in range(players)]
        self.agents: list[str] = []
        # spaces only: no engine starts
        probe = DoomEnv(scenario, frameskip=frameskip)
        self._observation_space = probe.observation_space
        self._action_space = probe.action_space
        self.players: list[Player] = []
        self.port = 0
        # _in_threads' calls that did not return even after their engines died
        self.stuck: list[threading.Thread] = []

    def observation_space(self, agent):
        return self._observation_space

    def action_space(self, agent):
        return self._action_space

    # --- starting and stopping the game
    def _start(self, seed: int | None) -> None:
        for _ in range(START_ATTEMPTS):
            port = free_udp_port()
            envs = [
                DoomEnv(self.scenario, frameskip=self.frameskip) for _ in range(self.num_players)
            ]
            for i, env in enumerate(envs):
                env.game.set_frag_reward(1.0)
                env.game.set_death_penalty(1.0)
                if seed is not None:
                    # one game: every engine draws the same numbers
                    env.game.set_seed(int(seed) % (2**31))
                if i == 0:
                    env.game.add_game_args(
                        f"-host {self.num_players} -port {port} -netmode 0 {NET_ARGS} "
                        f"+timelimit {self.timelimit_minutes} +viz_connect_timeout 10"
                    )
                else:
                    env.game.add_game_args(f"-join 127.0.0.1:{port} +viz_connect_timeout 10")
            self.port = port
            errors = self._in_threads([env.game.init for env in envs], START_TIMEOUT_S)
            announce_engines()
            if not errors:
                for env in envs:
                    env._initialized = True
                self.players = [Player(env) for env in envs]
                return
            kill_engines(port)
            for env in envs:
                self._close(env.game)
        raise EnvError(
            f"doom net game: the players did not connect in {START_ATTEMPTS} tries ({errors[0]})"
        )

    def _stop(self) -> None:
        for player in self.players:
            player.stop()
        # first: close() would wait for a stalled engine; a player's tic then raises
        kill_engines(self.port)
        for player in self.players:
            player.thread.join(timeout=5.0)
            if not player.thread.is_alive():
                self._close(player.game)
        self.players = []

    def _close(self, game) -> None:
        """Close a game unless a call may still be inside it: closing it then makes VizDoom abort.
        Its engine is dead (kill_engines), so a game left open holds only its controller's
        memory."""
        self.stuck = [t for t in self.stuck if t.is_alive()]
        if not self.stuck:
            game.close()

    def _in_threads(self, calls: list, timeout: float) -> list[Exception]:
        """Run the calls at once (each player's engine waits for the others); the errors raised. A
        call still running after `timeout` is a TimeoutError, and the game's engines are killed so
        that it returns: a game may be closed only once no thread is inside it (or VizDoom aborts),
        and it was closed while an init() went on."""
        errors: list[Exception] = []

        def call(fn):
            try:
                fn()
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=call, args=(fn,), daemon=True) for fn in calls]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t for t in threads if t.is_alive()]
        if stuck:
            # a call inside a game whose engine died raises at once
            kill_engines(self.port)
            for t in stuck:
                t.join(STUCK_CALL_GRACE_S)
            self.stuck += [t for t in stuck if t.is_alive()]
            errors.insert(0, TimeoutError(f"not done in {timeout:g} s"))
        return errors

    def _new_episode(self, restart: bool) -> list[Exception]:
        """Every player starts a new episode at once (`restart`; a game just started has one). With
        bots, the host then adds them and the episode starts once more: bots added to a running net
        game cut its next episode short, and one was lost across a restart."""

        def all_players():
            new_episodes = [partial(p.new_episode, self.step_timeout) for p in self.players]
            return self._in_threads(new_episodes, self.step_timeout)

        errors = all_players() if restart else []
        if self.bots and not errors:
            host = self.players[0].game
            host.send_game_command("removebots")
            for _ in range(self.bots):
                host.send_game_command("addbot")
            errors = all_players()
        return errors

    # --- the ParallelEnv interface
    def reset(self, seed=None, options=None):
        fresh = seed is not None or not self.players
        if fresh:
            self._stop()
            self._start(seed)
        errors = self._new_episode(restart=not fresh)
        if errors:
            self._stop()
            raise EnvError(
                f"doom net game: new episode failed ({errors[0]}); the next reset starts a new game"
            )
        if fresh:
            for player in self.players:
                player.start()
        self.agents = list(self.possible_agents)
        return {a: p.obs for a, p in zip(self.agents, self.players)}, {a: {} for a in self.agents}

    def step(self, actions):
        table = self.players[0].env._actions
        for agent, player in zip(self.possible_agents, self.players):
            player.send(table[int(actions[agent])])
        if not all(player.wait_step(self.step_timeout) for player in self.players):
            error = (
                next((p.error for p in self.players if p.error is not None), None)
                or f"a player stalled: tics {[p.tics for p in self.players]}, the step ends at {self.players[0].target}"
            )
            self._stop()
            raise EnvError(
                f"doom net game: a step did not end in {self.step_timeout:g} s "
                f"({error}); the next reset starts a new game"
            )
        over = any(p.finished for p in self.players)
        obs = {a: p.obs for a, p in zip(self.possible_agents, self.players)}
        rewards = {a: p.step_reward for a, p in zip(self.possible_agents, self.players)}
        infos = {a: {} for a in self.possible_agents}
        # every player is finished: no thread is inside a game
        if over:
            # bots' too
            frags = frag_table(self.players[0].game)
            for agent, player in zip(self.possible_agents, self.players):
                stats = {**player.stats(), "win": win_of(frags, player.number)}
                infos[agent] = {
                    "episode_stats": {**stats, "true_objective": stats[self.scenario.objective]}
                }
            self.agents = []
        terminated = {a: False for a in self.possible_agents}
        truncated = {a: over for a in self.possible_agents}
        return obs, rewards, terminated, truncated, infos

    def close(self):
        self._stop()


register_env(
    "doom_duel",
    lambda **options: DoomNetGame(DUEL, **options),
    f"VizDoom: {DUEL.description}",
    {**DOOM_DEFAULTS, "num_envs_per_worker": 4},
)
register_env(
    "doom_deathmatch_full",
    lambda **options: DoomNetGame(DEATHMATCH, **{"players": 4, "bots": 4, **options}),
    f"VizDoom: {DEATHMATCH.description}; 4 players and 4 bots by default, as Sample Factory's",
    {**DOOM_DEFAULTS, "num_envs_per_worker": 2},
)
