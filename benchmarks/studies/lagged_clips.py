"""How much of a batch's gradient PPO's clips cut before its first update when the acting policy is
older than the learner's weights (APPO's lag), if the clips are taken around the acting policy's
outputs, as before 2026-11-29.

    git apply benchmarks/studies/results/pong_dump_batches.patch   # the learner saves weights and every 8th batch
    mkdir DUMP && ASYNCRL_DUMP=DUMP python -m asyncrl train --env atari_pong --num_workers 1 \\
        --num_envs_per_worker 8 --shuffle_samples True --ppo_clip_value 0.1 --seed 1 --train_dir D --experiment E \\
        --train_for_seconds 180
    python -m benchmarks.studies.lagged_clips --train_dir D --experiment E --dump DUMP

For each dumped batch: the acting outputs are recomputed from the acting version's weights as the policy workers hold
them (bfloat16 under --precision auto on such a CPU; their log-probs are checked against the stored ones), the
current ones from the weights the update starts from. Prints the share of learned samples whose value (ratio) lies
outside the clip around the acting estimate (policy), and the share whose gradient the pessimistic clip then cuts:
values whose clipped term is the larger (moved past the clip toward their GAE target), ratios past it in their
advantage's direction.
"""

import argparse
import glob
import os

import torch

from asyncrl.algo import losses
from asyncrl.commands.saved_run import config_of_run
from asyncrl.envs import make_agents
from asyncrl.model.actor_critic import build_model
from asyncrl.model.precision import low_precision


def outputs(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs of the taken actions [T, B], values [T+1, B]) of a feed-forward model."""
    T, B = batch["actions"].shape
    with torch.no_grad():
        obs = batch["obs"].flatten(0, 1)
        params, values = model.heads(model.encode(obs), model.action_mask(obs))
    log_probs = torch.log_softmax(params.view(T + 1, B, -1)[:-1], -1)
    return log_probs.gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1), values.view(T + 1, B)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_dir", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--dump", required=True, help="the folder ASYNCRL_DUMP named")
    args = parser.parse_args()
    cfg = config_of_run({"train_dir": args.train_dir, "experiment": args.experiment})
    env = make_agents(cfg.env, **cfg.env_kwargs())

    def model_of(version: int, acting: bool):
        model = build_model(env.observation_space, env.action_space, cfg).eval()
        model.load_state_dict(torch.load(f"{args.dump}/w{version:04d}.pt"))
        if acting and (dtype := low_precision(cfg, torch.device("cpu"), model)) is not None:
            model.store_weights_as(dtype)
        return model

    c_ratio = cfg.ppo_clip_ratio
    c_value = cfg.ppo_clip_value
    print(f"ratio clip {c_ratio}, value clip {c_value}")
    for path in sorted(glob.glob(f"{args.dump}/b*.pt"))[1:]:
        k = int(os.path.basename(path)[1:5])
        batch = torch.load(path)
        valid = batch["valid"]
        logp_now, values_now = outputs(model_of(k, acting=False), batch)
        values_acting = torch.zeros_like(values_now[:-1])
        for version in batch["policy_version"][valid].unique().tolist():
            rows = valid & (batch["policy_version"] == version)
            logp, values = outputs(model_of(version, acting=True), batch)
            assert (logp - batch["behavior_logp"])[rows].abs().max() < 1e-4, (
                "not the acting version's weights"
            )
            values_acting[rows] = values[:-1][rows]
        advantages, targets = losses.gae(
            batch["rewards"].clamp(-cfg.reward_clip, cfg.reward_clip),
            values_now[:-1],
            values_now[-1],
            cfg.gamma * (~batch["dones"]).float(),
            cfg.gae_lambda,
            valid,
        )
        moved = values_now[:-1] - values_acting
        value_out = moved.abs() > c_value
        clipped = values_acting + moved.clamp(-c_value, c_value)
        value_cut = value_out & ((clipped - targets) ** 2 > (values_now[:-1] - targets) ** 2)
        ratio = torch.exp(logp_now - batch["behavior_logp"])
        ratio_out = (ratio > 1 + c_ratio) | (ratio < 1 / (1 + c_ratio))
        ratio_cut = (ratio > 1 + c_ratio) & (advantages > 0) | (ratio < 1 / (1 + c_ratio)) & (
            advantages < 0
        )

        def share(x, valid=valid):
            return float(x[valid].float().mean())

        lag = float((k - batch["policy_version"][valid]).float().mean())
        print(
            f"batch {k:3d} lag {lag:.1f}: values outside the clip {share(value_out):.2f}, gradient cut "
            f"{share(value_cut):.2f} | ratios outside the clip {share(ratio_out):.2f}, gradient cut "
            f"{share(ratio_cut):.2f}"
        )


if __name__ == "__main__":
    main()
