"""Atari raw speed: asyncrl's per-env path vs its vector path vs the vector envs' own loops, one
after the other.

    python -m benchmarks.speed.atari_speed [--game breakout] [--seconds 20] [--rounds 3]

All sides: atari_<game>'s baselines preprocessing (84x84 gray, 4 stacked, frameskip 4 max-pooled, no-op starts,
FIRE reset), random actions, 16 envs on the machine's cores. Ours through one instrument, `asyncrl bench` (2 workers
x 8 envs): raw mode per env (each env a vector env of one), raw mode vector (each worker steps 2 vector envs of 4),
and the sampler with the vector backend (the whole engine without learning); with EnvPool installed, the vector path
and the sampler again on the envpool engine (`--env_options '{"engine": "envpool"}'`). The vector envs' own loops:
ALE's AtariVectorEnv of 16 with one thread per core, and EnvPool's (if it is installed) with the same settings, each
stepped in a bare loop. Rounds alternate the sides so machine noise hits all alike; medians and ratios are printed.
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import psutil

from asyncrl.envs import EnvError
from benchmarks.common import asyncrl_bench, machine, write_result

FRAMESKIP = 4
NUM_ENVS = 16


def own_loop_fps(make, seconds: float) -> float:
    # a gymnasium VectorEnv (EnvPool's too, since 1.2)
    envs = make()
    # random seeds (EnvPool's are fixed when made)
    envs.reset()
    n = envs.single_action_space.n
    rng = np.random.default_rng(0)
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(rng.integers(0, n, NUM_ENVS))
        steps += NUM_ENVS
    fps = steps * FRAMESKIP / (time.perf_counter() - start)
    envs.close()
    return fps


def ale_vector(game: str):
    from asyncrl.envs.atari import make_vector_game

    return make_vector_game(game, NUM_ENVS, num_threads=psutil.cpu_count())


def envpool_vector(game: str):
    """EnvPool's own vector env with the baselines preset, as the envpool engine makes it (its
    wrapper left out)."""
    from asyncrl.envs.atari import MAX_FRAMES_PER_GAME, make_envpool

    return make_envpool(
        game, NUM_ENVS, psutil.cpu_count(), MAX_FRAMES_PER_GAME, "baselines", list(range(NUM_ENVS))
    )


def ours(game: str, mode: str, backend: str, seconds: float, engine: str = "ale") -> float:
    flags = [
        "--env",
        f"atari_{game}",
        "--mode",
        mode,
        "--env_backend",
        backend,
        "--num_workers",
        2,
        "--num_envs_per_worker",
        8,
        "--seconds",
        seconds,
        "--warmup_seconds",
        5,
        "--env_options",
        f'{{"engine": "{engine}"}}',
    ]
    with tempfile.TemporaryDirectory() as train_dir:
        result, _ = asyncrl_bench([str(f) for f in flags], train_dir)
    return result[f"{mode}_fps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="breakout")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sides = {
        "ours raw per-env": lambda: ours(args.game, "raw", "per_env", args.seconds),
        "ours raw vector": lambda: ours(args.game, "raw", "vector", args.seconds),
        "ours sampler vector": lambda: ours(args.game, "sampler", "vector", args.seconds),
        "ALE vector env, own loop": lambda: own_loop_fps(
            lambda: ale_vector(args.game), args.seconds
        ),
    }
    try:
        envpool_vector(args.game).close()
        sides["EnvPool, own loop"] = lambda: own_loop_fps(
            lambda: envpool_vector(args.game), args.seconds
        )
        sides["ours raw vector, envpool engine"] = lambda: ours(
            args.game, "raw", "vector", args.seconds, "envpool"
        )
        sides["ours sampler vector, envpool engine"] = lambda: ours(
            args.game, "sampler", "vector", args.seconds, "envpool"
        )
    # EnvPool not installed, or without this game
    except EnvError as e:
        print(f"EnvPool's sides are left out: {e}")
    fps = {side: [] for side in sides}
    for r in range(args.rounds):
        for side, measure in sides.items():
            fps[side].append(measure())
            print(f"round {r}: {side}: {fps[side][-1]:,.0f} frames/s", flush=True)
    median = {side: statistics.median(values) for side, values in fps.items()}
    reference = "EnvPool, own loop" if "EnvPool, own loop" in median else "ALE vector env, own loop"
    rows = "\n".join(
        f"| {side} | {' / '.join(f'{v:,.0f}' for v in fps[side])} | {median[side]:,.0f} | "
        f"{median[side] / median[reference]:.2f} |"
        for side in sides
    )
    ratios = [
        ("vector path / per-env path", "ours raw vector", "ours raw per-env"),
        ("vector path / ALE's own loop", "ours raw vector", "ALE vector env, own loop"),
        (
            "envpool engine's vector path / EnvPool's own loop",
            "ours raw vector, envpool engine",
            "EnvPool, own loop",
        ),
    ]
    ratio_line = "; ".join(
        f"{what}: {median[a] / median[b]:.2f}" for what, a, b in ratios if b in median
    )
    markdown = (
        f"# Atari raw speed: atari_{args.game}, {NUM_ENVS} envs\n\nMachine: {machine()}\n\n"
        f"Command: `python -m benchmarks.speed.atari_speed --game {args.game} --seconds {args.seconds:g} "
        f"--rounds {args.rounds}`\n\n| side | frames/s per round | median | / {reference} |\n"
        f"| --- | --- | --- | --- |\n{rows}\n\n{ratio_line}\n"
    )
    write_result(
        f"atari_speed_{args.game}", {"fps": fps, "median": median, "reference": reference}, markdown
    )


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    main()
