"""Evaluate a Sample Factory VizDoom run's final policy as learning_suite.py evaluates asyncrl's:
--episodes episodes with sampled actions, at the training frameskip, each printed as a line `episode
RETURN` in the reward of VizDoom's own scenario file, which asyncrl trains on and is scored in:
Sample Factory's true objective where it reports one (the gathering scenarios' shaped reward), else
its reward with its scaling undone, converted where its scenario file pays otherwise (OTHER_CFG).

Runs in Sample Factory's virtualenv (learning_peers.py starts it):
    python -m benchmarks.peers.sf_evaluate --env=doom_basic --train_dir=DIR --experiment=NAME --episodes=10
"""

import argparse
import functools
import sys

import gymnasium as gym
import torch
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.enjoy import enjoy
from sample_factory.envs.env_utils import register_env
from sf_examples.vizdoom.doom.doom_params import add_doom_env_args, doom_override_defaults
from sf_examples.vizdoom.doom.doom_utils import DOOM_ENVS, make_doom_env_from_spec
from sf_examples.vizdoom.train_vizdoom import register_vizdoom_components

# Sample Factory's scenario files that pay otherwise than VizDoom's own: name -> (their living
# reward a tic, VizDoom's living reward a tic, VizDoom's death penalty); Sample Factory's
# health_gathering.cfg pays 0.01 a tic and no penalty
OTHER_CFG = {"doom_health_gathering": (0.01, 1.0, 100.0)}


class PrintReturns(gym.Wrapper):
    def __init__(self, env, name: str, scaling: float):
        super().__init__(env)
        self.name = name
        self.scaling = scaling
        self.total = 0.0

    def vizdoom_return(self, info: dict) -> float:
        """The episode's return in VizDoom's own scenario file's reward."""
        ret = info.get("true_objective", self.total / self.scaling)
        if self.name not in OTHER_CFG:
            return ret
        theirs, vizdoom, death_penalty = OTHER_CFG[self.name]
        return ret / theirs * vizdoom - death_penalty * self.env.unwrapped.game.is_player_dead()

    def reset(self, **kwargs):
        self.total = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total += float(reward)
        if terminated or truncated:
            print(f"episode {round(self.vizdoom_return(info), 4)}", flush=True)
        return obs, reward, terminated, truncated, info


def make_printing(spec, name, cfg, env_config, render_mode=None, **kwargs):
    env = make_doom_env_from_spec(spec, name, cfg, env_config, render_mode, **kwargs)
    return PrintReturns(env, spec.name, spec.reward_scaling)


def main() -> int:
    # the checkpoint Sample Factory just wrote holds numpy scalars, which torch >= 2.6's default
    # weights_only load refuses (Sample Factory 2.1.1 predates it): it is this run's own file, so it
    # loads whole
    torch.load = functools.partial(torch.load, weights_only=False)
    register_vizdoom_components()
    # the same envs, each episode's return printed
    for spec in DOOM_ENVS:
        register_env(spec.name, functools.partial(make_printing, spec))
    ours = argparse.ArgumentParser()
    ours.add_argument("--episodes", type=int, default=10)
    args, argv = ours.parse_known_args()
    argv += ["--no_render", f"--max_num_episodes={args.episodes}", "--eval_env_frameskip=4"]
    parser, _ = parse_sf_args(argv=argv, evaluation=True)
    add_doom_env_args(parser)
    doom_override_defaults(parser)
    status, _ = enjoy(parse_full_cfg(parser, argv))
    return status


if __name__ == "__main__":
    sys.exit(main())
