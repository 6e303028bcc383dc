"""One player of a VizDoom network game: its engine, ticked one tic at a time by a thread of its own
that may run a little ahead of its controller (doom_netgame.py says why)."""

from __future__ import annotations

import threading

import numpy as np

from asyncrl.envs.doom import (
    DoomEnv,
)

# see doom_netgame.py's docstring: how long a player waits for its next action before it ticks on
KICK_AFTER_S = 0.002


class Player:
    """One engine and the thread that ticks it. The step's caller raises `target` (the tic its step
    ends on) by frameskip; the thread reports the step's observation and reward once it has run that
    tic."""

    def __init__(self, env: DoomEnv):
        import vizdoom as vzd

        self.env = env
        self.game = env.game
        self.frameskip = env.frameskip
        self.changed = threading.Condition()
        self.action = env._actions[0]
        self.tics = self.target = self.done_to = 0
        self.reward = 0.0
        self.step_reward = 0.0
        # busy: the thread is inside a tic
        self.finished = self.closed = self.busy = False
        self.error: Exception | None = None
        self.obs = np.zeros(env.observation_space.shape, np.uint8)
        self.at_start = np.zeros(len(env._stat_variables))
        # its index in frag_table
        self.number = int(self.game.get_game_variable(vzd.GameVariable.PLAYER_NUMBER))
        self.thread = threading.Thread(target=self._run, daemon=True, name="asyncrl-doom-player")

    def start(self) -> None:
        self.obs = self.env._observe()
        self.at_start = self._counters()
        self.start_time = self.game.get_episode_time()
        self.thread.start()

    def _may_tick(self, extra: int) -> bool:
        return not (self.finished or self.closed) and self.tics < self.target + extra

    def _run(self) -> None:
        try:
            while True:
                with self.changed:
                    extra = 0
                    while not self._may_tick(extra):
                        if self.closed:
                            return
                        may_kick = (
                            not self.finished and self.tics - self.target < self.frameskip - 1
                        )
                        if not self.changed.wait(KICK_AFTER_S if may_kick else None) and may_kick:
                            # waited in vain: one more tic with the last action (module docstring)
                            extra += 1
                    action = self.action
                    boundary = self.target - 2 <= self.tics < self.target
                    self.busy = True
                try:
                    self._tick(action, boundary)
                finally:
                    with self.changed:
                        self.busy = False
                        self.changed.notify_all()
        # the engine died (or was killed at close): the waiting step hears of it
        except Exception as e:
            with self.changed:
                self.error = e
                self.changed.notify_all()

    def _tick(self, action, boundary: bool) -> None:
        game = self.game
        game.set_action(action)
        # render only the step's last tic
        game.advance_action(1, boundary)
        # the dead respawn (sv_forcerespawn)
        reward = game.get_last_reward()
        finished = game.is_episode_finished()
        obs = self.env._observe() if boundary or finished else None
        with self.changed:
            # the engine's count: see the module docstring
            self.tics = game.get_episode_time() - self.start_time
            self.reward += reward
            if (self.tics >= self.target and self.done_to < self.target) or finished:
                self.obs = obs if obs is not None else self.obs
                self.step_reward = self.reward
                self.reward = 0.0
                self.done_to = self.target
                self.finished = finished
                self.changed.notify_all()

    def send(self, action) -> None:
        with self.changed:
            self.action = action
            self.target = self.target + self.frameskip
            self.changed.notify_all()

    def wait_step(self, timeout: float) -> bool:
        """Whether the step ended in time. A finished episode ends every step: it may have ended on
        a tic run ahead (past the previous step), and its engine runs no more."""
        with self.changed:
            self.changed.wait_for(lambda: self._step_done() or self.error is not None, timeout)
            return self._step_done()

    def _step_done(self) -> bool:
        return self.done_to == self.target or self.finished

    def new_episode(self, timeout: float) -> None:
        # no tic may run during new_episode(): two threads inside one game crash VizDoom
        with self.changed:
            self.finished = True
            if not self.changed.wait_for(lambda: not self.busy, timeout):
                raise TimeoutError(f"a tic did not end in {timeout:g} s")
        self.game.new_episode()
        with self.changed:
            self.tics = self.target = self.done_to = 0
            self.reward = 0.0
            self.finished = False
            self.obs = self.env._observe()
            self.at_start = self._counters()
            self.start_time = self.game.get_episode_time()

    def _counters(self) -> np.ndarray:
        return np.array([self.game.get_game_variable(v) for v in self.env._stat_variables.values()])

    def stats(self) -> dict:
        """The episode's frags, deaths and damage (the scenario's stats; the engine's counters may
        run on over episodes)."""
        return dict(zip(self.env._stat_variables, (self._counters() - self.at_start).tolist()))

    def stop(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()
