"""The model: its encoders, critic, action heads and precision."""

import copy

import numpy as np
import pytest
import torch

from asyncrl.cfg.config import Config


@pytest.mark.parametrize(
    "critic_layers", [[], ["--critic_mlp_layers", "48", "40"]], ids=["same", "wider"]
)
def test_a_separate_critic_shares_no_weight_with_the_actor(critic_layers):
    """--actor_critic_share_weights False: the value's gradient reaches only the critic's encoder and the value head,
    the action means' only the actor's encoder and the action head; --critic_mlp_layers sizes the critic alone."""
    import gymnasium as gym

    from asyncrl.commands.train import config_from_args
    from asyncrl.model.actor_critic import ActorCritic

    cfg = config_from_args(
        ["--env", "Pendulum-v1", "--actor_critic_share_weights", "False", *critic_layers]
    )
    model = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), cfg)
    hidden = [m.out_features for m in model.encoder.critic if isinstance(m, torch.nn.Linear)]
    assert hidden == ([48, 40] if critic_layers else cfg.encoder_mlp_layers)
    assert [
        m.out_features for m in model.encoder.actor if isinstance(m, torch.nn.Linear)
    ] == cfg.encoder_mlp_layers
    actor = [*model.encoder.actor.parameters(), *model.action_head.parameters()]
    critic = [*model.encoder.critic.parameters(), *model.value_head.parameters()]
    for output, reached, untouched in ((1, critic, actor), (0, actor, critic)):
        model.zero_grad(set_to_none=True)
        model.forward_step(torch.randn(6, 3), torch.zeros(6, 0))[output].square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in reached)
        assert all(p.grad is None or not p.grad.any() for p in untouched)


def test_a_gaussian_policy_starts_at_initial_stddev():
    import gymnasium as gym

    from asyncrl.commands.train import config_from_args
    from asyncrl.model.actor_critic import ActorCritic

    for stddev in (1.0, 0.25):
        cfg = config_from_args(["--env", "Pendulum-v1", "--initial_stddev", str(stddev)])
        model = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
        params = model.forward_step(torch.randn(5, 3), torch.zeros(5, 0))[0]
        torch.testing.assert_close(
            model.distribution(params).base_dist.stddev, torch.full((5, 2), stddev)
        )


def test_rpo_learns_from_the_gaussian_with_means_shifted_by_uniform_noise():
    """--rpo_alpha a (RPO, Rahman & Xue 2022, Alg. 1 line 13): the update's distribution is the acting Gaussian with
    each mean moved by noise from U(-a, a), fresh each call, the std kept; at 0 it is the acting distribution."""
    import gymnasium as gym

    from asyncrl.commands.train import config_from_args
    from asyncrl.model.actor_critic import ActorCritic

    for alpha in (0.0, 0.5):
        cfg = config_from_args(["--env", "Pendulum-v1", "--rpo_alpha", str(alpha)])
        model = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
        params = model.forward_step(torch.randn(4000, 3), torch.zeros(4000, 0))[0]
        acting = model.distribution(params).base_dist
        learned = model.distribution_to_learn(params).base_dist
        shift = learned.mean - acting.mean
        torch.testing.assert_close(learned.stddev, acting.stddev)
        if alpha == 0:
            assert torch.equal(shift, torch.zeros_like(shift))
            continue
        assert shift.abs().max() <= alpha and shift.abs().max() > 0.99 * alpha
        # U(-a, a): mean 0, var a^2/3
        assert abs(shift.mean()) < 0.02 and abs(shift.var() - alpha**2 / 3) < 0.005
        assert not torch.equal(
            shift, model.distribution_to_learn(params).base_dist.mean - acting.mean
        )


@pytest.mark.parametrize(
    "architecture, last_map, activation",
    [("convnet_simple", (128, 4, 4), torch.nn.ELU), ("convnet_atari", (64, 7, 7), torch.nn.ReLU)],
)
def test_the_conv_encoder_is_the_architecture_named(architecture, last_map, activation):
    """On Atari's 84x84x4 frames: convnet_atari is the Nature DQN encoder (its last conv keeps a 7x7
    map, ReLU), convnet_simple Sample Factory's default (4x4, ELU); both end in 512 features."""
    from asyncrl.model.encoders import conv_encoder

    encoder, size = conv_encoder((4, 84, 84), architecture)
    convs = encoder[0]
    assert tuple(convs[:-1](torch.zeros(1, 4, 84, 84)).shape[1:]) == last_map and size == 512
    assert {
        type(m)
        for m in encoder.modules()
        if not isinstance(
            m, (torch.nn.Sequential, torch.nn.Conv2d, torch.nn.Linear, torch.nn.Flatten)
        )
    } == {activation}


