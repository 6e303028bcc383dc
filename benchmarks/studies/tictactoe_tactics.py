"""How well a trained tic-tac-toe policy plays its tactics: in positions reached by 0-6 random moves
from the start, how often its most likely move takes an immediate win when it has one, and blocks
the opponent's when it has none.

    python -m benchmarks.studies.tictactoe_tactics --experiment tictactoe_selfplay [--train_dir train_dir]
        [--positions 2000]

(after `bash experiments/tictactoe_selfplay.sh`). A perfect player scores 1 on both; a random one
about 1 / (legal moves).
"""

import argparse
import os

import numpy as np
import torch

from asyncrl.commands.saved_run import config_of_run
from asyncrl.core.checkpoint import list_checkpoints, load_weights
from asyncrl.envs import make_agents
from asyncrl.model.actor_critic import build_model

ENV = "pettingzoo.classic.tictactoe_v3:env"
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def completes_a_line(marks: np.ndarray, square: int) -> bool:
    marks = marks.copy()
    marks[square] = 1
    return any(all(marks[i] for i in line) for line in LINES)


def random_position(env, rng) -> np.ndarray | None:
    """The observation of the player to move after 0-6 random moves (None if the game ended on the
    way)."""
    obs, _ = env.reset(seed=int(rng.integers(2**31)))
    for _ in range(int(rng.integers(0, 7))):
        mover = env.waits.index(False)
        obs, _, terminated, _, _ = env.step([int(rng.choice(np.flatnonzero(obs[mover][-9:])))] * 2)
        if any(terminated):
            return None
    return obs[env.waits.index(False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--train_dir", default="train_dir")
    parser.add_argument("--positions", type=int, default=2000)
    args = parser.parse_args()
    cfg = config_of_run({"experiment": args.experiment, "train_dir": args.train_dir, "env": ENV})
    env = make_agents(ENV)
    model = build_model(env.observation_space, env.action_space, cfg).eval()
    load_weights(
        list_checkpoints(os.path.join(args.train_dir, args.experiment, "checkpoint_p0"))[-1], model
    )
    rng = np.random.default_rng(0)
    counts = {"win": [0, 0], "block": [0, 0]}
    for _ in range(args.positions):
        obs = random_position(env, rng)
        if obs is None:
            continue
        # each square: (this player's mark, the opponent's)
        board = obs[:18].reshape(9, 2)
        legal = np.flatnonzero(obs[-9:])
        with torch.no_grad():
            move = int(
                model.forward_step(torch.as_tensor(obs)[None], torch.zeros(1, 0))[0].argmax()
            )
        wins = [s for s in legal if completes_a_line(board[:, 0], s)]
        threats = [s for s in legal if completes_a_line(board[:, 1], s)]
        kind, good = ("win", wins) if wins else ("block", threats)
        if good:
            counts[kind][0] += move in good
            counts[kind][1] += 1
    for kind, (hits, seen) in counts.items():
        print(f"{kind}: {hits} of {seen} positions ({hits / max(1, seen):.2f})")


if __name__ == "__main__":
    main()
