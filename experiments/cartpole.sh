#!/usr/bin/env bash
# CartPole-v1 with asyncrl's defaults for vector envs (MLP 64x64, 16 envs per worker, 4 PPO epochs per batch).
exec asyncrl train --env CartPole-v1 --experiment cartpole --train_dir train_dir --train_for_seconds 90 "$@"
