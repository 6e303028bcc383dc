"""`asyncrl export`: a trained policy as an ONNX file, to act outside Python's torch (onnxruntime, in any language).

    asyncrl export --experiment X [--train_dir D] [--format onnx] [--load_checkpoint_kind latest|best]
                   [--checkpoint FILE] [--policy_index 0] [--out FILE]

The file holds the acting policy, one step for a batch of agents, with the input normalizer folded in:
    inputs   obs [B, *obs shape] (the env's dtype: uint8 images, float32 vectors); rnn_state [B, H] (with an RNN)
    outputs  logits [B, actions] (Discrete), or mean [B, d] and std [B, d] (Box: a Gaussian; clip samples to the
             action bounds); value [B] (in return units); rnn_state_out [B, H] (with an RNN: feed it back, zeros at
             an episode start)
Its metadata (model.metadata_props) names the env, the action space and the recurrent state's size.
"""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from asyncrl.checkpoint import check_compatible, load_checkpoint
from asyncrl.config import ConfigError, OneLineErrorParser, add_config_arguments
from asyncrl.enjoy import checkpoint_to_load, config_of_run
from asyncrl.envs import make_agents
from asyncrl.model import ActorCritic, build_model

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
        action_params, value = model.heads(x)
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


def export(argv: list[str]) -> int:
    parser = OneLineErrorParser(prog="asyncrl export", description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=["onnx"], default="onnx", help="The file format (onnx).")
    parser.add_argument("--load_checkpoint_kind", choices=["latest", "best"], default="latest",
                        help="latest: the newest checkpoint; best: best_checkpoint.pth (written by evaluation).")
    parser.add_argument("--checkpoint", type=os.path.expanduser, default=None,
                        help="A checkpoint file to export instead (any run's).")
    parser.add_argument("--policy_index", type=int, default=0, help="Which policy of the run.")
    parser.add_argument("--out", type=os.path.expanduser, default=None,
                        help="The file to write; default <experiment>/policy_p<index>.onnx.")
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    args = {k: given.pop(k) for k in ("format", "load_checkpoint_kind", "checkpoint", "policy_index", "out")}
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ConfigError("asyncrl export needs onnx: pip install onnx onnxruntime (or pip install -e \".[onnx]\")") \
            from None
    cfg = config_of_run(given)
    path = checkpoint_to_load(args, cfg)
    env = make_agents(cfg.env, **cfg.env_kwargs())
    env.close()
    model = build_model(env.observation_space, env.action_space, cfg)
    state = load_checkpoint(path, ("model",))
    check_compatible(path, state["model"], model)
    model.load_state_dict(state["model"])
    out = args["out"] or os.path.join(cfg.experiment_dir, f"policy_p{args['policy_index']}.onnx")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    export_onnx(model, env.observation_space, out, {"env": cfg.env, "action_space": env.action_space,
                                                    "rnn_state_size": model.rnn_state_size,
                                                    "train_step": state.get("train_step", "?")})
    print(f"asyncrl export: {path} -> {out} (inputs {', '.join(['obs', 'rnn_state'][:1 + bool(model.rnn_type)])}; "
          f"outputs {', '.join(output_names(model))})", flush=True)
    return 0
