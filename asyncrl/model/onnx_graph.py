"""The acting policy as an ONNX graph: the file `asyncrl export` writes (export.py says its inputs
and outputs)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.model.actor_critic import ActorCritic
from asyncrl.model.recurrent import gru_step

OPSET = 18


class ActingPolicy(nn.Module):
    """ActorCritic.forward_step as the exported graph: the GRU step is written with the ops of its equations
    (model.gru_step), which every ONNX runtime has. Its inputs: the observations (a packed observation's parts:
    each image, then the vector, since ONNX has no op to read floats from bytes), then the recurrent state (with an
    RNN)."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor):
        model = self.model
        x, action_mask = self._features(inputs)
        rnn_state = inputs[-1] if model.rnn_type else None
        if model.rnn_type == "gru":
            x = rnn_state = gru_step(
                model.core, F.linear(x, model.core.weight_ih, model.core.bias_ih), rnn_state
            )
        elif model.rnn_type == "lstm":
            x, rnn_state = model._core_step(x, rnn_state)
        action_params, value = model.heads(x, action_mask)
        value = model.returns(value)
        outputs = (
            (action_params,)
            if model.discrete
            else (action_params, model.action_log_std.exp().expand_as(action_params))
        )
        return outputs + ((value, rnn_state) if model.rnn_type else (value,))

    def _features(
        self, inputs: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the encoder's features, the action mask or None) of the observation inputs."""
        model = self.model
        if model.packed is None:
            return model.encode(inputs[0]), model.action_mask(inputs[0])
        images = list(inputs[: len(model.packed.image_shapes)])
        vector = inputs[len(model.packed.image_shapes)]
        mask = vector[..., -model.action_mask_size :] if model.action_mask_size else None
        return model.encoder(model.packed_input(images, vector)).float(), mask


def observation_inputs(obs_space, batch: int) -> dict[str, torch.Tensor]:
    """A batch of sample observations as the graph's inputs, by name: "obs", or a packed
    observation's parts."""
    obs = np.stack([obs_space.sample() for _ in range(batch)])
    parts = obs_space.unpack(obs) if isinstance(obs_space, PackedObservation) else {"obs": obs}
    return {name: torch.as_tensor(part) for name, part in parts.items()}


def output_names(model: ActorCritic) -> list[str]:
    names = ["logits"] if model.discrete else ["mean", "std"]
    return names + ["value"] + (["rnn_state_out"] if model.rnn_type else [])


def export_onnx(model: ActorCritic, obs_space, path: str, metadata: dict) -> list[str]:
    """Write `model`'s acting step to `path` as ONNX (a batch axis of any size); returns its inputs'
    names."""
    policy = ActingPolicy(model.float().eval()).eval()
    # not 1: torch.export fixes a size of 1
    observations = observation_inputs(obs_space, 2)
    inputs = (
        *observations.values(),
        *([torch.zeros(2, model.rnn_state_size)] if model.rnn_type else []),
    )
    input_names = [*observations, "rnn_state"][: len(inputs)]
    names = output_names(model)
    batch = torch.export.Dim("batch")
    # the exporter's notes (optional torchvision ops it skips, deprecations inside torch) say
    # nothing about this model
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            policy,
            inputs,
            path,
            input_names=input_names,
            output_names=names,
            opset_version=OPSET,
            dynamic_shapes=(tuple({0: batch} for _ in inputs),),
            dynamo=True,
            verbose=False,
            external_data=False,
            # one file to copy: a policy is far below ONNX's 2 GB limit
        )
    import onnx

    exported = onnx.load(path)
    onnx.helper.set_model_props(exported, {key: str(value) for key, value in metadata.items()})
    onnx.save(exported, path)
    return input_names
