#!/usr/bin/env bash
# Tic-tac-toe (PettingZoo classic, a turn-based game: only the player to move acts, and its action mask keeps it to
# the empty squares) by self-play: one policy in both seats and, in half of the games, a frozen past version of
# itself; an entropy bonus of 0.03 keeps it from settling on one line of play (at the default 0.003 its entropy fell
# to 0.003). Two minutes on 2 CPU cores, then 400 games against a random player (who keeps to the empty squares too):
# two runs here won 298 and 344, drew 53 and 52, lost 49 and 4 (with 0.003: 296, 33, 71; five minutes: 319, 27, 54).
# Its vector observations get the defaults of gymnasium's vector envs (a 64x64 MLP, 16 envs a worker, 4 epochs).
source "$(dirname "$0")/run_then_match.sh" tictactoe_selfplay train_dir "$@"
asyncrl train --env pettingzoo.classic.tictactoe_v3:env --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" \
    --train_for_seconds 120 --exploration_loss_coeff 0.03 --selfplay_snapshot_every_env_steps 100000 "$@" &&
exec asyncrl match --env pettingzoo.classic.tictactoe_v3:env --experiment "$EXPERIMENT" --train_dir "$TRAIN_DIR" \
    --players latest random --episodes 400
