"""asyncrl: asynchronous APPO at the throughput one machine can give, in the style of Sample Factory."""

from asyncrl.envs import make_env, register_env

__all__ = ["make_env", "register_env"]
