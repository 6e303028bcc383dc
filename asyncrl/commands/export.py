"""`asyncrl export`: a trained policy as an ONNX file, to act outside Python's torch (onnxruntime,
in any language).

    asyncrl export --experiment X [--train_dir D] [--format onnx] [--load_checkpoint_kind latest|best]
                   [--checkpoint FILE] [--policy_index 0] [--out FILE]

The file holds the acting policy, one step for a batch of agents, with the input normalizer folded in:
    inputs   obs [B, *obs shape] (the env's dtype: uint8 images, float32 vectors; an env's action mask at the end, as
             asyncrl.make_env's observations have it), or for images beside other entries
             (packed_observations.PackedObservation) each image [B, C, H, W] uint8 by its key and
             vector [B, n] float32, as the space's unpack(obs) gives them; rnn_state [B, H] (with an RNN)
    outputs  logits [B, actions] (Discrete; MultiDiscrete and MultiBinary: each dimension's logits one after
             another, as many as it has choices: sample each dimension on its own; a masked action's logit is -1e8),
             or mean [B, d] and std [B, d]
             (Box: a Gaussian; clip samples to the action bounds); value [B] (in return units); rnn_state_out [B, H]
             (with an RNN: feed it back, zeros at an episode start)
Its metadata (model.metadata_props) names the env, the action space and the recurrent state's size.
"""

from __future__ import annotations

import os

from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments
from asyncrl.commands.saved_run import checkpoint_to_load, config_of_run
from asyncrl.core.checkpoint import load_weights
from asyncrl.envs import make_agents


def export(argv: list[str]) -> int:
    parser = OneLineErrorParser(
        prog="asyncrl export",
        usage="%(prog)s --experiment NAME [--train_dir DIR] [--out FILE] [--FLAG VALUE ...]",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "--format", choices=["onnx"], default="onnx", help="The file format (onnx)."
    )
    parser.add_argument(
        "--load_checkpoint_kind",
        choices=["latest", "best"],
        default="latest",
        help="latest: the newest checkpoint; best: best_checkpoint.pth (written by evaluation).",
    )
    parser.add_argument(
        "--checkpoint",
        type=os.path.expanduser,
        default=None,
        help="A checkpoint file to export instead (any run's).",
    )
    parser.add_argument("--policy_index", type=int, default=0, help="Which policy of the run.")
    parser.add_argument(
        "--out",
        type=os.path.expanduser,
        default=None,
        help="The file to write; default <experiment>/policy_p<index>.onnx.",
    )
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    args = {
        k: given.pop(k)
        for k in ("format", "load_checkpoint_kind", "checkpoint", "policy_index", "out")
    }
    # onnxscript is torch's exporter: without it the export fails deep in torch
    require("onnx", "asyncrl export")
    cfg = config_of_run(given)
    path = checkpoint_to_load(args, cfg)
    env = make_agents(cfg.env, **cfg.env_kwargs())
    env.close()
    # torch's import (seconds) after the flags and the checkpoint's path
    from asyncrl.model.actor_critic import build_model
    from asyncrl.model.onnx_graph import export_onnx, output_names

    model = build_model(env.observation_space, env.action_space, cfg)
    state = load_weights(path, model)
    out = args["out"] or os.path.join(cfg.experiment_dir, f"policy_p{args['policy_index']}.onnx")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    inputs = export_onnx(
        model,
        env.observation_space,
        out,
        {
            "env": cfg.env,
            "action_space": env.action_space,
            "rnn_state_size": model.rnn_state_size,
            "train_step": state.get("train_step", "?"),
        },
    )
    print(
        f"asyncrl export: {path} -> {out} (inputs {', '.join(inputs)}; outputs {', '.join(output_names(model))})",
        flush=True,
    )
    return 0
