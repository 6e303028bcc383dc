"""Skill ratings of every policy and frozen past version, from the outcomes of multi-agent episodes
(openskill's Plackett-Luce model: a maintained implementation of Bayesian rating, rather than maths
of our own).

The runner owns them: rollout workers report each finished multi-agent episode as (players, scores);
the agents are ranked by score (ties are draws) and rated. A snapshot starts with the rating its
policy had when it was taken; an overwritten pool entry is a new player. Each rating's mu goes to
shared memory for --matchmaking rating; the ratings (ordinal = mu - 3 sigma, a conservative skill
estimate) reach the stats, and every snapshot's rating history is kept in <experiment>/ratings.json,
so one can check that later snapshots are rated higher. A resumed run reads it back: its policies
and the frozen versions its checkpoints restore keep their ratings.
"""

from __future__ import annotations

import json
import os

from asyncrl.cfg.config import Config
from asyncrl.cfg.extras import require
from asyncrl.core.buffers import SharedBuffers, frozen_player
from asyncrl.core.log import log


def openskill_models():
    """openskill.models (the multiagent extra's; MissingExtra if it is not installed)."""
    require("multiagent", "rating the players of multi-agent episodes")
    # an extra's: imported once it is known to be there
    import openskill.models

    return openskill.models


class Ratings:
    def __init__(self, cfg: Config, buffers: SharedBuffers):
        self.cfg = cfg
        self.buffers = buffers
        self.model = openskill_models().PlackettLuce()
        num_players = cfg.num_policies * (1 + cfg.frozen_pool_size)
        # by player
        self.players = [self.model.rating() for _ in range(num_players)]
        self.names = [f"policy_{p}" for p in range(cfg.num_policies)] + [""] * (
            num_players - cfg.num_policies
        )
        # "policy_<p>@<train step>" -> its latest rating, while in the pool
        self.snapshots: dict[str, dict] = {}
        self.matches = 0
        self.path = os.path.join(cfg.experiment_dir, "ratings.json")
        # a resumed run's players by name, until each is back in play
        self.resumed = self._load()
        self._publish()

    def _load(self) -> dict:
        """A resumed run's ratings (ratings.json of its last stop): the policies' own now, and those
        of its frozen versions once the learners announce them back in the pool (add_snapshot finds
        them by name)."""
        try:
            with open(self.path) as f:
                saved = json.load(f)
            players = {
                name: self.model.rating(mu=r["mu"], sigma=r["sigma"])
                for name, r in saved["players"].items()
            }
            self.snapshots = dict(saved["snapshots"])
            self.matches = int(saved["matches"])
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning(f"{self.path} is unreadable ({type(e).__name__}): ratings start afresh")
            return {}
        for p in range(self.cfg.num_policies):
            self.players[p] = players.pop(self.names[p], self.players[p])
        return players

    def add_snapshot(self, policy: int, slot: int, train_step: int) -> None:
        """Frozen version `slot` of `policy` was (re)written: a new player, starting from the policy's
        rating now (or the version's own rating, if a resumed run's checkpoint brought it back)."""
        i = frozen_player(self.cfg, policy, slot)
        self.names[i] = f"policy_{policy}@{train_step}"
        source = self.resumed.pop(self.names[i], self.players[policy])
        self.players[i] = self.model.rating(mu=source.mu, sigma=source.sigma)
        self._remember(i)
        self._publish()

    def add_matches(self, matches: list[tuple[list[int], list[float]]]) -> None:
        for players, scores in matches:
            rated = self.model.rate([[self.players[i]] for i in players], scores=scores)
            for i, (rating,) in zip(players, rated):
                self.players[i] = rating
                self._remember(i)
            self.matches += 1
        self._publish()

    def policy_stats(self, policy: int) -> dict:
        """The policy's rating and the best and mean rating of its frozen versions, for stats.jsonl
        and TensorBoard."""
        stats = {
            "rating_mu": self.players[policy].mu,
            "rating_ordinal": self.players[policy].ordinal(),
            "rated_matches": self.matches,
        }
        pool = [
            self.players[frozen_player(self.cfg, policy, k)]
            for k in range(self.cfg.frozen_pool_size)
            if self.names[frozen_player(self.cfg, policy, k)]
        ]
        if pool:
            stats["pool_rating_ordinal_max"] = max(r.ordinal() for r in pool)
            stats["pool_rating_ordinal_mean"] = sum(r.ordinal() for r in pool) / len(pool)
        return stats

    def save(self) -> None:
        current = {name: _as_dict(r) for name, r in zip(self.names, self.players) if name}
        with open(self.path, "w") as f:
            json.dump(
                {"players": current, "snapshots": self.snapshots, "matches": self.matches},
                f,
                indent=1,
            )

    def _remember(self, i: int) -> None:
        if i >= self.cfg.num_policies:
            self.snapshots[self.names[i]] = _as_dict(self.players[i])

    def _publish(self) -> None:
        for i, rating in enumerate(self.players):
            self.buffers.rating_mu[i] = rating.mu


def _as_dict(rating) -> dict:
    return {"mu": rating.mu, "sigma": rating.sigma, "ordinal": rating.ordinal()}
