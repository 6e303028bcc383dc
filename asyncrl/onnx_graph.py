"""The acting policy as an ONNX graph: the file `asyncrl export` writes (export.py says its inputs and outputs)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from asyncrl.model import ActorCritic

OPSET = 18


class ActingPolicy(nn.Module):
    """ActorCritic.forward_step as the exported graph: the GRU step is written with the ops of its equations
    (model._gru_step), which every ONNX runtime has."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor, rnn_state: torch.Tensor | None = None):
        model = self.model
        x = model.encode(obs)
        if model.rnn_type == "gru":
            x = rnn_state = model._gru_step(F.linear(x, model.core.weight_ih, model.core.bias_ih), rnn_state)
        elif model.rnn_type == "lstm":
            x, rnn_state = model._core_step(x, rnn_state)
        action_params, value = model.heads(x, obs)
        value = model.returns(value)
        outputs = (action_params,) if model.discrete else (action_params, model.action_log_std.exp().expand_as(
            action_params))
        return outputs + ((value, rnn_state) if model.rnn_type else (value,))


def output_names(model: ActorCritic) -> list[str]:
    names = ["logits"] if model.discrete else ["mean", "std"]
    return names + ["value"] + (["rnn_state_out"] if model.rnn_type else [])


def export_onnx(model: ActorCritic, obs_space, path: str, metadata: dict) -> None:
    """Write `model`'s acting step to `path` as ONNX (a batch axis of any size)."""
    policy = ActingPolicy(model.float().eval()).eval()
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(2)]))  # not 1: torch.export fixes a size of 1
    inputs = (obs, torch.zeros(2, model.rnn_state_size)) if model.rnn_type else (obs,)
    input_names = ["obs", "rnn_state"][:len(inputs)]
    names = output_names(model)
    batch = torch.export.Dim("batch")
    # the exporter's notes (optional torchvision ops it skips, deprecations inside torch) say nothing about this model
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(policy, inputs, path, input_names=input_names, output_names=names, opset_version=OPSET,
                          dynamic_shapes=[{0: batch} for _ in inputs], dynamo=True, verbose=False,
                          external_data=False)  # one file to copy: a policy is far below ONNX's 2 GB limit
    import onnx
    exported = onnx.load(path)
    onnx.helper.set_model_props(exported, {key: str(value) for key, value in metadata.items()})
    onnx.save(exported, path)
