"""The flags of evaluation during training."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag


@dataclass
class EvaluationFlags:
    """Evaluation during training"""

    eval_every_env_steps: int = flag(
        0,
        "Every this many env steps (frames) of a policy, an evaluator process plays "
        "--eval_episodes with its newest weights on fixed seeds: eval/ curves in "
        "TensorBoard, eval.jsonl, and best_checkpoint.pth by evaluation score; a run that reaches its limit "
        "evaluates its final weights too. 0: off.",
    )
    eval_episodes: int = flag(10, "Episodes per evaluation.")
    eval_deterministic: bool = flag(
        False,
        "Evaluate (and `asyncrl enjoy`) with the most likely action instead of a sampled one.",
    )
