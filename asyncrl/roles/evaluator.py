"""Evaluator: plays --eval_episodes with a policy's newest weights whenever the runner asks (every
--eval_every_env_steps), on the same fixed seeds every time, so successive scores compare; reports them and keeps
the best-scoring weights as best_checkpoint.pth. It runs at the lowest CPU priority, in the time training leaves.
At a run's limit the runner asks for one more, of the final weights, which the evaluator plays as it stops.

`play_episode` is also what `asyncrl enjoy` plays, and `ModelPlayer` a checkpoint's seat in `asyncrl
match`.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers
from asyncrl.core.checkpoint import (
    CheckpointError,
    best_checkpoint_path,
    load_checkpoint,
    load_weights,
    save_best_checkpoint,
)
from asyncrl.core.messages import Evaluation
from asyncrl.core.queues import Empty, Queues
from asyncrl.envs import make_agents
from asyncrl.envs.multi_agent import acting, env_actions
from asyncrl.model.actor_critic import ActorCritic, build_model
from asyncrl.model.policy import model_actions

# fixed: the same episodes for every evaluation, of every run
EVAL_SEED_BASE = 1_000_000


@torch.no_grad()
def play_episode(
    model: ActorCritic,
    env,
    deterministic: bool,
    seed: int | None = None,
    frames: list | None = None,
) -> dict:
    """One episode of `env` (a list of agents, make_agents) with `model` acting for every agent
    (argmax/mean actions if deterministic, else sampled). Returns the return (the mean over agents),
    each agent's, the length in env steps and the env's episode stats (the mean over agents). With
    `frames`, appends env.render() after the reset and every step."""
    obs, _ = env.reset(seed=seed)
    n = env.num_agents
    state = torch.zeros(n, model.rnn_state_size)
    returns = np.zeros(n)
    playing = [True] * n
    stats = [{}] * n
    length = 0
    while any(playing):
        if frames is not None:
            frames.append(env.render())
        actions, new_state = model_actions(model, np.stack(obs), state, deterministic)
        # a waiting agent's holds
        state = torch.where(torch.tensor(acting(env)).unsqueeze(1), new_state, state)
        obs, rewards, terminated, truncated, infos = env.step(
            env_actions(env.action_space, actions)
        )
        length += 1
        for i in range(n):
            if playing[i]:
                returns[i] += float(rewards[i])
                if terminated[i] or truncated[i]:
                    playing[i] = False
                    stats[i] = infos[i].get("episode_stats", {})
    if frames is not None:
        frames.append(env.render())
    return {
        "return": float(returns.mean()),
        "returns": returns.tolist(),
        "length": length,
        "stats": {k: float(np.mean([float(s.get(k, np.nan)) for s in stats])) for k in stats[0]},
    }


class ModelPlayer:
    """One agent's seat played by a checkpoint's policy, a step at a time (`asyncrl match`)."""

    def __init__(self, path: str, env, cfg: Config):
        self.model = build_model(env.observation_space, env.action_space, cfg).eval()
        load_weights(path, self.model)
        self.deterministic = cfg.eval_deterministic
        self.action_space = env.action_space

    def reset(self) -> None:
        self.state = torch.zeros(1, self.model.rnn_state_size)

    def act(self, env, seat: int, obs) -> object:
        actions, state = model_actions(
            self.model, np.expand_dims(obs, 0), self.state, self.deterministic
        )
        # (in a turn-based game, a waiting agent's state holds)
        if acting(env)[seat]:
            self.state = state
        return env_actions(self.action_space, actions)[0]


def saved_best_score(path: str) -> float:
    try:
        return float(load_checkpoint(path, ("model", "eval_score"))["eval_score"])
    # none yet, or unreadable: the next evaluation writes a new one
    except CheckpointError:
        return float("-inf")


class Evaluator:
    def __init__(
        self, cfg: Config, buffers: SharedBuffers, queues: Queues, obs_space, action_space
    ):
        self.cfg = cfg
        self.buffers = buffers
        self.requests = queues.eval_requests
        self.reports = queues.reports
        self.model = build_model(obs_space, action_space, cfg).eval()
        self.env = make_agents(cfg.env, **cfg.env_kwargs())
        self.seeds = [EVAL_SEED_BASE + i for i in range(cfg.eval_episodes)]
        self.best_paths = [
            best_checkpoint_path(cfg.experiment_dir, p) for p in range(cfg.num_policies)
        ]
        self.best_scores = [saved_best_score(path) for path in self.best_paths]

    def poll(self, timeout: float) -> bool:
        try:
            requests = self.requests.get_many(block=timeout > 0, timeout=timeout)
        except Empty:
            return False
        # a backlog: evaluate only the newest
        newest = {policy_id: env_steps for policy_id, env_steps in requests}
        for policy_id, env_steps in newest.items():
            self._evaluate(policy_id, env_steps)
        return True

    def stop(self) -> None:
        """A normal stop: the evaluation asked for last (at the run's limit: the final weights) is
        played."""
        self.poll(timeout=0.0)

    def close(self) -> None:
        self.env.close()

    def _load_weights(self, policy_id: int) -> int:
        """The newest published weights of the policy (retried while the learner is writing
        them)."""
        while (version := self.buffers.read_weights(policy_id, self.model, -1)) < 0:
            time.sleep(0.01)
        return version

    def _evaluate(self, policy_id: int, env_steps: int) -> None:
        version = self._load_weights(policy_id)
        start = time.monotonic()
        # sampled actions drawn anew too: the same weights, the same score
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(EVAL_SEED_BASE)
            episodes = [
                play_episode(self.model, self.env, self.cfg.eval_deterministic, seed)
                for seed in self.seeds
            ]
        returns = np.array([e["return"] for e in episodes])
        result = {
            "env_steps": env_steps,
            "train_step": version,
            "return_mean": float(returns.mean()),
            "return_std": float(returns.std()),
            "return_min": float(returns.min()),
            "return_max": float(returns.max()),
            "length_mean": float(np.mean([e["length"] for e in episodes])),
            "episodes": len(episodes),
            "seconds": time.monotonic() - start,
        }
        for key in episodes[0]["stats"]:
            result[f"{key}_mean"] = float(np.mean([e["stats"].get(key, np.nan) for e in episodes]))
        result["new_best"] = result["return_mean"] > self.best_scores[policy_id]
        if result["new_best"]:
            self.best_scores[policy_id] = result["return_mean"]
            save_best_checkpoint(
                self.best_paths[policy_id],
                {
                    "model": self.model.state_dict(),
                    "train_step": version,
                    "env_steps": env_steps,
                    "eval_score": result["return_mean"],
                    "policy_id": policy_id,
                },
            )
        self.reports.put(Evaluation(policy_id, result))
