"""A learning suite's report, made from its run files alone
(results/learning/<suite>/<method>/*.json), so the same files give the same report however they were
made: per task, asyncrl's and the peer's scores (mean, median, 95% bootstrap interval, median wall
time); over the suite, the IQM of normalized scores with its stratified bootstrap interval and the
probability that an asyncrl run beats the peer's (learning_stats.py); one PNG with the curves and
the performance profile; and README's table of every suite's report.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os

import numpy as np

from benchmarks.common import REPO, RESULTS, write_between_markers, write_result
from benchmarks.learning import learning_stats as stats
from benchmarks.learning.learning_tasks import PEERS, SUITES, Suite

LEARNING = os.path.join(RESULTS, "learning")
README = os.path.join(REPO, "README.md")
# the lines between which README.md holds the learning suites' table
README_TABLE = (
    "<!-- learning suites: python -m benchmarks.learning.learning_suite readme -->",
    "<!-- end of learning suites -->",
)


def run_path(root: str, suite: str, method: str, task: str, seed: int) -> str:
    return os.path.join(root, suite, method, f"{task}_seed{seed}.json")


def read_runs(root: str, suite: str, method: str) -> list[dict]:
    runs = []
    for path in sorted(glob.glob(os.path.join(root, suite, method, "*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def scores_by_task(runs: list[dict], tasks: list[str]) -> dict[str, list[float]]:
    """Each task's scores, in the order of the runs' seeds."""
    ordered = sorted(runs, key=lambda r: r["seed"])
    return {t: [r["score"] for r in ordered if r["task"] == t] for t in tasks}


def normalizers(suite: Suite, peer: dict[str, list[float]], random: dict[str, list[float]]) -> dict:
    """Each task's (low, high): a low the suite leaves open is a random policy's mean score here, a
    high the peer's (a task without the runs to make one is left out)."""
    out = {}
    for task, (low, high) in suite.tasks.items():
        if low is None and random.get(task):
            low = float(np.mean(random[task]))
        if high is None and peer.get(task):
            high = float(np.mean(peer[task]))
        if low is not None and high is not None:
            out[task] = (low, high)
    return out


def score_matrix(
    scores: dict[str, list[float]], norm: dict[str, tuple[float, float]], tasks: list[str]
):
    """Runs x tasks of normalized scores, as many runs as the task with the fewest has."""
    runs = min(len(scores[t]) for t in tasks)
    return np.array(
        [
            [(scores[t][i] - norm[t][0]) / (norm[t][1] - norm[t][0]) for t in tasks]
            for i in range(runs)
        ]
    )


def summary(scores: list[float], runs: list[dict]) -> dict:
    low, high = stats.bootstrap_interval(scores)
    return {
        "seeds": len(scores),
        "scores": scores,
        "mean": float(np.mean(scores)),
        "median": float(np.median(scores)),
        "interval": [low, high],
        "wall_s_median": float(np.median([r["wall_s"] for r in runs])),
    }


def methods(name: str) -> list[str]:
    """The methods whose run files a suite's report reads."""
    peer = SUITES[name].peer
    return ["asyncrl", "random"] + ([peer] if peer else [])


def report(name: str, runs: dict[str, list[dict]]) -> dict:
    """The suite's summary from its run files (runs: method -> its runs)."""
    suite = SUITES[name]
    ours = runs["asyncrl"]
    peer_runs = runs.get(suite.peer, [])
    tasks = [t for t in suite.tasks if any(r["task"] == t for r in ours)]
    mine = scores_by_task(ours, tasks)
    peer = scores_by_task(peer_runs, tasks)
    norm = normalizers(suite, peer, scores_by_task(runs["random"], tasks))
    out = {
        "suite": name,
        "normalized_by": suite.normalized_by,
        "env_steps": suite.env_steps,
        "tasks": {},
    }
    if suite.peer:
        out["peer"] = dataclasses.asdict(PEERS[suite.peer])
    for task in tasks:
        row = {"asyncrl": summary(mine[task], [r for r in ours if r["task"] == task])}
        if peer[task]:
            row["peer"] = summary(peer[task], [r for r in peer_runs if r["task"] == task])
            row["wall_ratio"] = row["asyncrl"]["wall_s_median"] / row["peer"]["wall_s_median"]
        row["normalizer"] = norm.get(task)
        out["tasks"][task] = row
    normalized = [t for t in tasks if t in norm]
    if normalized:
        matrix = score_matrix(mine, norm, normalized)
        point, low, high = stats.iqm_interval(matrix)
        out["iqm"] = {
            "value": point,
            "interval": [low, high],
            "tasks": normalized,
            "runs_per_task": len(matrix),
        }
    compared = [t for t in normalized if peer[t]]
    if compared:
        value, low, high = stats.probability_of_improvement(
            score_matrix(mine, norm, compared), score_matrix(peer, norm, compared)
        )
        out["probability_of_improvement"] = {
            "value": value,
            "interval": [low, high],
            "tasks": compared,
        }
    return out


