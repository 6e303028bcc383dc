"""The evaluator's scores."""

from types import SimpleNamespace

import torch
from helpers import serial_runner, stop_runner


def test_evaluations_of_the_same_weights_with_sampled_actions_score_the_same(tmp_path):
    from asyncrl.roles.evaluator import Evaluator

    runner = serial_runner(
        tmp_path, eval_every_env_steps=1000, eval_episodes=3, eval_deterministic=False
    )
    evaluator = next(c for c in runner.components if isinstance(c, Evaluator))
    results = []
    # its own reports alone
    evaluator.reports = SimpleNamespace(put=lambda message: results.append(message.result))
    evaluator._evaluate(0, 0)
    # whatever else this process draws in between
    torch.rand(5)
    evaluator._evaluate(0, 0)
    stop_runner(runner)
    assert (
        results[0]["return_mean"] == results[1]["return_mean"] and results[0]["return_std"] > 0
    ), results
