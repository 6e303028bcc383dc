"""Self-play: matchmaking against frozen past versions, frozen versions acting through the policy
workers with their own weights and never trained on, ratings, the grid_duel env and `asyncrl
match`."""

import json
import re

import numpy as np
import pytest
import torch
from helpers import (
    assert_user_error,
    drain,
    flags,
    keep_reports_in_the_worker,
    read_stats,
    run_cli,
    run_cli_error,
    serial_runner,
    stop_runner,
)

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import frozen_player
from asyncrl.core.messages import Matches, Snapshot
from asyncrl.population.matchmaking import draw_players
from asyncrl.roles.learner import Learner
from asyncrl.roles.rollout_worker import RolloutWorker
from asyncrl.roles.serial_runner import take_turn


def test_matchmaking_seats_one_learner_against_frozen_versions_and_prefers_close_ratings():
    cfg = Config(
        env="x",
        num_policies=2,
        selfplay_snapshot_every_env_steps=1000,
        selfplay_pool_size=3,
        selfplay_frozen_fraction=1.0,
        agents_per_env=2,
    )
    rng = np.random.default_rng(0)
    frozen_version = np.full((2, 3), -1)
    mu = np.full(2 + 6, 25.0)
    # empty pool: learners only
    assert all(max(draw_players(2, cfg, rng, frozen_version, mu)) < 2 for _ in range(50))
    frozen_version[0, :2] = [10, 20]
    frozen_version[1, 0] = 5
    available = {frozen_player(cfg, 0, 0), frozen_player(cfg, 0, 1), frozen_player(cfg, 1, 0)}
    seats = [draw_players(2, cfg, rng, frozen_version, mu) for _ in range(400)]
    assert all(sorted(s)[0] < 2 and sorted(s)[1] in available for s in seats)
    # the learner sits on either seat
    assert 0.4 < np.mean([s[0] < 2 for s in seats]) < 0.6
    # far above every learning policy: rarely chosen by rating, a third uniformly
    mu[frozen_player(cfg, 0, 0)] = 60.0
    rated = Config(**{**cfg.to_json(), "matchmaking": "rating"})
    picks = [max(draw_players(2, rated, rng, frozen_version, mu)) for _ in range(400)]
    assert picks.count(frozen_player(cfg, 0, 0)) < 10
    half = Config(**{**cfg.to_json(), "selfplay_frozen_fraction": 0.5})
    assert (
        0.35
        < np.mean([max(draw_players(2, half, rng, frozen_version, mu)) >= 2 for _ in range(400)])
        < 0.65
    )


