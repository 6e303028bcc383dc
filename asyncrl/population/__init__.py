"""Several policies: matchmaking, skill ratings, population-based training."""
