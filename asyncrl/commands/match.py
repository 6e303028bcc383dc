"""`asyncrl match`: two players head to head in a two-agent env for N episodes; prints wins, draws,
losses and their skill ratings after those games (openskill, as in training).

    asyncrl match --env grid_duel --experiment selfplay --players latest scripted --episodes 200

A player is `latest` or `best` (the run's checkpoint of --policy_index, like `asyncrl enjoy`), a
checkpoint file, `scripted` (the env's own `scripted_action(agent)` opponent, e.g. grid_duel's) or
`random`. The players swap seats every episode; an episode's winner has the higher score (the env's
true_objective, else the return).

    asyncrl match --env doom_duel_bots --experiment duel_bots --players latest bots --episodes 20

`bots` as the second player: a one-agent env whose opponents are its own built-in bots (VizDoom's
doom_duel_bots, doom_deathmatch_bots); the first player is the agent, and the env's `win` stat
scores each episode.
"""

from __future__ import annotations

import json
import os

import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments
from asyncrl.commands.hub import add_hub_argument, run_from_hub
from asyncrl.commands.saved_run import checkpoint_to_load, config_of_run
from asyncrl.envs import make_agents
from asyncrl.envs.multi_agent import random_action


class ScriptedPlayer:
    def reset(self) -> None:
        pass

    def act(self, env, seat: int, obs) -> object:
        return env.env.scripted_action(env.agent_ids[seat])


class RandomPlayer:
    """Uniform over the actions: the allowed ones, for an env with an action mask."""

    def reset(self) -> None:
        pass

    def act(self, env, seat: int, obs) -> object:
        return random_action(env, obs)


def make_player(spec: str, env, cfg: Config, policy_index: int):
    if spec == "random":
        return RandomPlayer()
    if spec == "scripted":
        if not hasattr(getattr(env, "env", None), "scripted_action"):
            raise ConfigError(
                f"--players scripted: env {cfg.env!r} has no scripted opponent (no scripted_action)"
            )
        return ScriptedPlayer()
    kind = {"latest": ("latest", None), "best": ("best", None)}.get(spec, ("latest", spec))
    which = {"checkpoint": kind[1], "load_checkpoint_kind": kind[0], "policy_index": policy_index}
    path = checkpoint_to_load(which, cfg)
    # torch's import (seconds) after the flags and the path are checked
    from asyncrl.roles.evaluator import ModelPlayer

    return ModelPlayer(path, env, cfg)


def play_match(env, players: list, episodes: int, seed: int) -> list[float]:
    """Player 0's result per episode: 1 win, 0.5 draw, 0 loss (the players swap seats every
    episode)."""
    results = []
    for i in range(episodes):
        seated = players if i % 2 == 0 else players[::-1]
        obs, _ = env.reset(seed=seed + i)
        for player in seated:
            player.reset()
        playing = [True, True]
        returns = [0.0, 0.0]
        scores = [0.0, 0.0]
        while any(playing):
            obs, rewards, terminated, truncated, infos = env.step(
                [p.act(env, s, obs[s]) for s, p in enumerate(seated)]
            )
            for s in range(2):
                if playing[s]:
                    returns[s] += float(rewards[s])
                    if terminated[s] or truncated[s]:
                        playing[s] = False
                        scores[s] = float(
                            infos[s].get("episode_stats", {}).get("true_objective", returns[s])
                        )
        # the players swap seats every episode
        mine = scores[i % 2]
        theirs = scores[1 - i % 2]
        results.append(result_of(mine, theirs))
    return results


def result_of(mine: float, theirs: float) -> float:
    """1 for a win, 0.5 for a draw, 0 for a loss."""
    if mine == theirs:
        return 0.5
    return 1.0 if mine > theirs else 0.0


