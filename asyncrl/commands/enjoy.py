"""`asyncrl enjoy`: watch a trained policy. Loads a run's latest or best checkpoint (or a given file), plays
--max_num_episodes, prints each episode's return, length and env stats, and with --save_video True writes the
episodes as one video (mp4, or gif by the file name) into the experiment folder.

Flags follow Sample Factory's enjoy (--env, --train_dir, --experiment, --max_num_episodes, --save_video,
--load_checkpoint_kind, --policy_index, --eval_deterministic, --fps); any training flag may be given too, e.g.
--env_frameskip. It reads only finished checkpoint files, so it works while the run is still training.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments, parse_bool
from asyncrl.commands.hub import add_hub_argument, run_from_hub
from asyncrl.commands.saved_run import checkpoint_to_load, config_of_run
from asyncrl.core.checkpoint import (
    load_weights,
)
from asyncrl.envs import EnvError, make_agents


def parse_enjoy_args(argv: list[str]) -> tuple[dict, Config]:
    parser = OneLineErrorParser(
        prog="asyncrl enjoy",
        usage="%(prog)s --experiment NAME [--train_dir DIR] [--FLAG VALUE ...]",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--max_num_episodes", type=int, default=3, help="Episodes to play.")
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
        help="A checkpoint file to load instead (any run's).",
    )
    parser.add_argument("--policy_index", type=int, default=0, help="Which policy of the run acts.")
    parser.add_argument(
        "--save_video",
        type=parse_bool,
        default=False,
        help="Write the episodes as a video into the experiment folder.",
    )
    parser.add_argument(
        "--video_name", default="replay.mp4", help="Video file name (.mp4, or .gif)."
    )
    parser.add_argument(
        "--fps",
        type=float,
        default=None,
        help="Video frames per second; default: the env's real time (its render fps / frameskip).",
    )
    add_hub_argument(parser)
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    args = {
        k: given.pop(k)
        for k in (
            "max_num_episodes",
            "load_checkpoint_kind",
            "checkpoint",
            "policy_index",
            "save_video",
            "video_name",
            "fps",
            "hf_repository",
        )
    }
    if args["max_num_episodes"] <= 0:
        raise ConfigError(f"--max_num_episodes must be positive, got {args['max_num_episodes']}")
    if args["save_video"]:
        require("video", "--save_video")
    return args, config_of_run(run_from_hub(given, args["hf_repository"]))


def make_video_env(cfg: Config):
    """The env with render_mode="rgb_array", checked to give frames; EnvError if it cannot."""
    # pygame-drawn gymnasium envs: frames only, no window
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        # MuJoCo envs: its default, glfw, needs a screen; EGL needs none
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        env = make_agents(cfg.env, **cfg.env_kwargs(), render_mode="rgb_array")
    except (TypeError, EnvError) as e:
        raise EnvError(
            f"--save_video: env {cfg.env!r} gives no frames with render_mode='rgb_array' ({e})"
        ) from None
    env.reset(seed=0)
    try:
        frame = env.render()
    except Exception as e:  # noqa: BLE001 - a renderer that cannot start here (no OpenGL for MuJoCo): one line
        env.close()
        raise EnvError(
            f"--save_video: env {cfg.env!r} cannot render here ({type(e).__name__}: {e}); MuJoCo envs "
            f"render through MUJOCO_GL=egl or osmesa (Debian: apt install libegl1 or libosmesa6)"
        ) from None
    if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[-1] == 3):
        env.close()
        raise EnvError(
            f"--save_video: env {cfg.env!r} gives no frames (render() returned {type(frame).__name__}, "
            f"not an HxWx3 image)"
        )
    return env


def write_video(frames: list[np.ndarray], path: str, fps: float) -> None:
    # the video extra's, checked with the flags
    import imageio.v2 as imageio

    if path.endswith(".gif"):
        imageio.mimsave(path, frames, duration=1000 / fps, loop=0)
        return
    # even sizes for the H.264 encoder's yuv420p; no resizing, no dropped frames
    frames = [f[: f.shape[0] // 2 * 2, : f.shape[1] // 2 * 2] for f in frames]
    with imageio.get_writer(
        path, fps=fps, codec="libx264", macro_block_size=1, quality=7
    ) as writer:
        for frame in frames:
            writer.append_data(frame)


def enjoy(argv: list[str]) -> int:
    args, cfg = parse_enjoy_args(argv)
    path = checkpoint_to_load(args, cfg)
    # after the flags and the checkpoint's path are checked: its import takes seconds
    import torch

    from asyncrl.model.actor_critic import build_model
    from asyncrl.roles.evaluator import play_episode

    env = make_video_env(cfg) if args["save_video"] else make_agents(cfg.env, **cfg.env_kwargs())
    model = build_model(env.observation_space, env.action_space, cfg).eval()
    state = load_weights(path, model)
    print(
        f"asyncrl enjoy: {path} (train step {state.get('train_step', '?')}, {state.get('env_steps', '?')} env "
        f"steps), {'argmax' if cfg.eval_deterministic else 'sampled'} actions",
        flush=True,
    )
    frames = [] if args["save_video"] else None
    torch.manual_seed(cfg.seed or 0)
    try:
        for i in range(args["max_num_episodes"]):
            seed = None if cfg.seed is None else cfg.seed + i
            episode = play_episode(model, env, cfg.eval_deterministic, seed, frames)
            stats = "".join(f", {k} {v:g}" for k, v in episode["stats"].items())
            agents = (
                f" (agents: {', '.join(f'{r:.2f}' for r in episode['returns'])})"
                if env.num_agents > 1
                else ""
            )
            print(
                f"episode {i}: return {episode['return']:.2f}{agents}, length {episode['length']}{stats}",
                flush=True,
            )
    finally:
        env.close()
    if frames is not None:
        fps = args["fps"] or env.metadata.get("render_fps", 30) / env.frameskip
        video = os.path.join(cfg.experiment_dir, args["video_name"])
        os.makedirs(cfg.experiment_dir, exist_ok=True)
        write_video(frames, video, fps)
        # the video joins the run's wandb run
        if cfg.with_wandb:
            from asyncrl.roles.wandb_run import WandbRun

            wandb = WandbRun(cfg, cfg.num_policies)
            wandb.log_video(args["policy_index"], video, state.get("env_steps"))
            wandb.finish()
        print(f"video: {video} ({len(frames)} frames at {fps:g} fps)", flush=True)
    return 0