def num(x: float) -> str:
    """A score as the tables show it: whole numbers from 100 up, one decimal below."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def markdown(out: dict, png: str) -> str:
    peer = out.get("peer", {"name": "the peer", "scored_by": "-", "curve": "-"})
    lines = [
        f"# Learning suite `{out['suite']}`: {out['env_steps']:,} env steps per run, the defaults",
        "",
        f"![curves and performance profile]({png})",
        "",
        "Scores: asyncrl's are the mean return of evaluation episodes of a run's final policy (sampled actions); "
        f"{peer['name']}: {peer['scored_by']}. Intervals are 95% bootstrap intervals of the mean over seeds. "
        f"Curves: asyncrl's logged mean return of training episodes; {peer['name']}: {peer['curve']}.",
        "",
        f"| task | seeds | asyncrl mean [95% interval] | median | {peer['name']} here | normalized from, to "
        f"| asyncrl wall time (median) | {peer['name']} wall time | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task, row in out["tasks"].items():
        a = row["asyncrl"]
        p = row.get("peer")
        here = f"{num(p['mean'])} ({p['seeds']} seed{'s' if p['seeds'] > 1 else ''})" if p else "-"
        norm = (
            f"{num(row['normalizer'][0])}, {num(row['normalizer'][1])}"
            if row["normalizer"]
            else "-"
        )
        p_wall = f"{p['wall_s_median']:,.0f} s" if p else "-"
        ratio = f"{row['wall_ratio']:.2f}" if p else "-"
        lines.append(
            f"| {task} | {a['seeds']} | {num(a['mean'])} [{num(a['interval'][0])}, {num(a['interval'][1])}] "
            f"| {num(a['median'])} | {here} | {norm} | {a['wall_s_median']:,.0f} s | {p_wall} | {ratio} |"
        )
    lines.append("")
    if "iqm" in out:
        iqm = out["iqm"]
        lines.append(
            f"**IQM of normalized scores: {iqm['value']:.2f} [{iqm['interval'][0]:.2f}, {iqm['interval'][1]:.2f}]** "
            f"(95% stratified bootstrap interval, rliable; {iqm['runs_per_task']} runs on each of "
            f"{len(iqm['tasks'])} tasks), normalized by {out['normalized_by']}."
        )
    if "probability_of_improvement" in out:
        poi = out["probability_of_improvement"]
        lines.append(
            f"\nProbability that an asyncrl run beats a run of {peer['name']} on the same task: {poi['value']:.2f} "
            f"[{poi['interval'][0]:.2f}, {poi['interval'][1]:.2f}] over {len(poi['tasks'])} tasks."
        )
    return "\n".join(lines) + "\n"


def plot(out: dict, runs: dict[str, list[dict]], path: str) -> None:
    """One PNG: each task's curves (asyncrl's seeds, the peer's runs), and the performance
    profile."""
    # the `plot` extra: imported by the report alone
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(out["tasks"])
    peer = out.get("peer", {"method": None, "name": "the peer"})
    fig, axes = plt.subplots(
        1, len(tasks) + 1, figsize=(3.6 * (len(tasks) + 1), 3.2), squeeze=False
    )
    for ax, task in zip(axes[0], tasks):
        for method, color in (("asyncrl", "tab:blue"), (peer["method"], "tab:orange")):
            for run in (r for r in runs.get(method, []) if r["task"] == task):
                steps, returns = zip(*run["curve"]) if run["curve"] else ((), ())
                ax.plot(steps, returns, color=color, alpha=0.6, lw=1)
        if out["tasks"][task]["normalizer"]:
            ax.axhline(out["tasks"][task]["normalizer"][1], color="gray", ls="--", lw=1)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("env steps")
    axes[0][0].set_ylabel("episode return")
    title = f"blue: asyncrl, a line per seed; orange: {peer['name']} run here; dashed: the score normalized to 1"
    fig.suptitle(title, fontsize=9)
    profile = axes[0][-1]
    if "iqm" in out:
        mine = scores_by_task(runs["asyncrl"], out["iqm"]["tasks"])
        norm = {t: tuple(out["tasks"][t]["normalizer"]) for t in out["iqm"]["tasks"]}
        matrix = score_matrix(mine, norm, out["iqm"]["tasks"])
        taus = np.linspace(0, max(2.0, float(matrix.max())), 101)
        profile.plot(taus, stats.performance_profile(matrix, taus), color="tab:blue")
    profile.set_title("performance profile", fontsize=9)
    profile.set_xlabel("normalized score τ")
    profile.set_ylabel("fraction of runs above τ")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_report(name: str, root: str) -> dict:
    # read once, for report and plot
    runs = {method: read_runs(root, name, method) for method in methods(name)}
    out = report(name, runs)
    plot(out, runs, os.path.join(root, f"{name}.png"))
    write_result(name, out, markdown(out, f"{name}.png"), folder=root)
    return out


def readme_table(root: str = LEARNING, links: bool = True) -> str:
    """README's table of the learning suites, a row per suite report in `root`: its IQM and
    interval, its runs, and the median wall time of a run beside the peer's run here; each links its
    report unless `links` is False (the docs site, which holds no result file)."""
    lines = [
        "| suite | runs | IQM of normalized scores [95% interval] | normalized by | wall time of a run (median per "
        "task) | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in SUITES:
        path = os.path.join(root, f"{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            out = json.load(f)
        if "iqm" not in out:
            continue
        iqm = out["iqm"]
        rows = out["tasks"].values()
        ours = [row["asyncrl"]["wall_s_median"] for row in rows]
        wall = f"{min(ours):,.0f}-{max(ours):,.0f} s"
        ratios = [row["wall_ratio"] for row in rows if "wall_ratio" in row]
        if ratios:
            wall += f"; {min(ratios):.2f}-{max(ratios):.2f}x {out['peer']['name']} here ({len(ratios)} of the tasks)"
        link = (
            f"[learning/{name}](benchmarks/results/learning/{name}.md)"
            if links
            else f"learning/{name}"
        )
        lines.append(
            f"| `{name}`: {len(out['tasks'])} tasks, {out['env_steps']:,} env steps | {iqm['runs_per_task']} seeds "
            f"| {iqm['value']:.2f} [{iqm['interval'][0]:.2f}, {iqm['interval'][1]:.2f}] | {out['normalized_by']} "
            f"| {wall} | {link} |"
        )
    return "\n".join(lines)


def write_readme_table() -> None:
    write_between_markers(README, README_TABLE, readme_table())
