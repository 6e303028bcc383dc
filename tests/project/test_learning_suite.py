"""benchmarks/learning/learning_suite.py and its statistics (learning_stats.py): the statistics
against slow loops written from their definitions and against rliable's own functions, and the smoke
suite end to end (two CartPole runs, stopped by Ctrl-C part-way and resumed, then the report)."""

import json
import signal
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO
from rliable import metrics

from asyncrl.core.leftovers import engine_processes
from benchmarks.learning import learning_stats as stats

# the suite as its users run it, from the repository's root
SUITE = ["-m", "benchmarks.learning.learning_suite"]


def test_bootstrap_interval_is_the_percentiles_of_resampled_means():
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0]
    rng = np.random.default_rng(7)
    # one resample at a time
    means = [np.mean(rng.choice(values, size=len(values))) for _ in range(2000)]
    assert stats.bootstrap_interval(values, reps=2000, seed=7) == pytest.approx(
        (np.percentile(means, 2.5), np.percentile(means, 97.5))
    )


def test_iqm_is_the_mean_of_the_middle_half_of_every_score():
    # 16 scores: the middle 8 are 4..11 to the 1.5
    scores = np.arange(16.0).reshape(4, 4)[:, ::-1] ** 1.5
    assert stats.iqm(scores) == pytest.approx(np.mean(np.arange(4.0, 12.0) ** 1.5))
    # where a quarter of the scores is no whole number: as rliable cuts
    for runs, tasks in [(5, 3), (3, 1), (7, 2)]:
        scores = np.random.default_rng(runs).normal(size=(runs, tasks))
        assert stats.iqm(scores) == pytest.approx(metrics.aggregate_iqm(scores))


def test_iqm_interval_is_a_bootstrap_of_runs_within_each_task():
    rng = np.random.default_rng(0)
    # 5 runs x 3 tasks
    scores = rng.normal([1.0, 2.0, 0.5], 0.3, size=(5, 3))
    point, low, high = stats.iqm_interval(scores, reps=4000)
    assert point == stats.iqm(scores) and low < point < high
    # the slow stratified bootstrap: each task's runs resampled on their own
    slow = []
    for _ in range(4000):
        picks = rng.integers(0, 5, size=(5, 3))
        slow.append(stats.iqm(np.take_along_axis(scores, picks, axis=0)))
    assert low == pytest.approx(np.percentile(slow, 2.5), abs=0.03)
    assert high == pytest.approx(np.percentile(slow, 97.5), abs=0.03)
    # seeded: the same files, the same report
    assert stats.iqm_interval(scores, reps=4000) == (point, low, high)


def test_probability_of_improvement_counts_the_pairs_that_one_wins():
    # 3 runs x 2 tasks
    x = np.array([[1.0, 5.0], [3.0, 6.0], [2.0, 7.0]])
    # 2 runs
    y = np.array([[2.0, 7.0], [2.0, 4.0]])
    slow = np.mean(
        [
            np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in x[:, t] for b in y[:, t]])
            for t in range(x.shape[1])
        ]
    )
    point, low, high = stats.probability_of_improvement(x, y, reps=500)
    assert point == pytest.approx(slow) and low <= point <= high


def test_performance_profile_matches_rliables():
    from rliable import library as rly

    scores = np.random.default_rng(1).uniform(0, 2, size=(6, 4))
    taus = np.linspace(0, 2, 21)
    theirs, _ = rly.create_performance_profile({"x": scores}, taus, reps=10)
    assert stats.performance_profile(scores, taus) == pytest.approx(theirs["x"])


def _suite(root, *args, **popen):
    return subprocess.Popen(
        [sys.executable, *SUITE, *args, "--suite", "smoke", "--root", str(root)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


@pytest.mark.slow
def test_a_suite_stopped_by_ctrl_c_runs_only_what_is_missing_and_reports_the_same(
    tmp_path, clean_machine
):
    runs = tmp_path / "smoke" / "asyncrl"
    first = runs / "CartPole-v1_seed1.json"
    proc = _suite(tmp_path, "run")
    while not first.exists() and proc.poll() is None:
        try:
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
    # during seed 2 (or, on a stalled machine, after it)
    proc.send_signal(signal.SIGINT)
    printed = proc.communicate(timeout=120)[0]
    assert proc.returncode in (130, 0), printed
    assert not list(runs.glob("*.tmp")) and not engine_processes()
    made = sorted(p.name for p in runs.glob("*.json"))
    first_bytes = first.read_bytes()

    resumed = _suite(tmp_path, "run")
    printed = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, printed
    assert f"{2 - len(made)} runs to make, {len(made)} kept from before" in printed
    assert first.read_bytes() == first_bytes
    run = json.loads(first.read_text())
    assert run["env_steps"] >= 10_000 and len(run["eval_returns"]) == 3 and run["score"] > 0
    assert (
        run["train_command"]
        == "asyncrl train --env CartPole-v1 --seed 1 --train_for_env_steps 10000"
    )
    assert {"command", "commit", "date", "cpu", "cores", "torch", "device"} <= set(
        run["provenance"]
    )

    # the smoke suite's normalizing low: a random policy's score
    random = _suite(tmp_path, "random")
    assert random.communicate(timeout=120)[0] and random.returncode == 0
    made_in_run = json.loads((tmp_path / "smoke.json").read_text())
    report = _suite(tmp_path, "report")
    assert report.communicate(timeout=120)[0] and report.returncode == 0
    again = json.loads((tmp_path / "smoke.json").read_text())
    made_in_run.pop("provenance"), again.pop("provenance")
    assert again == made_in_run
    scores = [json.loads(p.read_text())["score"] for p in sorted(runs.glob("*.json"))]
    assert again["tasks"]["CartPole-v1"]["asyncrl"]["scores"] == scores
    assert again["iqm"]["runs_per_task"] == 2 and again["iqm"]["tasks"] == ["CartPole-v1"]
    randoms = [
        json.loads(p.read_text())["score"]
        for p in sorted((tmp_path / "smoke" / "random").glob("*.json"))
    ]
    # a random CartPole policy lasts ~22 steps
    assert len(randoms) == 2 and 5 < np.mean(randoms) < 50
    assert again["tasks"]["CartPole-v1"]["normalizer"] == pytest.approx([np.mean(randoms), 500.0])
    assert (tmp_path / "smoke.png").stat().st_size > 0 and (tmp_path / "smoke.md").exists()
