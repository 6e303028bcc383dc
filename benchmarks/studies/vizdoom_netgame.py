"""Can VizDoom network players be stepped as one multi-agent env in synchronous mode (Mode.PLAYER)?
(issue 14)

    python -m benchmarks.studies.vizdoom_netgame [--seconds 25] [--frameskip 4]

Two players of multi_duel.cfg on loopback UDP (host + one joiner), each engine driven by a thread of
this process one tic at a time (advance_action(1)); every env step hands each player an action and
waits until every player has run --frameskip tics. How a player may run past the step's last tic
while it waits for its next action:

    lockstep   not at all: it stops at the step's last tic
    ahead_N    up to N tics, with its last action (they count towards the next step)
    kick       not at first; each time it has waited 2 ms with nothing new, one more tic (up to frameskip - 1)

A player's engine stops exchanging tics with the others while it waits for its controller, and a peer may need
one of them to finish the step (ZDoom's net code acknowledges and resends while it runs tics). Each rule runs for
--seconds with random actions; a step that waits more than 5 s counts as a stall and ends the run. Writes
benchmarks/studies/results/vizdoom_netgame.md.

Tics are counted on each engine's clock (get_episode_time), and a finished episode ends the step.
The first version of this study counted advance_action calls, but one call may run two tics when
ZDoom catches up with its peers, and an episode could end on a tic run past the step; so it saw
every rule but kick stall within 3-19 s. Counted right, none stalls in 25 s, and lock-step was the
slowest rule in both runs made (351 and 113 steps/s per player; kick 488 and 357).
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

import vizdoom as vzd

from asyncrl.envs.doom_netgame import free_udp_port  # noqa: E402
from benchmarks.common import machine

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
KICK_AFTER_S = 0.002
STALL_S = 5.0


def new_game(port: int, host: bool) -> vzd.DoomGame:
    game = vzd.DoomGame()
    game.load_config(os.path.join(vzd.scenarios_path, "multi_duel.cfg"))
    game.set_window_visible(False)
    game.set_screen_resolution(vzd.ScreenResolution.RES_256X144)
    game.set_mode(vzd.Mode.PLAYER)
    game.set_available_buttons([vzd.Button.ATTACK, vzd.Button.MOVE_FORWARD, vzd.Button.TURN_LEFT])
    if host:
        game.add_game_args(
            f"-host 2 -port {port} -netmode 0 -deathmatch +timelimit 0.25 +sv_forcerespawn 1 "
            f"+sv_spawnfarthest 1 +sv_respawnprotect 1 +viz_nocheat 1"
        )
    else:
        game.add_game_args(f"-join 127.0.0.1:{port}")
    return game


class Player:
    """One engine, ticked by a thread of its own; the step's caller sets `target` (the tic the step
    ends on)."""

    def __init__(self, game: vzd.DoomGame, ahead: int, kick: bool, frameskip: int):
        self.game = game
        self.ahead = ahead
        self.kick = kick
        self.frameskip = frameskip
        self.changed = threading.Condition()
        self.action = [0, 0, 0]
        self.tics = 0
        self.target = 0
        self.done_to = 0
        self.finished = False
        self.kicks = 0
        self.start_time = game.get_episode_time()
        threading.Thread(target=self._run, daemon=True).start()

    def _may_run(self, extra: int) -> bool:
        return not self.finished and self.tics < self.target + self.ahead + extra

    def _run(self) -> None:
        while True:
            with self.changed:
                extra = 0
                while not self._may_run(extra):
                    waited_in_vain = not self.changed.wait(KICK_AFTER_S if self.kick else None)
                    if (
                        waited_in_vain
                        and not self.finished
                        and self.tics - self.target < self.frameskip - 1
                    ):
                        extra = extra + 1
                        self.kicks = self.kicks + 1
                action = self.action
            self.game.set_action(action)
            self.game.advance_action(1, True)
            finished = self.game.is_episode_finished()
            with self.changed:
                self.tics = (
                    self.game.get_episode_time() - self.start_time
                    # a call may run two tics: count the engine's
                )
                if (self.tics >= self.target and self.done_to < self.target) or finished:
                    self.done_to = self.target
                    self.finished = finished
                    self.changed.notify_all()

    def send(self, action: list) -> None:
        with self.changed:
            self.action = action
            self.target = self.target + self.frameskip
            self.changed.notify_all()

    def wait_step(self) -> bool:
        """Whether the step ended within STALL_S (False: a stall)."""
        with self.changed:
            return self.changed.wait_for(
                lambda: self.done_to == self.target or self.finished, STALL_S
            )

    def new_episode(self) -> None:
        self.game.new_episode()
        with self.changed:
            self.start_time = self.game.get_episode_time()
            self.tics = self.target = self.done_to = 0
            self.finished = False
            self.changed.notify_all()


def run_rule(rule: str, seconds: float, frameskip: int) -> dict:
    port = free_udp_port()
    games = [new_game(port, host=True), new_game(port, host=False)]
    starting = [threading.Thread(target=g.init) for g in games]
    for t in starting:
        t.start()
    for t in starting:
        t.join()
    ahead = int(rule.split("_")[1]) if rule.startswith("ahead_") else 0
    players = [Player(g, ahead, rule == "kick", frameskip) for g in games]
    steps = 0
    episodes = 0
    stalled = False
    start = time.monotonic()
    while time.monotonic() - start < seconds and not stalled:
        for p in players:
            p.send([random.random() < 0.5, random.random() < 0.7, random.random() < 0.3])
        stalled = not all(p.wait_step() for p in players)
        steps += 1
        if not stalled and any(p.finished for p in players):
            episodes += 1
            resetting = [threading.Thread(target=p.new_episode) for p in players]
            for t in resetting:
                t.start()
            for t in resetting:
                t.join()
    elapsed = time.monotonic() - start - (STALL_S if stalled else 0)
    return {
        "rule": rule,
        "steps": steps,
        "episodes": episodes,
        "stalled": stalled,
        "seconds": elapsed,
        "steps_per_s": steps / elapsed,
        "kicks": [p.kicks for p in players],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25)
    parser.add_argument("--frameskip", type=int, default=4)
    parser.add_argument(
        "--rule", help="run only this rule, in this process (the script runs each in a child)"
    )
    args = parser.parse_args()
    if args.rule:
        print(json.dumps(run_rule(args.rule, args.seconds, args.frameskip)), flush=True)
        # a stalled engine thread would hold a normal exit up
        os._exit(0)
    rows = []
    for rule in ("lockstep", "ahead_1", "ahead_2", "ahead_3", "kick"):
        # not a pipe: the engines a stall leaves would hold it open
        with tempfile.TemporaryFile("w+") as out:
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    __spec__.name,
                    "--rule",
                    rule,
                    "--seconds",
                    str(args.seconds),
                    "--frameskip",
                    str(args.frameskip),
                ],
                stdout=out,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            child.wait()
            # its engines, which a stalled game leaves running
            os.killpg(child.pid, signal.SIGKILL)
            out.seek(0)
            rows.append(json.loads(out.read().strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    lines = [
        "# VizDoom network players stepped as one env (Mode.PLAYER, 2 players on loopback)",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `python -m benchmarks.studies.vizdoom_netgame --seconds {args.seconds:g} "
        f"--frameskip {args.frameskip}` (vizdoom {vzd.__version__})",
        "",
        "| rule | steps | episodes | stalled | steps/s per player | kicks (host, joiner) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['rule']} | {r['steps']} | {r['episodes']} | {'yes' if r['stalled'] else 'no'} | "
        f"{r['steps_per_s']:.0f} | {r['kicks']} |"
        for r in rows
    ]
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "vizdoom_netgame.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
