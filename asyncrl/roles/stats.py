"""Run statistics: per-policy episode windows and learner numbers, written every summary interval to
TensorBoard (tensorboardX), `stats.jsonl` and the terminal (progress.py)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import deque

import numpy as np

from asyncrl.core.messages import (
    EnvErrors,
    Episodes,
    Evaluation,
    LearnerStats,
    Report,
    TimingReport,
)
from asyncrl.population.policy_stats import PolicyStats
from asyncrl.roles.progress import ProgressDisplay


class StatsWriter:
    """Turns PolicyStats into a progress line, TensorBoard scalars (and with --with_wandb the same
    in wandb) and stats.jsonl rows."""

    def __init__(
        self,
        experiment_dir: str,
        num_policies: int,
        window: int,
        write: bool = True,
        wandb=None,
        record_updates: bool = False,
    ):
        """write False (the ranks after rank 0 of a distributed run): keep the numbers, write and
        show nothing. wandb: a wandb_run.WandbRun that gets every TensorBoard scalar too (finished
        by close). record_updates (--deterministic): every learner report also goes to
        updates.jsonl, a row per update, no wall-clock field in it."""
        from tensorboardX import SummaryWriter

        self.policies = [PolicyStats(p, window) for p in range(num_policies)]
        self.experiment_dir = experiment_dir
        self.write = write
        self.wandb = wandb
        self.tb = [
            SummaryWriter(os.path.join(experiment_dir, "tb", f"policy_{p}")) if write else None
            for p in range(num_policies)
        ]
        self.jsonl = open(os.path.join(experiment_dir, "stats.jsonl") if write else os.devnull, "a")
        self.updates_jsonl = (
            open(os.path.join(experiment_dir, "updates.jsonl"), "a")
            if record_updates and write
            else None
        )
        self.eval_jsonl_path = os.path.join(experiment_dir, "eval.jsonl")
        # opened at the first evaluation
        self.eval_jsonl = None
        # exceptions raised by envs (caught, the env restarted)
        self.env_errors = 0
        self.worker_restarts = 0
        # role -> (phase fractions, counts) of its last report
        self.timing: dict[str, tuple[dict, dict]] = {}
        self.start_time = time.monotonic()
        # policy id -> more stats for its rows (the runner's ratings), if set
        self.policy_extras = None
        name = os.path.basename(os.path.normpath(experiment_dir))
        self.progress = ProgressDisplay(sys.stdout.isatty() and write, name)
        self.handlers = {
            Episodes: self.add_episodes,
            EnvErrors: self._add_env_errors,
            LearnerStats: self._add_learner,
            TimingReport: self._add_timing,
            Evaluation: self.write_evaluation,
        }

    def handle(self, report: Report) -> None:
        """A report from a child: the stats keep what they show (other kinds are the runner's to
        handle)."""
        handler = self.handlers.get(type(report))
        if handler is not None:
            handler(report)

    def add_episodes(self, report: Episodes) -> None:
        for policy_id, episode_return, length, env_stats in report.episodes:
            self.policies[policy_id].add_episode(episode_return, length, env_stats)

    def _add_env_errors(self, report: EnvErrors) -> None:
        self.env_errors += report.count

    def _add_learner(self, report: LearnerStats) -> None:
        self.policies[report.policy_id].add_learner_report(report.stats, time.monotonic())
        if self.updates_jsonl is not None:
            self.updates_jsonl.write(
                json.dumps({"policy_id": report.policy_id, **report.stats}) + "\n"
            )

    def _add_timing(self, report: TimingReport) -> None:
        self.timing[report.role] = (report.fractions, report.counts)

    def write_evaluation(self, evaluation: Evaluation) -> None:
        """An evaluator's result: a row of eval.jsonl and eval/ curves in the policy's
        TensorBoard."""
        policy_id, result = evaluation
        row = {"time_s": round(self.elapsed(), 3), "policy_id": policy_id, **result}
        self.eval_jsonl = self.eval_jsonl or open(self.eval_jsonl_path, "a")
        self.eval_jsonl.write(json.dumps(row) + "\n")
        self.eval_jsonl.flush()
        scalars = {
            f"eval/{key}": value
            for key, value in result.items()
            if key not in ("env_steps", "new_best") and isinstance(value, (int, float))
        }
        self._scalars(policy_id, result["env_steps"], scalars)
        best = " (new best: best_checkpoint.pth)" if result["new_best"] else ""
        self.progress.message(
            f"evaluation p{policy_id} at {result['env_steps']:,} env steps: mean return "
            f"{result['return_mean']:.2f} over {result['episodes']} episodes{best}"
        )

    def timing_summary(self, policy_id: int) -> dict:
        """Fractions of wall time per phase for this policy's learner and policy workers and for the
        rollout workers (averaged over processes), e.g. timing_learner_train; plus the mean
        inference batch size."""
        groups = {
            "learner": lambda r: r == f"learner_{policy_id}",
            "policy": lambda r: r == f"policy_{policy_id}" or r.startswith(f"policy_{policy_id}_"),
            "rollout": lambda r: r.startswith("rollout_"),
        }
        summary = {}
        for group, belongs in groups.items():
            reports = [report for role, report in self.timing.items() if belongs(role)]
            for phase in sorted(set().union(*(fractions for fractions, _ in reports))):
                phase_fractions = [fractions.get(phase, 0.0) for fractions, _ in reports]
                summary[f"timing_{group}_{phase}"] = float(np.mean(phase_fractions))
            if group == "policy" and reports:
                batches = sum(counts.get("batches", 0) for _, counts in reports)
                agents = sum(counts.get("batch_agents", 0) for _, counts in reports)
                summary["inference_batch_mean"] = agents / batches if batches else None
        return summary

    def elapsed(self) -> float:
        return time.monotonic() - self.start_time

    def summarize(
        self, seconds_left: float | None = None, fraction_done: float | None = None
    ) -> list[dict]:
        """A stats.jsonl row and TensorBoard points per policy (fps over the learner's last ~10 s of
        reports); the terminal's progress display shows them (fraction_done: of the run's nearer
        limit, steps or seconds)."""
        now = time.monotonic()
        rows = []
        for p in self.policies:
            if p.launch_env_steps is None:
                # its learner has not started yet: a resumed run's counters are not known
                continue
            row = {
                "time_s": round(now - self.start_time, 3),
                "policy_id": p.policy_id,
                "env_steps": p.env_steps,
                "fps": p.fps(now),
                "episode_reward_mean": p.reward_mean(),
                "episode_len_mean": float(np.mean(p.episode_lengths))
                if p.episode_lengths
                else None,
                "episodes": p.episodes_total,
                "policy_lag_mean": p.learner.get("policy_lag_mean"),
                "train_step": p.learner.get("train_step", 0),
                "env_errors": self.env_errors,
                "worker_restarts": self.worker_restarts,
            }
            row.update({f"episode_{k}_mean": float(np.mean(v)) for k, v in p.env_stats.items()})
            row.update({k: v for k, v in p.learner.items() if k not in row})
            row.update(self.timing_summary(p.policy_id))
            if self.policy_extras is not None:
                row.update(self.policy_extras(p.policy_id))
            rows.append(row)
            self.jsonl.write(json.dumps(row) + "\n")
            self._scalars(p.policy_id, p.env_steps, scalars_of(row))
        self.jsonl.flush()
        if rows and self.write:
            self.progress.show(rows, seconds_left, fraction_done)
        return rows

    def end_line(self) -> str:
        """The line a run ends on: where it is, each policy's env steps and mean return, its time."""
        parts = []
        for p in self.policies:
            reward = p.reward_mean()
            shown = "no episode yet" if reward is None else f"mean return {reward:.2f}"
            parts.append(f"p{p.policy_id} {p.env_steps:,} env steps, {shown}")
        return f"run in {self.experiment_dir}: {'; '.join(parts)}; {self.elapsed():.1f} s"

    def _scalars(self, policy_id: int, env_steps: int, scalars: dict) -> None:
        """TensorBoard points (and wandb's) of one policy at its env steps."""
        if self.tb[policy_id] is not None:
            for tag, value in scalars.items():
                self.tb[policy_id].add_scalar(tag, value, env_steps)
        if self.wandb is not None:
            self.wandb.log(policy_id, env_steps, scalars)

    def save_state(self, path: str) -> None:
        """The recent-episode windows and run counters, so a resumed run's averages continue (atomic
        write)."""
        state = {
            "env_errors": self.env_errors,
            "worker_restarts": self.worker_restarts,
            "policies": [
                {
                    "returns": list(p.episode_returns),
                    "lengths": list(p.episode_lengths),
                    "episodes_total": p.episodes_total,
                    "env_stats": {k: list(v) for k, v in p.env_stats.items()},
                }
                for p in self.policies
            ],
        }
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)

    def load_state(self, path: str) -> None:
        if not os.path.exists(path):
            return
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, json.JSONDecodeError):
            # statistics only: a damaged file costs the averages' history, nothing else
            return
        self.env_errors = state["env_errors"]
        self.worker_restarts = state["worker_restarts"]
        for p, saved in zip(self.policies, state["policies"]):
            p.episode_returns.extend(saved["returns"])
            p.episode_lengths.extend(saved["lengths"])
            p.episodes_total = saved["episodes_total"]
            for key, values in saved["env_stats"].items():
                p.env_stats.setdefault(key, deque(maxlen=p.episode_returns.maxlen)).extend(values)

    def close(self) -> None:
        self.progress.close()
        if self.wandb is not None:
            self.wandb.finish()
        for tb in self.tb:
            if tb is not None:
                tb.close()
        self.jsonl.close()
        if self.updates_jsonl is not None:
            self.updates_jsonl.close()
        if self.eval_jsonl is not None:
            self.eval_jsonl.close()


def scalars_of(row: dict) -> dict:
    """A stats row's numbers as TensorBoard tags (the timing_* fractions under timing/)."""
    return {
        "timing/" + key[len("timing_") :] if key.startswith("timing_") else key: value
        for key, value in row.items()
        if isinstance(value, (int, float)) and key not in ("policy_id", "env_steps")
    }
