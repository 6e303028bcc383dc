"""Action sampling against the distributions it stands for."""

import torch

from asyncrl.cfg.config import Config


def test_gumbel_max_sampling_matches_the_categorical_distribution():
    """model.sample_actions draws discrete actions with the probabilities softmax(logits) and
    returns their exact log-probabilities (checked against torch's Categorical on 200k draws)."""
    import gymnasium as gym
    from torch.distributions import Categorical

    from asyncrl.model.actor_critic import build_model

    torch.manual_seed(0)
    model = build_model(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(4), Config(env="x", use_rnn=False)
    )
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]]).expand(200_000, 4)
    actions, logp = model.sample_actions(logits)
    frequencies = torch.bincount(actions, minlength=4).float() / len(actions)
    torch.testing.assert_close(frequencies, torch.softmax(logits[0], -1), atol=0.004, rtol=0)
    torch.testing.assert_close(logp, Categorical(logits=logits).log_prob(actions))


def test_gaussian_sampling_matches_the_diagonal_normal():
    """model.sample_actions draws Box actions from N(mean, exp(log_std)^2) per dimension (the sample
    mean and std of 200k draws) and returns their log-probabilities as torch's Independent(Normal)
    gives them."""
    import gymnasium as gym
    from torch.distributions import Independent, Normal

    from asyncrl.model.actor_critic import build_model

    torch.manual_seed(0)
    model = build_model(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), Config(env="x", use_rnn=False)
    )
    with torch.no_grad():
        model.action_log_std.copy_(torch.tensor([-1.0, 0.5]))
    mean = torch.tensor([[0.3, -2.0]]).expand(200_000, 2)
    actions, logp = model.sample_actions(mean)
    torch.testing.assert_close(actions.mean(0), mean[0], atol=0.01, rtol=0)
    torch.testing.assert_close(actions.std(0), torch.tensor([-1.0, 0.5]).exp(), atol=0.01, rtol=0)
    expected = Independent(Normal(mean, model.action_log_std.detach().exp()), 1).log_prob(actions)
    torch.testing.assert_close(logp, expected)


def test_multi_discrete_actions_are_independent_categoricals_sampled_with_their_log_probabilities():
    """MultiCategorical against the joint distribution enumerated action by action (the product of
    the dimensions' softmaxes): log-probabilities, entropy and KL; model.sample_actions draws each
    dimension with its own probabilities (200k draws) and returns the joint log-probability; greedy
    actions are each dimension's argmax."""
    import itertools

    import gymnasium as gym

    from asyncrl.model.actor_critic import build_model
    from asyncrl.model.distributions import MultiCategorical, categorical_kl

    sizes = [3, 4]
    torch.manual_seed(0)
    mu_logits = torch.randn(5, 7)
    pi_logits = torch.randn(5, 7)
    # every action, [12, 2]
    joint = torch.tensor(list(itertools.product(range(3), range(4))))

    def joint_log_probs(logits):
        first, second = (part.log_softmax(-1) for part in logits.split(sizes, -1))
        # [5, 12]
        return first[:, joint[:, 0]] + second[:, joint[:, 1]]

    mu = MultiCategorical(mu_logits, sizes)
    pi = MultiCategorical(pi_logits, sizes)
    log_mu = joint_log_probs(mu_logits)
    log_pi = joint_log_probs(pi_logits)
    for k, action in enumerate(joint):
        torch.testing.assert_close(mu.log_prob(action.expand(5, 2)), log_mu[:, k])
    torch.testing.assert_close(mu.entropy(), -(log_mu.exp() * log_mu).sum(-1))
    torch.testing.assert_close(categorical_kl(mu, pi), (log_mu.exp() * (log_mu - log_pi)).sum(-1))

    model = build_model(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiDiscrete(sizes), Config(env="x", use_rnn=False)
    )
    logits = mu_logits[:1].expand(200_000, 7)
    actions, logp = model.sample_actions(logits)
    assert actions.shape == (200_000, 2)
    for d, part in enumerate(logits[0].split(sizes)):
        frequencies = torch.bincount(actions[:, d], minlength=sizes[d]).float() / len(actions)
        torch.testing.assert_close(frequencies, torch.softmax(part, -1), atol=0.004, rtol=0)
    torch.testing.assert_close(logp, MultiCategorical(logits, sizes).log_prob(actions))
    greedy = model.greedy_actions(mu_logits)
    assert greedy.tolist() == [
        [int(a.argmax()), int(b.argmax())] for a, b in zip(*mu_logits.split(sizes, -1))
    ]


def test_categorical_terms_are_torchs_log_prob_entropy_and_kl_with_their_gradients():
    """categorical_terms against Categorical's log_prob and entropy and categorical_kl, values and
    gradients, with some actions masked off (ILLEGAL_LOGIT) in both distributions."""
    from torch.distributions import Categorical

    from asyncrl.model.distributions import (
        ILLEGAL_LOGIT,
        categorical_kl,
        categorical_terms,
    )

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, 4, generator=generator, dtype=torch.float64)
    behavior_logits = torch.randn(6, 5, 4, generator=generator, dtype=torch.float64)
    logits[0, :, 3] = ILLEGAL_LOGIT
    behavior_logits[0, :, 3] = ILLEGAL_LOGIT
    actions = torch.randint(0, 3, (6, 5), generator=generator)
    weights = torch.randn(3, 6, 5, generator=generator, dtype=torch.float64)
    outputs = []
    for fast in (True, False):
        leaf = logits.clone().requires_grad_()
        if fast:
            terms = categorical_terms(leaf, behavior_logits, actions)
        else:
            current = Categorical(logits=leaf)
            behavior = Categorical(logits=behavior_logits)
            terms = (
                current.log_prob(actions),
                current.entropy(),
                categorical_kl(behavior, current),
            )
        (gradient,) = torch.autograd.grad((torch.stack(terms) * weights).sum(), leaf)
        outputs.append((*terms, gradient))
    for fast, reference in zip(*outputs):
        assert torch.isfinite(fast).all()
        torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-12)
