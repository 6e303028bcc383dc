"""The flags of the model: the encoder, the recurrent core, the heads, the precision."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag


@dataclass
class ModelFlags:
    """The model: encoder, recurrent core, heads, precision"""

    encoder: str = flag(
        "auto",
        "auto (conv for images, mlp for vectors), conv, mlp, or the name of an encoder registered with "
        "asyncrl.register_encoder.",
    )
    encoder_source: str | None = flag(
        None,
        "Where a registered --encoder is defined: a module's name, or a script's path; importing it registers the "
        "encoder. A run records it by itself, for enjoy, export and asyncrl.load.",
    )
    encoder_conv_architecture: str = flag(
        "convnet_simple",
        "The conv encoder: convnet_simple (three convs, the last "
        "halving the map; ELU) or convnet_atari (the Nature DQN encoder; ReLU).",
        choices=["convnet_simple", "convnet_atari"],
    )
    encoder_mlp_layers: list = flag(
        [512, 512], "Hidden sizes of the MLP encoder, e.g. 256 256 or '[256, 256]'."
    )
    nonlinearity: str = flag(
        "auto",
        "The encoder's activation: elu, relu or tanh; auto: tanh in an MLP, the conv "
        "architecture's own in a conv encoder.",
        choices=["auto", "elu", "relu", "tanh"],
    )
    actor_critic_share_weights: bool = flag(
        True,
        "The actor and the critic share the encoder; False gives the critic "
        "an encoder of its own (needs --use_rnn False).",
    )
    critic_mlp_layers: list = flag(
        [],
        "Hidden sizes of the critic's own MLP with --actor_critic_share_weights False, "
        "e.g. 256 256 (a wider critic than actor); none given: --encoder_mlp_layers.",
    )
    initial_stddev: float = flag(
        1.0,
        "Box actions: the Gaussian policy's standard deviation at the start (each "
        "action dimension's log-std is learned from there).",
    )
    use_rnn: bool = flag(True, "Recurrent core after the encoder.")
    rnn_type: str = flag("gru", "gru or lstm.", choices=["gru", "lstm"])
    rnn_size: int = flag(512, "Hidden size of the recurrent core.")
    recurrence: int = flag(
        -1, "BPTT length in steps; must divide --rollout. -1: --rollout with an RNN, 1 without."
    )
    precision: str = flag(
        "auto",
        "float32, or bfloat16: learners run the encoder under bfloat16 autocast (float32 "
        "master weights, core and heads) and policy workers keep the model's weights in bfloat16 "
        "(outputs float32). auto: bfloat16 for a conv encoder on hardware with native bfloat16 (CPUs "
        "with AVX512-BF16/AMX, recent GPUs), else float32.",
        choices=["auto", "float32", "bfloat16"],
    )
