"""Train with PufferLib 3.0's own trainer (pufferlib.pufferl.PuffeRL, the loop of its `puffer train`)
and print each of its logs as a line `pufferlib_log {JSON}`: its uptime, agent steps, steps/s and
mean episode score since the last log.

Runs in PufferLib's virtualenv (pufferlib_compare.py builds it and starts this):
    python -m benchmarks.peers.pufferlib_train --env puffer_cartpole --seconds 60 [PufferLib's flags]

--env puffer_cartpole: its C cartpole with its config (pufferlib/config/ocean/cartpole.ini);
--env CartPole-v1: gymnasium's, as PufferLib's classic_control family wraps a gymnasium env (its
episode statistics, its emulation), with that family's config; the family's own module does not
import in 3.0.0 (it imports a pufferlib.postprocess that the release lacks), and it would clip
observations to [-1, 1], which this env is not. The flags after those go to PufferLib's own parser
(e.g. --train.seed 1 --train.device cpu --vec.backend Serial).
"""

import argparse
import functools
import json
import sys

import gymnasium
import pufferlib
import pufferlib.emulation
import pufferlib.models
import pufferlib.pufferl
import pufferlib.vector

# our env name -> the env name PufferLib's config files know it by
CONFIG_NAME = {"puffer_cartpole": "puffer_cartpole", "CartPole-v1": "cartpole"}
# the episode statistic each env's score is: the C cartpole's "score" (its episode length, at most
# 200), gymnasium's episode return (at most 500)
SCORE_KEY = {"puffer_cartpole": "environment/score", "CartPole-v1": "environment/episode_return"}


class PrintLogs:
    """PuffeRL's logger: a line per log, the score None where no episode ended since the last."""

    def __init__(self, env: str):
        self.score_key = SCORE_KEY[env]
        # the name its checkpoints are saved under
        self.run_id = f"pufferlib_{env}"

    def log(self, logs: dict, step: int) -> None:
        score = logs.get(self.score_key)
        row = {
            "uptime_s": logs["uptime"],
            "agent_steps": logs["agent_steps"],
            "steps_per_s": logs["SPS"],
            "score": None if score is None else float(score),
        }
        print("pufferlib_log " + json.dumps(row), flush=True)

    def close(self, model_path) -> None:
        pass


def make_gymnasium_env(env_id: str, buf=None, seed=0):
    env = pufferlib.EpisodeStats(gymnasium.make(env_id))
    return pufferlib.emulation.GymnasiumPufferEnv(env=env, buf=buf, seed=seed)


def make_vecenv(env: str, args: dict):
    if env == "CartPole-v1":
        make_one = functools.partial(make_gymnasium_env, env)
        return pufferlib.vector.make(make_one, env_kwargs=args["env"], **args["vec"])
    return pufferlib.pufferl.load_env(CONFIG_NAME[env], args)


def make_policy(policy: str, args: dict, vecenv):
    if policy == "mlp64":
        # PufferLib's default policy 64 wide, without recurrence: its classic_control family's
        model = pufferlib.models.Default(vecenv.driver_env, hidden_size=64)
        return model.to(args["train"]["device"])
    return pufferlib.pufferl.load_policy(args, vecenv)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", choices=sorted(CONFIG_NAME), required=True)
    parser.add_argument("--seconds", type=float, required=True, help="stop after this much uptime")
    parser.add_argument(
        "--policy",
        choices=["config", "mlp64"],
        default="config",
        help="config: the one the env's config names (the C cartpole's: its default MLP 128 wide and an LSTM "
        "of 128); mlp64: its default MLP 64 wide, no recurrence (always for CartPole-v1, whose family's it is)",
    )
    ours, theirs = parser.parse_known_args()
    # PufferLib's config parser reads sys.argv
    sys.argv = [sys.argv[0], *theirs]
    args = pufferlib.pufferl.load_config(CONFIG_NAME[ours.env])
    vecenv = make_vecenv(ours.env, args)
    policy = make_policy("mlp64" if ours.env == "CartPole-v1" else ours.policy, args, vecenv)
    # the trainer keeps recurrent states for a recurrent policy
    args["train"]["use_rnn"] = isinstance(policy, pufferlib.models.LSTMWrapper)
    config = dict(**args["train"], env=CONFIG_NAME[ours.env])
    trainer = pufferlib.pufferl.PuffeRL(config, vecenv, policy, PrintLogs(ours.env))
    # its terminal dashboard, redrawn with each log, is not drawn: this script's output is read by
    # a program (drawing it would cost PufferLib a little time)
    trainer.print_dashboard = lambda *args, **kwargs: None
    while trainer.global_step < config["total_timesteps"] and trainer.uptime < ours.seconds:
        trainer.evaluate()
        trainer.train()
    trainer.vecenv.close()
    trainer.utilization.stop()


if __name__ == "__main__":
    main()