def test_frozen_versions_act_with_their_snapshot_and_their_samples_never_reach_a_learner(
    tmp_path, monkeypatch
):
    """Serial grid_duel, a snapshot every 300 env steps, 3 versions kept, every episode against the
    pool once it has any: rows a frozen version played carry the version of a snapshot written to
    its pool entry (a replaced entry plays on with the newer snapshot); every step a learning policy
    played is exactly one sample (counted against the envs' steps), and none of the frozen
    versions'; matches are reported with frozen players and rated."""

    keep_reports_in_the_worker(monkeypatch)
    runner = serial_runner(
        tmp_path,
        env="grid_duel",
        rollout=8,
        batch_size=64,
        selfplay_snapshot_every_env_steps=300,
        selfplay_pool_size=3,
        selfplay_frozen_fraction=1.0,
        env_options={"max_steps": 12},
    )
    workers = [c for c in runner.components if isinstance(c, RolloutWorker)]
    learner = next(c for c in runner.components if isinstance(c, Learner))
    b = runner.buffers
    cfg = runner.cfg
    # (pool entry, version of the weights that acted)
    learning_steps = [0]
    frozen_rows = []
    for w in workers:
        envs = w.backend.envs
        for agents_env, env_agents in zip(
            envs, np.split(np.concatenate(w.group_agents), len(envs))
        ):

            def counting_step(
                actions, step=agents_env.env.step, env=agents_env.env, ids=env_agents
            ):
                playing = b.agent_player[ids].numpy()[: len(env.agents)]
                learning_steps[0] += int((playing < cfg.num_policies).sum()) if env.agents else 0
                return step(actions)

            agents_env.env.step = counting_step
    for _ in range(600):
        for c in runner.components:
            take_turn(c)
            # rows the frozen versions just filled, before any reuse of the slot
            if isinstance(c, RolloutWorker):
                for agent in c.group_agents[0].tolist() + c.group_agents[1].tolist():
                    player = int(b.agent_player[agent])
                    t = int(b.agent_step[agent])
                    if (
                        player >= cfg.num_policies
                        and t > 0
                        and b.traj_valid[b.agent_slot[agent], t - 1]
                    ):
                        frozen_rows.append(
                            (
                                player - frozen_player(cfg, 0, 0),
                                int(b.traj_policy_version[b.agent_slot[agent], t - 1]),
                            )
                        )
    snapshots = {
        (r.slot, r.version) for r in drain(runner.queues.reports) if isinstance(r, Snapshot)
    }
    assert len(frozen_rows) > 100 and set(frozen_rows) <= snapshots and len(set(frozen_rows)) > 3
    arrived = drain(runner.queues.full_slots[0]) + learner.source.pending_slots
    in_flight = sum(int(b.traj_valid[s].sum()) for s in arrived)
    in_flight += sum(
        int(b.traj_valid[s, :t].sum())
        for s, t, p in zip(b.agent_slot.tolist(), b.agent_step.tolist(), b.agent_player.tolist())
        if p == 0
    )
    assert learner.env_steps + in_flight == learning_steps[0]
    for w in workers:
        w.reports.send()
    matches = [m for r in drain(runner.queues.reports) if isinstance(r, Matches) for m in r.matches]
    assert len(matches) > 50 and all(
        max(players) >= cfg.num_policies for players, _ in matches[-20:]
    )
    runner._drain_reports(0.0)
    assert runner.ratings.matches == len(matches)


def test_the_frozen_pool_survives_a_resume(tmp_path):
    """A checkpoint holds the pool: the resumed run's entries have the same versions and weights,
    are announced as snapshots (rated), and the next snapshot replaces the oldest entry, as it would
    have without the restart."""
    overrides = dict(
        env="grid_duel",
        rollout=8,
        batch_size=64,
        selfplay_snapshot_every_env_steps=300,
        selfplay_pool_size=3,
        env_options={"max_steps": 12},
    )
    runner = serial_runner(tmp_path, **overrides)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    while learner.snapshots < 4:
        for c in runner.components:
            take_turn(c)
    learner.save()
    saved = (
        runner.buffers.frozen_version[0].clone(),
        runner.buffers.frozen_weights[0].clone(),
        learner.snapshots,
    )
    for r in drain(runner.queues.reports):
        if isinstance(r, Snapshot):
            runner.ratings.add_snapshot(r.policy_id, r.slot, r.version)
    pool = [frozen_player(runner.cfg, 0, k) for k in range(3)]
    runner.ratings.add_matches(
        [([0, i], [1.0, 0.0]) for i in pool] * 5 + [([pool[0], pool[1]], [1.0, 0.0])]
    )
    rated = {runner.ratings.names[i]: runner.ratings.players[i].mu for i in [0, *pool]}
    runner.ratings.save()
    stop_runner(runner)

    resumed = serial_runner(tmp_path, **overrides)
    learner = next(c for c in resumed.components if isinstance(c, Learner))
    assert (
        torch.equal(resumed.buffers.frozen_version[0], saved[0]) and learner.snapshots == saved[2]
    )
    assert torch.equal(resumed.buffers.frozen_weights[0], saved[1])
    announced = {
        (r.slot, r.version) for r in drain(resumed.queues.reports) if isinstance(r, Snapshot)
    }
    assert announced == {(k, v) for k, v in enumerate(saved[0].tolist())}
    # the resumed policy and its restored versions keep their ratings
    for k, version in announced:
        resumed.ratings.add_snapshot(0, k, version)
    assert {resumed.ratings.names[i]: resumed.ratings.players[i].mu for i in [0, *pool]} == rated
    assert resumed.ratings.matches == runner.ratings.matches
    learner._snapshot()
    assert (
        learner.snapshots % 3 == (saved[2] + 1) % 3
        and resumed.buffers.frozen_version[0, saved[2] % 3] == learner.train_step
    )