def play_against_bots(env, player, episodes: int, seed: int) -> list[float]:
    """The only agent's result per episode against the env's own bots: its `win` stat (1 win, 0.5
    draw, 0 loss)."""
    results = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        player.reset()
        done = False
        while not done:
            obs, _, terminated, truncated, infos = env.step([player.act(env, 0, obs[0])])
            done = terminated[0] or truncated[0]
        win = infos[0].get("episode_stats", {}).get("win")
        if win is None:
            raise ConfigError(
                "--players ... bots: the env reports no win at an episode's end (episode_stats['win']); "
                "bots are the opponents of VizDoom's doom_duel_bots and doom_deathmatch_bots"
            )
        results.append(float(win))
    return results


def match(argv: list[str]) -> int:
    parser = OneLineErrorParser(
        prog="asyncrl match",
        usage="%(prog)s --players PLAYER PLAYER [--episodes N] [--FLAG VALUE ...]",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "--players",
        nargs=2,
        required=True,
        metavar="PLAYER",
        help="latest, best, a checkpoint file, scripted or random; the second may be bots (the env's "
        "own, in a one-agent env).",
    )
    parser.add_argument("--episodes", type=int, default=100, help="Episodes to play.")
    parser.add_argument(
        "--policy_index", type=int, default=0, help="The run's policy that latest/best load."
    )
    parser.add_argument(
        "--out",
        type=os.path.expanduser,
        default=None,
        help="Also write the result as JSON to this file.",
    )
    add_hub_argument(parser)
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    args = {
        k: given.pop(k) for k in ("players", "episodes", "policy_index", "out", "hf_repository")
    }
    if args["episodes"] <= 0:
        raise ConfigError(f"--episodes must be positive, got {args['episodes']}")
    # said before any game
    require("multiagent", "asyncrl match's ratings")
    cfg = config_of_run(run_from_hub(given, args["hf_repository"]))
    env = make_agents(cfg.env, **cfg.env_kwargs())
    against_bots = args["players"][1] == "bots"
    try:
        if env.num_agents != (1 if against_bots else 2):
            raise ConfigError(
                f"asyncrl match plays two players, or one agent against the env's bots (--players X "
                f"bots): env {cfg.env!r} has {env.num_agents} agent(s)"
            )
        players = [
            make_player(spec, env, cfg, args["policy_index"])
            for spec in args["players"][: 2 - against_bots]
        ]
        import torch

        torch.manual_seed(cfg.seed or 0)
        env.action_space.seed(cfg.seed or 0)
        if against_bots:
            results = play_against_bots(env, players[0], args["episodes"], cfg.seed or 0)
        else:
            results = play_match(env, players, args["episodes"], cfg.seed or 0)
    finally:
        env.close()
    # the multiagent extra's, checked above
    from openskill.models import PlackettLuce

    summary = summarize(PlackettLuce(), args["players"], results)
    print(summary["line"], flush=True)
    if args["out"]:
        with open(args["out"], "w") as f:
            json.dump(summary, f, indent=2)
    return 0


def summarize(model, names: list[str], results: list[float]) -> dict:
    """Counts, win rate, and the two players' ratings by `model` (openskill's) after rating these
    games in order."""
    ratings = [model.rating(), model.rating()]
    for r in results:
        [[ratings[0]], [ratings[1]]] = model.rate([[ratings[0]], [ratings[1]]], scores=[r, 1 - r])
    wins = sum(r == 1 for r in results)
    draws = sum(r == 0.5 for r in results)
    losses = len(results) - wins - draws
    line = (
        f"{names[0]} vs {names[1]}: {wins} wins, {draws} draws, {losses} losses in {len(results)} episodes "
        f"(win rate {wins / len(results):.3f}); ratings mu {ratings[0].mu:.1f} vs {ratings[1].mu:.1f} "
        f"(ordinal {ratings[0].ordinal():.1f} vs {ratings[1].ordinal():.1f})"
    )
    return {
        "players": names,
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "win_rate": wins / len(results),
        "score": float(np.mean(results)),
        "ratings_mu": [r.mu for r in ratings],
        "line": line,
    }
