"""`asyncrl plot RUN_DIR...`: learning curves of one or more runs from their stats.jsonl, as one
PNG.

Three panels: mean episode return against env steps, against wall time (the launches of a resumed
run laid end to end), and frames/s against env steps (a launch's first row, whose interval holds the
start-up, left out, and a gap at each resume). One line per run and policy.
"""

from __future__ import annotations

import json
import os

from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import OneLineErrorParser


def read_run(run_dir: str) -> list[dict]:
    """The stats rows of a run, each with `wall_s` (seconds of training over all its launches so
    far) and `launch` (0 for the first launch, 1 for the first resume, ...)."""
    path = os.path.join(run_dir, "stats.jsonl")
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        raise ConfigError(
            f"{run_dir} has no readable stats.jsonl ({e.strerror}); give a run's folder, <train_dir>/<experiment>"
        ) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is damaged ({e})") from None
    offset = 0.0
    last = 0.0
    launch = 0
    for row in rows:
        # a new launch: its clock starts again
        if row["time_s"] < last:
            offset = offset + last
            launch = launch + 1
        last = row["time_s"]
        row["wall_s"] = offset + row["time_s"]
        row["launch"] = launch
    return rows


def throughput_line(rows: list[dict]) -> tuple[list, list]:
    """(env steps, frames/s) of one policy's rows while it trained: each launch's first row (its
    interval holds the start-up) left out, and NaN between launches so the line breaks at a resume
    instead of diving to its start-up."""
    xs = []
    ys = []
    for previous, row in zip(rows, rows[1:]):
        if row["launch"] != previous["launch"]:
            xs.append(float("nan"))
            ys.append(float("nan"))
        else:
            xs.append(row["env_steps"])
            ys.append(row["fps"])
    return xs, ys


def curves(run_dirs: list[str]) -> dict[str, list[dict]]:
    """label -> stats rows, one entry per run and policy."""
    out = {}
    for run_dir in run_dirs:
        rows = read_run(run_dir)
        name = os.path.basename(os.path.normpath(run_dir))
        policies = sorted({row["policy_id"] for row in rows})
        for p in policies:
            out[name if len(policies) == 1 else f"{name} p{p}"] = [
                r for r in rows if r["policy_id"] == p
            ]
    return out


def plot_runs(labelled: dict[str, list[dict]], path: str, title: str = "") -> str:
    # the plot extra's: imported only to draw
    import matplotlib

    # no display needed
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for label, rows in labelled.items():
        scored = [r for r in rows if r.get("episode_reward_mean") is not None]
        axes[0].plot(
            [r["env_steps"] for r in scored],
            [r["episode_reward_mean"] for r in scored],
            label=label,
        )
        axes[1].plot(
            [r["wall_s"] for r in scored], [r["episode_reward_mean"] for r in scored], label=label
        )
        axes[2].plot(*throughput_line(rows), label=label)
    for ax, xlabel, ylabel in zip(
        axes,
        ["env steps (frames)", "seconds of training", "env steps (frames)"],
        ["mean episode return", "mean episode return", "frames/s"],
    ):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cmd_plot(argv: list[str]) -> int:
    parser = OneLineErrorParser(prog="asyncrl plot", description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="A run's folder, <train_dir>/<experiment>."
    )
    parser.add_argument(
        "--out",
        type=os.path.expanduser,
        default=None,
        help="PNG to write; default: RUN_DIR/learning_curves.png for one run, ./learning_curves.png for several.",
    )
    parser.add_argument("--title", default="", help="Title above the panels.")
    args = parser.parse_args(argv)
    require("plot", "asyncrl plot")
    out = args.out or (
        os.path.join(args.run_dirs[0], "learning_curves.png")
        if len(args.run_dirs) == 1
        else "learning_curves.png"
    )
    print(plot_runs(curves(args.run_dirs), out, args.title))
    return 0
