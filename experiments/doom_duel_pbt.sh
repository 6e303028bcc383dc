#!/usr/bin/env bash
# VizDoom duels by self-play with population-based training. Each env is a network game of two learning players
# (doom_duel: two engines on a loopback UDP port of their own); 4 policies share the games (each player draws a policy
# per episode) and, in half of them, play frozen past versions of themselves (a snapshot every 10M env steps). Every
# 5M env steps of a policy, PBT ranks the policies by their win rate (the env's true_objective): a bottom one copies a
# top one's weights and Adam state in memory, and hyperparameters mutate (pbt.jsonl). Sized for 16+ cores: every
# game runs 2 engines; on fewer cores lower --num_workers. Then the latest policy 0 plays a random player.
source "$(dirname "$0")/run_then_match.sh" doom_duel_pbt train_dir "$@"
asyncrl train --env doom_duel --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" --num_policies 4 --with_pbt True \
  --pbt_period_env_steps 5000000 --selfplay_snapshot_every_env_steps 10000000 --num_workers 16 \
  --num_envs_per_worker 4 --batch_size 2048 --train_for_env_steps 2000000000 "$@" &&
exec asyncrl match --env doom_duel --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" \
  --players latest random --episodes 20
