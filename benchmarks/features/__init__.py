"""What a feature costs or gives: PBT, self-play, DD-PPO, remote envs, tune, evaluation, VER."""
