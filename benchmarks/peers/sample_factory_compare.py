"""asyncrl vs Sample Factory 2.1.1, side by side: same env, model size, workers, envs per worker,
rollout, batch size and wall time, one after the other in one invocation.

    python -m benchmarks.peers.sample_factory_compare [--envs doom_basic CartPole-v1] [--seconds S] [--rounds 1]

Sample Factory pins numpy<2 and gymnasium 0.29, so it runs from its own virtualenv, which this
script creates on first use (default ~/.cache/asyncrl/sf_venv: torch at the version installed here,
sample-factory==2.1.1, vizdoom at the version installed here, ale-py 0.9.1 for its Atari example).
Both sides run on the same device (CPU here; with a GPU both use it). Frames/s of each side = frames
counted by the system itself over the wall-clock window after --warmup_seconds since launch; rewards
are the env's own (Sample Factory's VizDoom wrapper reports doom_basic x 0.01: undone). Writes
benchmarks/results/peers/sample_factory_compare.{md,json,png}.
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import numpy as np

from asyncrl.core.leftovers import shm_entries
from benchmarks.common import (
    group_results,
    machine,
    peer_venv,
    train_and_watch,
    venv_site_packages,
    write_result,
)

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

SF_VERSION = "2.1.1"

# The shared settings per env (Sample Factory's flag names, which asyncrl shares), and each side's
# extras. doom_basic: Sample Factory's default VizDoom model (convnet_simple + 512 GRU) on both
# sides. CartPole-v1: asyncrl's earlier CartPole settings (MLP 64x64, no RNN, 4 epochs x 4
# minibatches) at 2 workers x 16 envs, given to both, and on asyncrl's side a policy worker process
# between the rollout workers as in Sample Factory (CartPole's own defaults now act in the rollout
# workers, 64 envs a worker, 2 epochs).
COMMON = {
    "doom_basic": {
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 1024,
    },
    "CartPole-v1": {
        "num_workers": 2,
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 1024,
        "use_rnn": False,
        "num_epochs": 4,
        "num_batches_per_epoch": 4,
        "learning_rate": 0.001,
        "reward_scale": 0.1,
    },
    # Atari: asyncrl's atari defaults (Sample Factory's Atari example settings) at 2 workers x 8
    # envs; 1024 samples per update in 4 minibatches (Sample Factory's --batch_size is the
    # minibatch: 256, in SF_EXTRA)
    "atari_breakout": {
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "worker_num_splits": 2,
        "rollout": 128,
        "num_batches_per_epoch": 4,
    },
}
# asyncrl's flags beyond the shared ones
ASYNCRL_EXTRA = {"CartPole-v1": {"worker_inference": False}}
SF_EXTRA = {
    "doom_basic": ["-m", "sf_examples.vizdoom.train_vizdoom"],
    "CartPole-v1": [
        "-m",
        "sf_examples.train_gym_env",
        "--encoder_mlp_layers",
        "64",
        "64",
        "--recurrence",
        "1",
    ],
    # its example trains synchronously by default; asyncrl is asynchronous: SF's asynchronous mode
    # is the like one
    "atari_breakout": [
        "-m",
        "sf_examples.atari.train_atari",
        "--async_rl",
        "True",
        "--batch_size",
        "256",
    ],
}
ATARI_NOTE = (
    "atari_breakout: both sides with the settings of Sample Factory's Atari example (Nature conv net, "
    "no RNN, GAE, 4 epochs, clipped rewards, linear rate decay), its `--async_rl True` mode, and 1024 "
    "samples per update in 4 minibatches (asyncrl's default --batch_size 1024; Sample Factory's --batch_size "
    "is the minibatch: 256). Sample Factory's logged episode reward (0.2-0.5 here) is below a random "
    "policy's whole-game Breakout score (about 1.2, as asyncrl reports it), as if counted per life: frames/s "
    "is the comparison here."
)
# Sample Factory's VizDoom envs scale doom_basic's and doom_deadly_corridor's rewards by 0.01 (1
# elsewhere)
SF_REWARD_UNIT = {
    "doom_basic": 100.0,
    "doom_deadly_corridor": 100.0,
    "CartPole-v1": 1.0,
    "atari_breakout": 1.0,
}
# what Sample Factory logs as it trains: the frames so far, and its policy 0's mean episode reward
# (in its scaling)
SF_FRAMES = re.compile(r"Total num frames: (\d+)")
SF_REWARD = re.compile(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)\]")
TARGET_REWARD = {"doom_basic": 70.0, "CartPole-v1": 475.0, "atari_breakout": 10.0}
SECONDS = {
    "doom_basic": 300.0,
    "CartPole-v1": 120.0,
    "atari_breakout": 240.0,
    # per run, unless --seconds says otherwise
}


def ensure_sf_venv(path: str) -> str:
    import vizdoom

    python = peer_venv(
        path,
        "Sample Factory",
        "sample_factory, vizdoom, ale_py",
        [f"sample-factory=={SF_VERSION}", f"vizdoom=={vizdoom.__version__}", "ale-py==0.9.1"],
    )
    # ale-py 0.9 ships its ROMs (the 0.8 that SF's [atari] extra pins downloads them) but registers
    # its gymnasium ids only when imported: a .pth line imports it in every process of the venv,
    # SF's spawned workers included
    with open(os.path.join(venv_site_packages(python), "register_ale_ids.pth"), "w") as f:
        f.write("import ale_py\n")
    return python


def sf_run(python: str, env: str, seconds: float, train_dir: str, device: str) -> list[dict]:
    """Run Sample Factory; returns rows {wall_s, env_steps, reward} parsed from its log as lines
    appear."""
    args = [
        python,
        *SF_EXTRA[env],
        f"--env={env}",
        f"--experiment=sf_{env}",
        f"--train_dir={train_dir}",
        f"--device={device}",
        f"--train_for_seconds={int(seconds)}",
        "--save_every_sec=1000000",
    ]
    args += [f"--{k}={v}" for k, v in COMMON[env].items()]
    # what /dev/shm holds before: whatever of its kinds appears meanwhile is this run's (nothing else
    # runs beside it)
    shm_before = leftover_kinds_in_shm()
    launch = time.monotonic()
    # its own session: its children (and their VizDoom engines) outlive a killed parent, so we stop
    # the group
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=train_dir,
        start_new_session=True,
    )
    stop_group = lambda: os.killpg(proc.pid, signal.SIGKILL)  # noqa: E731
    rows = []
    log = []
    frames = None
    # it does not always stop at --train_for_seconds
    killer = threading.Timer(seconds + 30, stop_group)
    killer.start()
    for line in proc.stdout:
        log.append(line)
        wall = round(time.monotonic() - launch, 2)
        if m := SF_FRAMES.search(line):
            frames = int(m.group(1))
            rows.append({"wall_s": wall, "env_steps": frames, "reward": None})
        if (m := SF_REWARD.search(line)) and frames is not None:
            rows[-1]["reward"] = float(m.group(1)) * SF_REWARD_UNIT[env]
    proc.wait()
    killer.cancel()
    try:
        stop_group()
    except ProcessLookupError:
        pass
    # its VizDoom engines (killed, or gone before their parent without closing) and its
    # multiprocessing semaphores leave their /dev/shm entries behind
    for name in leftover_kinds_in_shm() - shm_before:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join("/dev/shm", name))
    if not rows:
        raise RuntimeError(
            "Sample Factory reported no frames; its log ends with:\n" + "".join(log[-30:])
        )
    return rows


def leftover_kinds_in_shm() -> set[str]:
    """The /dev/shm entries of the kinds a killed Sample Factory run leaves: its VizDoom engines'
    segments and message queues, its multiprocessing semaphores."""
    return {name for name in shm_entries() if name.startswith(("ViZDoom", "sem.mp-"))}


def asyncrl_run(env: str, seconds: float, train_dir: str, device: str) -> list[dict]:
    args = [
        "--env",
        env,
        "--experiment",
        f"asyncrl_{env}",
        "--train_dir",
        train_dir,
        "--device",
        device,
        "--train_for_seconds",
        str(seconds),
        "--experiment_summaries_interval",
        "5",
        "--restart_behavior",
        "restart",
    ]
    for k, v in {**COMMON[env], **ASYNCRL_EXTRA.get(env, {})}.items():
        args += [f"--{k}", str(v)]
    rows = train_and_watch(args, os.path.join(train_dir, f"asyncrl_{env}"), timeout_s=seconds + 180)
    return [
        {"wall_s": r["wall_s"], "env_steps": r["env_steps"], "reward": r["episode_reward_mean"]}
        for r in rows
    ]


def window_fps(rows: list[dict], warmup: float) -> float:
    """Frames per second between the first row after the warm-up and the last row before the run's
    end."""
    window = [r for r in rows if r["wall_s"] >= warmup]
    if len(window) < 2:
        return float("nan")
    return (window[-1]["env_steps"] - window[0]["env_steps"]) / (
        window[-1]["wall_s"] - window[0]["wall_s"]
    )


def time_to(rows: list[dict], target: float):
    return next(
        (r["wall_s"] for r in rows if r["reward"] is not None and r["reward"] >= target), None
    )


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (env, r) in zip(axes[0], results.items()):
        for side, color in (("asyncrl", "tab:blue"), ("sample_factory", "tab:orange")):
            for i, rows in enumerate(r[side]["rounds"]):
                pts = [(row["wall_s"], row["reward"]) for row in rows if row["reward"] is not None]
                if pts:
                    label = f"{side} ({r[side]['fps']:,.0f} frames/s)" if i == 0 else None
                    ax.plot(*zip(*pts), color=color, alpha=0.9, label=label)
        ax.axhline(TARGET_REWARD[env], color="gray", linestyle=":", linewidth=1)
        ax.set_title(env)
        ax.set_xlabel("wall time since launch (s)")
        ax.set_ylabel("mean episode return")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(COMMON), choices=list(COMMON))
    parser.add_argument("--seconds", type=float, default=None, help=f"per run (default: {SECONDS})")
    parser.add_argument("--warmup_seconds", type=float, default=30)
    parser.add_argument(
        "--rounds", type=int, default=1, help="alternating asyncrl / Sample Factory runs per env"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sf_venv", default=os.path.expanduser("~/.cache/asyncrl/sf_venv"))
    parser.add_argument(
        "--out", default="sample_factory_compare", help="name of the result files in results/"
    )
    args = parser.parse_args()
    python = ensure_sf_venv(args.sf_venv)
    train_dir = tempfile.mkdtemp(prefix="asyncrl_vs_sf_")
    results = {}
    for env in args.envs:
        runs = {"asyncrl": [], "sample_factory": []}
        seconds = args.seconds or SECONDS[env]
        for _ in range(args.rounds):
            runs["asyncrl"].append(asyncrl_run(env, seconds, train_dir, args.device))
            runs["sample_factory"].append(sf_run(python, env, seconds, train_dir, args.device))
        results[env] = {}
        for side, rounds in runs.items():
            fps = [window_fps(rows, args.warmup_seconds) for rows in rounds]
            reach = [time_to(rows, TARGET_REWARD[env]) for rows in rounds]
            final = [
                next((r["reward"] for r in reversed(rows) if r["reward"] is not None), None)
                for rows in rounds
            ]
            results[env][side] = {
                "fps": float(np.median(fps)),
                "fps_runs": fps,
                "time_to_target_s": reach,
                "final_reward": final,
                "rounds": rounds,
            }
        a = results[env]["asyncrl"]
        s = results[env]["sample_factory"]
        results[env]["fps_ratio"] = a["fps"] / s["fps"]
        print(
            f"{env}: asyncrl {a['fps']:,.0f} frames/s, Sample Factory {s['fps']:,.0f} frames/s, "
            f"ratio {results[env]['fps_ratio']:.2f}; time to {TARGET_REWARD[env]:g}: {a['time_to_target_s']} vs "
            f"{s['time_to_target_s']} s",
            flush=True,
        )
    shutil.rmtree(train_dir, ignore_errors=True)
    plot(results, os.path.join(RESULTS, f"{args.out}.png"))
    write_result(
        args.out,
        {"machine": machine(), "args": vars(args), "common": COMMON, "results": results},
        markdown(results, args),
    )


def markdown(results: dict, args) -> str:
    seconds = f" --seconds {args.seconds:g}" if args.seconds else ""
    cmd = (
        f"python -m benchmarks.peers.sample_factory_compare --envs {' '.join(args.envs)}{seconds} "
        f"--warmup_seconds {args.warmup_seconds:g} --rounds {args.rounds} --device {args.device}"
        + (f" --out {args.out}" if args.out != "sample_factory_compare" else "")
    )
    lines = [
        f"# asyncrl vs Sample Factory {SF_VERSION}",
        "",
        f"Seconds per run: {args.seconds or SECONDS}",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{cmd}`",
        "",
        "Frames/s: frames counted after the first "
        f"{args.warmup_seconds:g} s since launch (median over rounds). Time to target: seconds from launch until "
        "the mean return of the last 100 episodes first reaches it (- = not within the run).",
        "",
        "| env | settings (both sides) | asyncrl frames/s | SF frames/s | ratio | asyncrl time to target "
        "| SF time to target | time ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env, r in results.items():
        a = r["asyncrl"]
        s = r["sample_factory"]
        ta = [t for t in a["time_to_target_s"] if t is not None]
        ts = [t for t in s["time_to_target_s"] if t is not None]
        ratio = f"{np.median(ta) / np.median(ts):.2f}" if ta and ts else "-"
        settings = ", ".join(f"{k} {v}" for k, v in COMMON[env].items())
        lines.append(
            f"| {env} (target {TARGET_REWARD[env]:g}) | {settings} | {a['fps']:,.0f} | {s['fps']:,.0f} | "
            f"{r['fps_ratio']:.2f} | {a['time_to_target_s']} | {s['time_to_target_s']} | {ratio} |"
        )
    if "atari_breakout" in results:
        lines += ["", ATARI_NOTE]
    lines += ["", f"![reward vs wall time]({args.out}.png)", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
