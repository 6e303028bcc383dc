"""Several ranks that train one policy (DD-PPO) over torch.distributed."""
