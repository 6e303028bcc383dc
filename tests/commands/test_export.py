"""`asyncrl export`: the ONNX file acts as the torch model does (onnxruntime against forward_step on
random inputs)."""

import os

import gymnasium as gym
import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.envs.action_masks import ObservationWithActionMask
from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.model.actor_critic import build_model
from asyncrl.model.onnx_graph import export_onnx

MODELS = {
    "doom conv+gru": (
        gym.spaces.Box(0, 255, (3, 72, 128), np.uint8),
        gym.spaces.Discrete(7),
        dict(encoder="conv", use_rnn=True, rnn_size=64, normalize_input=True),
    ),
    "mlp": (
        gym.spaces.Box(-5, 5, (4,), np.float32),
        gym.spaces.Discrete(2),
        dict(use_rnn=False, encoder_mlp_layers=[64, 64], normalize_input=True),
    ),
    "mlp gaussian lstm": (
        gym.spaces.Box(-5, 5, (11,), np.float32),
        gym.spaces.Box(-1, 1, (3,), np.float32),
        dict(use_rnn=True, rnn_type="lstm", rnn_size=32, encoder_mlp_layers=[64]),
    ),
    # random masks (sampled entries below 0.5 forbid): the graph's logits are masked as
    # forward_step's
    "mlp action mask": (
        ObservationWithActionMask(gym.spaces.Box(-5, 5, (4,), np.float32), 7),
        gym.spaces.MultiDiscrete([3, 4]),
        dict(use_rnn=False, encoder_mlp_layers=[32]),
    ),
    # images beside a vector and a mask: the graph takes each part (ONNX cannot read floats from
    # bytes)
    "packed images, vector and mask, gru": (
        PackedObservation({"camera": (3, 36, 40), "depth": (1, 36, 36)}, 5 + 3, 3),
        gym.spaces.Discrete(3),
        dict(use_rnn=True, rnn_size=32),
    ),
    "packed, every pixel normalized": (
        PackedObservation({"camera": (3, 36, 40)}, 4),
        gym.spaces.Discrete(2),
        dict(use_rnn=False, normalize_input=True),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_policy_matches_the_torch_model(tmp_path, name):
    """Logits (or the Gaussian's mean and std), value and new recurrent state within 1e-4 of
    forward_step, for a batch of random observations and states; the input normalizer (random
    statistics here) is part of the graph, and the value is in return units (the returns
    normalizer's statistics folded in)."""
    obs_space, action_space, flags = MODELS[name]
    torch.manual_seed(0)
    model = build_model(obs_space, action_space, Config(env="x", **flags)).eval()
    with torch.no_grad():
        # away from the near-zero action head of a fresh init
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        if model.normalizer is not None:
            scale = (
                1.0 if isinstance(obs_space, PackedObservation) else float(obs_space.high.flat[0])
            )
            model.normalizer.mean.copy_(torch.rand_like(model.normalizer.mean) * scale / 2)
            model.normalizer.var.copy_(torch.rand_like(model.normalizer.var) * 4 + 0.1)
        # the value comes out in return units
        model.returns_normalizer.mean.fill_(30.0)
        model.returns_normalizer.var.fill_(16.0)
    path = str(tmp_path / "policy.onnx")
    export_onnx(model, obs_space, path, {"env": name})
    session = onnxruntime.InferenceSession(path)
    obs = np.stack([obs_space.sample() for _ in range(5)])
    feeds = obs_space.unpack(obs) if isinstance(obs_space, PackedObservation) else {"obs": obs}
    if model.rnn_type:
        feeds["rnn_state"] = (
            np.random.default_rng(0).normal(size=(5, model.rnn_state_size)).astype(np.float32)
        )
    got = session.run(None, feeds)
    with torch.no_grad():
        state = torch.as_tensor(feeds["rnn_state"]) if model.rnn_type else torch.zeros(5, 0)
        params, value, state = model.forward_step(torch.as_tensor(obs), state)
        expected = (
            [params] if model.discrete else [params, model.action_log_std.exp().expand_as(params)]
        )
    expected += [model.returns(value)] + ([state] if model.rnn_type else [])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape) and np.abs(g - e.numpy()).max() < 1e-4
    assert {p.key: p.value for p in onnx.load(path).metadata_props}["env"] == name
    # the weights inside: no policy.onnx.data beside it
    assert os.listdir(tmp_path) == ["policy.onnx"]


def test_export_without_torchs_onnx_exporter_is_one_line_naming_the_pip_command(monkeypatch):
    """onnxscript missing (torch.onnx.export's exporter): said before any work, not deep inside
    torch."""
    import importlib.util

    from asyncrl.commands.export import export

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxscript" else find_spec(name),
    )
    with pytest.raises(
        ConfigError, match=r'^asyncrl export needs onnxscript, .*: pip install "asyncrl\[onnx\]"$'
    ):
        export(["--env", "CartPole-v1", "--experiment", "x"])
