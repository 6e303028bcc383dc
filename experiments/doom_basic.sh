#!/usr/bin/env bash
# VizDoom basic, headless: rendered at 256x144, the model sees every second pixel (3x72x128); conv encoder +
# 512-unit GRU (Sample Factory's model), frameskip 4, reward scale 0.01.
exec asyncrl train --env doom_basic --experiment doom_basic --train_dir train_dir --num_workers 2 \
  --num_envs_per_worker 8 --train_for_env_steps 2000000 "$@"