@pytest.mark.slow
def test_selfplay_run_rates_its_snapshots_and_match_plays_them(tmp_path):
    """A real grid_duel self-play run: ratings.json holds the snapshots and the stats the ratings;
    `asyncrl match` plays the run's latest checkpoint against the scripted opponent and against
    random, and refuses what cannot play (a single-agent env, a scripted opponent the env lacks, a
    bad file) with one line and exit 2."""
    r = run_cli(
        "train",
        *flags(
            env="grid_duel",
            train_dir=tmp_path,
            experiment="sp",
            seed=1,
            train_for_env_steps=24_000,
            selfplay_snapshot_every_env_steps=5_000,
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ratings = json.loads((tmp_path / "sp" / "ratings.json").read_text())
    assert len(ratings["snapshots"]) >= 3 and ratings["matches"] > 100
    rows = [json.loads(line) for line in (tmp_path / "sp" / "stats.jsonl").read_text().splitlines()]
    assert "rating_ordinal" in rows[-1] and "pool_rating_ordinal_max" in rows[-1]
    out = tmp_path / "match.json"
    r = run_cli(
        "match",
        *flags(train_dir=tmp_path, experiment="sp"),
        "--players",
        "latest",
        "scripted",
        *flags(episodes=50, out=out),
        timeout=120,
    )
    assert r.returncode == 0 and "latest vs scripted:" in r.stdout, r.stdout + r.stderr
    result = json.loads(out.read_text())
    assert (
        result["wins"] + result["draws"] + result["losses"] == 50 and len(result["ratings_mu"]) == 2
    )


@pytest.mark.parametrize(
    "given,needle",
    [
        (
            ["--env", "CartPole-v1", "--players", "random", "random"],
            "env 'CartPole-v1' has 1 agent",
        ),
        (["--env", "grid_duel", "--players", "random", "bots"], "env 'grid_duel' has 2 agent"),
        (["--env", "CartPole-v1", "--players", "random", "bots"], "reports no win"),
        (
            ["--env", "synthetic_multi", "--players", "scripted", "random"],
            "has no scripted opponent",
        ),
        (["--env", "grid_duel", "--players", "no_such_file.pth", "random"], "no_such_file.pth"),
        (["--env", "grid_duel", "--players", "random"], "expected 2 arguments"),
    ],
)
def test_bad_match_input_is_one_line_and_exit_2(tmp_path, given, needle):
    r = run_cli_error("match", *given, "--train_dir", tmp_path)
    assert_user_error(r, needle)


def test_match_plays_an_agent_against_the_envs_bots(tmp_path, clean_machine):
    r = run_cli(
        "match",
        *flags(env="doom_duel_bots", env_options='{"episode_timeout": 200}'),
        "--players",
        "random",
        "bots",
        *flags(episodes=2, train_dir=tmp_path),
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    score = re.search(
        r"random vs bots: (\d+) wins, (\d+) draws, (\d+) losses in 2 episodes", r.stdout
    )
    # each episode one outcome of the duel
    assert score and sum(map(int, score.groups())) == 2, r.stdout


@pytest.mark.slow
def test_doom_duel_trains_two_players_of_network_games(tmp_path, clean_machine):
    """doom_duel: each env is a VizDoom network game on loopback (two engines, a port of its own),
    stepped as one env. A short self-play run on 2 workers x 2 envs (8 engines): episodes end with
    each player's frags, deaths and win, the learner trains, and no engine or segment outlives the
    run."""
    r = run_cli(
        "train",
        *flags(
            env="doom_duel",
            train_dir=tmp_path,
            experiment="duel",
            num_workers=2,
            num_envs_per_worker=2,
            env_options='{"timelimit_minutes": 0.05}',
            rollout=16,
            batch_size=128,
            train_for_env_steps=4096,
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = read_stats(tmp_path / "duel")
    last = rows[-1]
    assert last["train_step"] > 0 and last["episodes"] >= 8
    assert 0.0 <= last["episode_win_mean"] <= 1.0 and {
        "episode_frags_mean",
        "episode_deaths_mean",
        "episode_damage_mean",
    } <= set(last)
