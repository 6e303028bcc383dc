"""A trained policy acting in a plain loop (what `asyncrl.load` returns), and the model's actions
for a batch of observations, which evaluation and `asyncrl enjoy` take too."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from asyncrl.cfg.config import Config
from asyncrl.envs import make_env
from asyncrl.envs.multi_agent import env_actions
from asyncrl.model.actor_critic import ActorCritic


@torch.no_grad()
def model_actions(
    model: ActorCritic, obs: np.ndarray, rnn_state: torch.Tensor, deterministic: bool
):
    """The model's actions for a batch of observations (argmax/mean if deterministic, else sampled)
    as an array, and its next recurrent state (on the CPU)."""
    device = model.value_head.weight.device
    params, _, rnn_state = model.forward_step(
        torch.as_tensor(obs, device=device), rnn_state.to(device)
    )
    actions = model.greedy_actions(params) if deterministic else model.sample_actions(params)[0]
    return actions.cpu().numpy(), rnn_state.cpu()


class Policy:
    """A run's policy: `act` maps an observation of the run's env (or a batch of them) to its
    action(s), carrying the recurrent state from step to step."""

    def __init__(
        self, model: ActorCritic, observation_space: gym.Space, action_space: gym.Space, cfg: Config
    ):
        self.model = model.eval()
        self.observation_space = observation_space
        self.action_space = action_space
        self.cfg = cfg

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per observation (0 without a recurrent core)."""
        return self.model.rnn_state_size

    def initial_state(self, batch: int | None = None) -> np.ndarray:
        """The state an episode starts from: [state_size], or [batch, state_size] for a batch."""
        return np.zeros(
            (self.state_size,) if batch is None else (batch, self.state_size), np.float32
        )

    def act(self, obs, state: np.ndarray | None = None, deterministic: bool = False):
        """(action, next state) for one observation, or (actions, next states) for a batch of them
        (an array with one more leading axis). `state` is what the previous call returned; None
        starts an episode (in a batch, give the rows of episodes that ended `initial_state`'s
        zeros). deterministic: the most likely action (the Gaussian's mean) instead of a sampled
        one."""
        obs = np.asarray(obs, dtype=self.observation_space.dtype)
        single = obs.shape == self.observation_space.shape
        batch = obs[None] if single else obs
        if batch.shape[1:] != self.observation_space.shape:
            raise ValueError(
                f"observations of shape {obs.shape}: the policy takes {self.observation_space.shape}, or a batch "
                f"of them (make the env with policy.make_env(), which has the run's options)"
            )
        if state is None:
            state = self.initial_state(len(batch))
        state = torch.as_tensor(np.asarray(state, np.float32)).reshape(len(batch), self.state_size)
        actions, state = model_actions(self.model, batch, state, deterministic)
        actions = env_actions(self.action_space, actions)
        if single:
            return actions[0], state[0].numpy()
        return np.asarray(actions), state.numpy()

    def make_env(self, **options):
        """The run's env (gymnasium API) with its options (--env_options, frameskip, ...), `options`
        on top."""
        return make_env(self.cfg.env, **{**self.cfg.env_kwargs(), **options})
