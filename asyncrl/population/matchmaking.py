"""Who plays an env's agents for an episode: learning policies, or, in self-play, a learning policy
against frozen past versions (buffers.frozen_player). Called by the rollout worker at every env
reset."""

from __future__ import annotations

import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import frozen_player

# --matchmaking rating: an opponent's weight falls with its rating's distance to the learning policy's, as a Gaussian of
# this width (openskill's starting sigma, 25/3: opponents within one starting uncertainty are about as likely)
RATING_WIDTH = 25 / 3


def draw_players(
    n: int, cfg: Config, rng: np.random.Generator, frozen_version: np.ndarray, rating_mu: np.ndarray
) -> np.ndarray:
    """Acting ids for an env's n agents. With a frozen pool, a --selfplay_frozen_fraction of multi-agent episodes
    seat one learning policy (on a random seat) against frozen versions, chosen uniformly or by rating
    (--matchmaking); otherwise each agent draws a learning policy (or one for the whole env without
    --pbt_mix_policies_in_one_env)."""
    P = cfg.num_policies
    if n >= 2 and cfg.frozen_pool_size and rng.random() < cfg.selfplay_frozen_fraction:
        available = [frozen_player(cfg, p, k) for p, k in np.argwhere(frozen_version >= 0)]
        if available:
            learner = int(rng.integers(P))
            if cfg.matchmaking == "rating":
                weights = np.exp(
                    -0.5 * ((rating_mu[available] - rating_mu[learner]) / RATING_WIDTH) ** 2
                )
                opponents = rng.choice(available, size=n - 1, p=weights / weights.sum())
            else:
                opponents = rng.choice(available, size=n - 1)
            players = np.array([learner, *opponents], np.int64)
            rng.shuffle(players)
            return players
    if P == 1:
        return np.zeros(n, np.int64)
    if cfg.pbt_mix_policies_in_one_env:
        return rng.integers(P, size=n)
    return np.full(n, rng.integers(P))


def owner_policies(cfg: Config, players: np.ndarray) -> np.ndarray:
    """The policy whose policy workers serve each player (a frozen version's: the policy it was
    taken from)."""
    P = cfg.num_policies
    K = max(1, cfg.frozen_pool_size)
    return np.where(players < P, players, (players - P) // K)
