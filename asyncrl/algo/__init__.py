"""The learning math: PPO's losses, V-trace, sequence packing, minibatches, optimizer, schedules."""
