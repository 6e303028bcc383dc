"""How far the acting policy is from the one the learner differentiates under --precision bfloat16
(auto on CPUs with AVX512-BF16): policy workers keep the weights in bfloat16, the learner keeps them
in float32 and runs the encoder and the GRU's products under bfloat16 autocast. The gap shows in
PPO's ratio at zero lag.

    python -m benchmarks.studies.bf16_policy_gap --train_dir DIR --experiment EXP [--steps 400]

Plays the run's latest checkpoint (float32) in its env and prints, over the states visited: |log
ratio| of sampled actions and the KL between each pair of the three policies, and the value gap.
"""

import argparse

import numpy as np
import torch

from asyncrl.commands.saved_run import checkpoint_to_load, config_of_run
from asyncrl.core.checkpoint import load_checkpoint
from asyncrl.envs import make_env
from asyncrl.model.actor_critic import build_model
from asyncrl.model.distributions import kl_divergence


def visited_states(model, env, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(observations, recurrent states) of `steps` steps of the float32 policy."""
    observations = []
    states = []
    obs, _ = env.reset(seed=1)
    state = torch.zeros(1, model.rnn_state_size)
    for _ in range(steps):
        obs = torch.as_tensor(np.asarray(obs))[None]
        observations.append(obs)
        states.append(state)
        params, _, state = model.forward_step(obs, state)
        obs, _, terminated, truncated, _ = env.step(int(model.sample_actions(params)[0]))
        if terminated or truncated:
            obs, _ = env.reset()
            state = torch.zeros_like(state)
    return torch.cat(observations), torch.cat(states)


def gap(name: str, model, params_a: torch.Tensor, params_b: torch.Tensor) -> None:
    """PPO's |log ratio| of actions sampled from b, and the learner's KL(b || a)."""
    a = model.distribution(params_a)
    b = model.distribution(params_b)
    actions = b.sample()
    log_ratio = (a.log_prob(actions) - b.log_prob(actions)).abs()
    kl = kl_divergence(b, a)
    print(
        f"{name}: |log ratio| mean {log_ratio.mean():.4f}, p95 {log_ratio.quantile(0.95):.4f}, max "
        f"{log_ratio.max():.4f}; KL mean {kl.mean():.2e}"
    )


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_dir", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    # the sampled actions: the same states and numbers every run
    torch.manual_seed(0)
    cfg = config_of_run({"train_dir": args.train_dir, "experiment": args.experiment})
    env = make_env(cfg.env, **cfg.env_kwargs())
    weights = load_checkpoint(
        checkpoint_to_load(
            {"checkpoint": None, "load_checkpoint_kind": "latest", "policy_index": 0}, cfg
        ),
        ("model",),
    )["model"]
    models = [build_model(env.observation_space, env.action_space, cfg) for _ in range(2)]
    for model in models:
        model.load_state_dict(weights)
        model.eval()
    learner, acting = models
    # as policy workers keep them
    acting.store_weights_as(torch.bfloat16)
    obs, states = visited_states(learner, env, args.steps)
    full, full_values, _ = learner.forward_step(obs, states)
    acted, acted_values, _ = acting.forward_step(obs, states)
    no_dones = torch.zeros(1, len(obs), dtype=torch.bool)
    learned = learner.forward_sequence(
        torch.stack([obs, obs]), states[None], ~no_dones, no_dones, torch.bfloat16
    )[0][0]
    gap("acting (bfloat16 weights) vs float32", learner, full, acted)
    gap("learner (bfloat16 autocast) vs float32", learner, full, learned)
    gap("learner vs acting", learner, learned, acted)
    print(
        f"PPO's clip: |log ratio| up to {np.log1p(cfg.ppo_clip_ratio):.4f}; value gap (acting vs float32, the value "
        f"head's units) {(full_values - acted_values).abs().mean():.4f}, value std {full_values.std():.4f}"
    )


if __name__ == "__main__":
    main()