@pytest.mark.parametrize(
    "obs_shape, nonlinearity, activation",
    [
        ((4,), "auto", torch.nn.Tanh),
        ((4,), "relu", torch.nn.ReLU),
        ((3, 36, 64), "auto", torch.nn.ELU),
        ((3, 36, 64), "tanh", torch.nn.Tanh),
    ],
)
def test_nonlinearity_sets_the_encoders_activation(obs_shape, nonlinearity, activation):
    """--nonlinearity (Sample Factory's flag) replaces every activation of the encoder; auto keeps an MLP's tanh and
    the conv architecture's own (convnet_simple: ELU)."""
    import gymnasium as gym

    from asyncrl.model.actor_critic import build_model

    space = gym.spaces.Box(0, 255, obs_shape, np.uint8 if len(obs_shape) == 3 else np.float32)
    model = build_model(
        space,
        gym.spaces.Discrete(3),
        Config(env="x", use_rnn=False, nonlinearity=nonlinearity, encoder_mlp_layers=[8, 8]),
    )
    kinds = {type(m) for m in model.encoder.modules()} & {
        torch.nn.ELU,
        torch.nn.ReLU,
        torch.nn.Tanh,
    }
    assert kinds == {activation}


def test_bfloat16_inference_model_acts_like_the_float32_one():
    """--precision bfloat16: policy workers store the weights in bfloat16 (loaded from the learner's float32 ones);
    their outputs stay float32 and close to the float32 model's; the learner's autocast step stays finite."""

    import gymnasium as gym

    from asyncrl.cfg.config import Config
    from asyncrl.core.buffers import SharedBuffers, buffer_layout
    from asyncrl.core.weights import num_state_floats
    from asyncrl.model.actor_critic import build_model
    from asyncrl.model.precision import low_precision

    torch.manual_seed(0)
    cfg = Config(
        env="x",
        encoder="conv",
        rnn_size=64,
        normalize_input=True,
        precision="bfloat16",
        num_workers=1,
        agents_per_env=1,
    )
    obs_space = gym.spaces.Box(0, 255, (3, 72, 128), "uint8")
    action_space = gym.spaces.Discrete(5)
    learner_model = build_model(obs_space, action_space, cfg)
    assert low_precision(cfg, torch.device("cpu"), learner_model) == torch.bfloat16
    layout = buffer_layout(
        cfg,
        obs_space,
        action_space,
        learner_model.rnn_state_size,
        learner_model.distribution_params_size,
        num_state_floats(learner_model),
        0,
    )
    buffers = SharedBuffers.allocate(layout)
    buffers.publish_weights(0, learner_model, version=3)
    actor = build_model(obs_space, action_space, cfg).store_weights_as(torch.bfloat16)
    assert buffers.read_weights(0, actor, known_version=-1) == 3
    obs = torch.randint(0, 256, (6, 3, 72, 128), dtype=torch.uint8)
    state = torch.randn(6, 64)
    with torch.no_grad():
        expected = learner_model.forward_step(obs, state)
        got = actor.forward_step(obs, state)

    # of the whole tensor: single elements near zero say little
    def relative_error(got, expected):
        return float((got - expected).norm() / expected.norm())

    for e, g in zip(expected, got):
        # measured 0.7-1.3% over 8 seeds
        assert g.dtype == torch.float32 and relative_error(g, e) < 0.03
    sequence = (
        obs.view(3, 2, 3, 72, 128),
        state.view(3, 2, 64)[:2],
        torch.tensor([[True, True], [False, False]]),
        torch.zeros(2, 2, dtype=torch.bool),
    )
    params, values = copy.deepcopy(learner_model).forward_sequence(*sequence, torch.bfloat16)
    (params.logsumexp(-1).mean() + values.mean()).backward()
    assert params.dtype == torch.float32 and torch.isfinite(params).all()
    # the learner's mixed precision (conv encoder and GRU products) stays close to float32
    with torch.no_grad():
        for e, g in zip(learner_model.forward_sequence(*sequence), (params, values)):
            # measured 0.4-1.6% over 8 seeds
            assert relative_error(g, e) < 0.03
