"""asyncrl: asynchronous APPO at the throughput one machine can give, in the style of Sample
Factory.

From Python: `train` (as `asyncrl train`), `load` (a trained policy that acts in your own loop),
`register_env` and `register_encoder` (your own env or encoder, chosen by --env and --encoder),
`make_env` (an env as the run makes it).
"""

from asyncrl.api import TrainResult, load, train
from asyncrl.envs import make_env, register_env
from asyncrl.model.custom_encoders import register_encoder

__all__ = ["TrainResult", "load", "make_env", "register_encoder", "register_env", "train"]
