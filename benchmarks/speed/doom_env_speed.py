"""asyncrl's VizDoom env vs raw `vizdoom` stepping, side by side, same rendering settings.

    python -m benchmarks.speed.doom_env_speed [--seconds 5] [--rounds 3]

Both sides: one process, random actions, frameskip 4, 256x144 CRCGCB rendering, window and sound
off, the screen read every step. Raw = a bare DoomGame loop; ours = `asyncrl.make_env(name)` (which
also picks actions from its table, returns the 128x72 strided view and fills `info` at episode
ends). Rounds alternate raw/ours so machine noise hits both alike. Prints frames/s and ours/raw per
scenario.
"""

import argparse
import os
import time

import numpy as np

from benchmarks.common import machine, write_result

SCENARIOS = ["doom_basic", "doom_defend_the_center", "doom_health_gathering"]
FRAMESKIP = 4


def raw_fps(cfg_file: str, seconds: float) -> float:
    import vizdoom as vzd

    game = vzd.DoomGame()
    game.load_config(os.path.join(vzd.scenarios_path, cfg_file))
    game.set_window_visible(False)
    game.set_sound_enabled(False)
    game.set_screen_resolution(vzd.ScreenResolution.RES_256X144)
    game.set_screen_format(vzd.ScreenFormat.CRCGCB)
    game.init()
    n = game.get_available_buttons_size()
    actions = np.eye(n).tolist()
    rng = np.random.default_rng(0)
    frames = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        if game.is_episode_finished():
            game.new_episode()
        game.make_action(actions[rng.integers(n)], FRAMESKIP)
        state = game.get_state()
        if state is not None:
            _ = state.screen_buffer
        frames += FRAMESKIP
    elapsed = time.perf_counter() - start
    game.close()
    return frames / elapsed


def our_fps(name: str, seconds: float) -> float:
    from asyncrl.envs import make_env

    env = make_env(name)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n = env.action_space.n
    frames = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(int(rng.integers(n)))
        if terminated or truncated:
            env.reset()
        frames += FRAMESKIP
    elapsed = time.perf_counter() - start
    env.close()
    return frames / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from asyncrl.envs.doom import SCENARIOS as TABLE

    results = {}
    for name in SCENARIOS:
        raw = []
        ours = []
        for _ in range(args.rounds):
            raw.append(raw_fps(TABLE[name].cfg, args.seconds))
            ours.append(our_fps(name, args.seconds))
        results[name] = {
            "raw_fps": float(np.mean(raw)),
            "ours_fps": float(np.mean(ours)),
            "ratio": float(np.mean(ours) / np.mean(raw)),
        }
        print(
            f"{name}: raw {np.mean(raw):,.0f} frames/s, ours {np.mean(ours):,.0f} frames/s, "
            f"ours/raw {results[name]['ratio']:.3f}",
            flush=True,
        )
    lines = [
        "# VizDoom env speed: asyncrl's env vs raw vizdoom (one process, random actions, frameskip 4, 256x144)",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `python -m benchmarks.speed.doom_env_speed --seconds {args.seconds:g} --rounds {args.rounds}`",
        "",
        "| scenario | raw frames/s | asyncrl env frames/s | ours / raw |",
        "| --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['raw_fps']:,.0f} | {r['ours_fps']:,.0f} | {r['ratio']:.3f} |")
    write_result(
        "doom_env_speed",
        {
            "machine": machine(),
            "seconds": args.seconds,
            "rounds": args.rounds,
            "scenarios": results,
        },
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
