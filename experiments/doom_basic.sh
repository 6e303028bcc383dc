#!/usr/bin/env bash
# VizDoom basic, headless, from 160x120 pixels: conv encoder + 512-unit GRU, frameskip 4, reward scale 0.01.
exec asyncrl train --env doom_basic --experiment doom_basic --train_dir train_dir --num_workers 2 \
  --num_envs_per_worker 8 --train_for_env_steps 2000000 "$@"
