"""Action masks: an env's mask of legal actions (a Dict observation's "action_mask" entry, or
info["action_mask"]) travels at the end of its observation vector, and the policy never draws a
forbidden action."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import SMALL_MLP_RUN, flags, read_stats, run_cli

from asyncrl.cfg.config import Config
from asyncrl.envs import EnvError, make_env
from asyncrl.envs.action_masks import ObservationWithActionMask
from asyncrl.envs.gym_adapter import adapt
from asyncrl.envs.multi_agent import as_agents
from asyncrl.model.actor_critic import build_model
from asyncrl.model.distributions import MultiCategorical, categorical_kl, legal_logits

# the module the engine imports for --env tests.action_envs:...
from tests.action_envs import LegalMoves

# tests.action_envs:legal_moves' MultiDiscrete choices
SIZES = [4, 6]


def masked_model(sizes: list[int]):
    space = ObservationWithActionMask(gym.spaces.Box(-1, 1, (3,)), sum(sizes))
    action_space = (
        gym.spaces.Discrete(sizes[0]) if len(sizes) == 1 else gym.spaces.MultiDiscrete(sizes)
    )
    torch.manual_seed(0)
    model = build_model(
        space, action_space, Config(env="x", use_rnn=False, encoder_mlp_layers=[16])
    )
    with torch.no_grad():
        # away from the near-uniform policy of a fresh init
        model.action_head.weight.normal_()
    return model


def random_masks(n: int, sizes: list[int], generator: torch.Generator) -> torch.Tensor:
    """[n, sum(sizes)] masks with at least one allowed choice per dimension."""
    parts = []
    for size in sizes:
        mask = torch.rand(n, size, generator=generator) < 0.5
        mask[torch.arange(n), torch.randint(size, (n,), generator=generator)] = True
        parts.append(mask)
    return torch.cat(parts, -1).float()


def reference_log_probs(
    logits: torch.Tensor, mask: torch.Tensor, sizes: list[int]
) -> list[torch.Tensor]:
    """Each dimension's log-probabilities, softmax over its allowed choices only (-inf at the
    others)."""
    return [
        torch.where(m > 0.5, part.masked_fill(m < 0.5, -torch.inf).log_softmax(-1), -torch.inf)
        for part, m in zip(logits.split(sizes, -1), mask.split(sizes, -1))
    ]


@pytest.mark.parametrize("sizes", [[5], SIZES])
def test_a_masked_policy_is_the_softmax_over_the_allowed_actions_alone(sizes):
    """Against the distribution renormalized over each dimension's allowed choices:
    log-probabilities, entropy and KL of the model's distribution, 20k draws of model.sample_actions
    (none forbidden, their log-probabilities exact), greedy actions allowed; the gradient at a
    forbidden logit is 0."""
    model = masked_model(sizes)
    g = torch.Generator().manual_seed(1)
    obs = torch.cat([torch.rand(64, 3, generator=g) * 2 - 1, random_masks(64, sizes, g)], -1)
    params, _, _ = model.forward_step(obs, torch.zeros(64, 0))
    mask = obs[:, 3:]
    expected = reference_log_probs(params, mask, sizes)
    dist = model.distribution(params)
    actions, logp = model.sample_actions(params.repeat(320, 1))
    actions = actions.view(320, 64, -1) if len(sizes) > 1 else actions.view(320, 64, 1)
    chosen = [
        torch.gather(part.expand(320, 64, -1), -1, actions[..., d : d + 1]).squeeze(-1)
        for d, part in enumerate(expected)
    ]
    assert all(torch.isfinite(c).all() for c in chosen), "a forbidden action was drawn"
    torch.testing.assert_close(logp.view(320, 64), sum(chosen))
    first = actions[0].squeeze(-1) if len(sizes) == 1 else actions[0]
    torch.testing.assert_close(dist.log_prob(first), sum(chosen)[0])
    entropy = sum(-(lp.exp() * lp.nan_to_num(neginf=0.0)).sum(-1) for lp in expected)
    torch.testing.assert_close(dist.entropy(), entropy)
    other = model.distribution(params.flip(0))
    if len(sizes) == 1:
        other, dist = (MultiCategorical(d.logits, sizes) for d in (other, dist))
    assert torch.isfinite(categorical_kl(dist, other)).all()
    greedy = model.greedy_actions(params).view(64, -1)
    for d, part in enumerate(mask.split(sizes, -1)):
        assert part.gather(-1, greedy[:, d : d + 1]).eq(1).all()
    # the head's outputs before the mask
    logits = torch.randn(64, sum(sizes), requires_grad=True)
    policy = model.distribution(legal_logits(logits, mask))
    (
        policy.log_prob(greedy.squeeze(-1) if len(sizes) == 1 else greedy) + policy.entropy()
    ).sum().backward()
    assert logits.grad[mask < 0.5].abs().max() == 0 and logits.grad[mask > 0.5].abs().max() > 0


def test_a_mask_that_forbids_every_action_draws_uniformly():
    model = masked_model([4])
    obs = torch.cat([torch.zeros(20_000, 3), torch.zeros(20_000, 4)], -1)
    params, _, _ = model.forward_step(obs, torch.zeros(20_000, 0))
    actions, logp = model.sample_actions(params)
    torch.testing.assert_close(
        torch.bincount(actions, minlength=4).float() / 20_000,
        torch.full((4,), 0.25),
        atol=0.015,
        rtol=0,
    )
    torch.testing.assert_close(logp, torch.full_like(logp, -np.log(4)))


def test_the_mask_comes_after_the_observation_from_a_dict_or_the_info():
    """A Dict observation's action_mask entry (its other entry flattened before it),
    info["action_mask"] of a gymnasium id (the registry's probe found it there), and gymnasium's
    Taxi, whose info holds its mask."""
    env = make_env("tests.action_envs:legal_moves")
    assert (
        isinstance(env.observation_space, ObservationWithActionMask)
        and env.observation_space.mask_size == 10
    )
    assert set(env.unwrapped.observation_space.spaces) == {"targets", "action_mask"}
    env.reset(seed=0)
    obs = env.step(np.array([np.flatnonzero(m)[0] for m in env.unwrapped.masks]))[0]
    # now showing the targets and masks of obs
    game = env.unwrapped
    assert obs.shape == (20,) and np.array_equal(obs[10:], np.concatenate(game.masks))
    assert np.flatnonzero(obs[:10]).tolist() == [game.targets[0], 4 + game.targets[1]]

    info_env = make_env("tests.action_envs:LegalMovesInInfo-v0")
    obs, info = info_env.reset(seed=0)
    assert info_env.observation_space.mask_size == 6 and np.array_equal(
        obs[6:], info["action_mask"]
    )

    taxi = make_env("Taxi-v4")
    obs, info = taxi.reset(seed=0)
    assert taxi.observation_space.shape == (506,) and obs[:500].sum() == 1
    assert np.array_equal(obs[500:], info["action_mask"]) and 0 < obs[500:].sum() < 6
    for e in (env, info_env, taxi):
        e.close()


def test_a_mask_the_env_cannot_use_is_one_line():
    box_actions = LegalMoves(gym.spaces.Discrete(3))
    box_actions.action_space = gym.spaces.Box(-1, 1, (3,))
    with pytest.raises(EnvError, match="an action mask needs Discrete"):
        adapt("box", box_actions)
    images = LegalMoves(gym.spaces.Discrete(3))
    images.observation_space = gym.spaces.Dict(
        {
            "pixels": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "action_mask": gym.spaces.Box(0, 1, (3,), np.int8),
        }
    )
    images.action_space = gym.spaces.Box(-1, 1, (3,))
    # beside images too
    with pytest.raises(EnvError, match="an action mask needs Discrete"):
        adapt("images", images)
    wrong = adapt("wrong", LegalMoves(gym.spaces.Discrete(3)))
    # masks of 4 entries for 3 actions
    wrong.env.sizes = [4]
    with pytest.raises(EnvError, match="has 4 entries, and its actions 3 choices"):
        wrong.reset(seed=0)


def test_a_pettingzoo_env_s_agents_get_their_masks_after_their_observations():
    from pettingzoo import ParallelEnv

    class TwoLegalMovers(ParallelEnv):
        metadata = {"name": "two_legal_movers"}
        possible_agents = ["a", "b"]

        def __init__(self):
            self.games = {
                agent: LegalMoves(gym.spaces.Discrete(4)) for agent in self.possible_agents
            }

        def observation_space(self, agent):
            return self.games[agent].observation_space

        def action_space(self, agent):
            return self.games[agent].action_space

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            return {a: game.reset(seed=seed)[0] for a, game in self.games.items()}, {
                a: {} for a in self.agents
            }

        def step(self, actions):
            results = {a: self.games[a].step(action) for a, action in actions.items()}
            return tuple({a: r[k] for a, r in results.items()} for k in range(5))

    agents = as_agents("two", TwoLegalMovers())
    assert agents.observation_space.mask_size == 4 and agents.observation_space.shape == (8,)
    obs, _ = agents.reset(seed=0)
    for o, game in zip(obs, agents.env.games.values()):
        assert np.array_equal(o[4:], game.masks[0]) and o[:4].sum() == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, random_return, env_steps",
    [("legal_moves", 16 * (1 / 2 + 1 / 3) / 2, 60000), ("LegalMovesInInfo-v0", 16 / 3, 30000)],
)
def test_training_never_takes_a_forbidden_action_and_learns(
    tmp_path, env, random_return, env_steps
):
    """Real processes on an env where a random action is illegal half the time (it ends the episode, and counts):
    no episode of the run has one, from its first steps on, and the policy learns the targets among the allowed
    actions (random play among them: random_return of 16)."""
    r = run_cli(
        "train",
        *flags(
            env=f"tests.action_envs:{env}",
            train_dir=tmp_path,
            experiment="m",
            train_for_env_steps=env_steps,
        ),
        *SMALL_MLP_RUN,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [row for row in read_stats(tmp_path / "m") if row.get("episode_reward_mean") is not None]
    assert rows and all(row["episode_illegal_mean"] == 0 for row in rows)
    assert rows[-1]["episode_reward_mean"] > random_return + 4
