#!/usr/bin/env bash
# VizDoom deathmatch against 7 built-in bots (doom_deathmatch_bots: one engine per env, -host 1; +1 a frag, -1 a
# death, 2-minute episodes). Sized for 16+ cores; on fewer cores lower --num_workers. Then the latest policy plays 20
# games against the bots (`--players latest bots`: a win is the most frags of all 8 players). For a duel against one
# bot, --env doom_duel_bots.
source "$(dirname "$0")/run_then_match.sh" doom_deathmatch_bots train_dir "$@"
asyncrl train --env doom_deathmatch_bots --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" --num_workers 16 \
  --num_envs_per_worker 8 --batch_size 2048 --train_for_env_steps 1000000000 "$@" &&
exec asyncrl match --env doom_deathmatch_bots --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" \
  --players latest bots --episodes 20
