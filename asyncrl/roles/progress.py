"""The run's progress in the terminal: one live line on an interactive terminal, a plain line per
summary elsewhere (a log file, CI)."""

from __future__ import annotations

import os
import sys


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


class ProgressDisplay:
    """The run in the terminal: on an interactive terminal one live line (a tqdm bar towards the nearer of
    --train_for_env_steps and --train_for_seconds, with frames, fps, return, lag and time left); otherwise (a log
    file, CI) a plain line per summary."""

    def __init__(self, interactive: bool, name: str):
        self.bar = None
        if interactive:
            from tqdm import tqdm

            # follow the terminal's size, unless it reports none (0 x 0, as a new pty does; tqdm
            # then hides the bar)
            sized = os.get_terminal_size(sys.stdout.fileno()).columns > 0
            self.name = name
            self.bar = tqdm(
                total=1000,
                desc=name,
                bar_format="{desc} |{bar:20}| {percentage:3.0f}%",
                file=sys.stdout,
                dynamic_ncols=sized,
                ncols=None if sized else 120,
                nrows=None if sized else 24,
            )

    def show(
        self, rows: list[dict], seconds_left: float | None, fraction_done: float | None
    ) -> None:
        if self.bar is None:
            print(progress_line(rows, seconds_left), flush=True)
            return
        self.bar.n = int(1000 * min(1.0, fraction_done or 0.0))
        self.bar.set_description_str(
            f"{self.name}: {short_progress(rows, seconds_left)}", refresh=True
        )

    def message(self, line: str) -> None:
        """A line of its own above the live bar (or among the plain lines)."""
        if self.bar is None:
            print(line, flush=True)
        else:
            self.bar.write(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def short_progress(rows: list[dict], seconds_left: float | None) -> str:
    parts = [
        f"{'p' + str(r['policy_id']) + ' ' if len(rows) > 1 else ''}{_si(r['env_steps'])} frames "
        f"{_si(r['fps'])} fps return {_fmt(r['episode_reward_mean'], '.1f')} "
        f"lag {_fmt(r['policy_lag_mean'], '.1f')}"
        for r in rows
    ]
    if seconds_left is not None:
        parts.append(f"left {int(seconds_left) // 60}m{int(seconds_left) % 60:02d}s")
    return " | ".join(parts)


def _si(value: float) -> str:
    """1234567 -> 1.2M: numbers that keep the live line short."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def progress_line(rows: list[dict], seconds_left: float | None) -> str:
    parts = []
    for r in rows:
        waiting = r.get("timing_learner_wait_batch")
        busy = None if waiting is None else 100 * (1 - waiting)
        parts.append(
            f"p{r['policy_id']}: {r['env_steps']:,} steps {r['fps']:,.0f} fps "
            f"reward {_fmt(r['episode_reward_mean'], '.2f')} lag {_fmt(r['policy_lag_mean'], '.1f')} "
            f"train_step {r['train_step']} learner busy {_fmt(busy, '.0f')}%"
        )
    if seconds_left is not None:
        parts.append(f"left {int(seconds_left) // 60}m{int(seconds_left) % 60:02d}s")
    return f"[{rows[0]['time_s']:7.1f}s] " + " | ".join(parts)
