"""--deterministic True: a run with processes is a function of its seed.

The protocol (scheduled.py) is checked on a serial runner, update by update: whole rounds, in their
labels' order, acted by the scheduled weights. Real multi-process runs then check what a user sees:
two runs of one seed end with bit-identical weights and per-update stats, whatever the timing (one
under a CPU hog, one with two policy workers), and another seed does not."""

import multiprocessing
import os

import pytest
import torch
from helpers import assert_user_error, flags, read_jsonl, run_cli, serial_runner

from asyncrl.core.checkpoint import checkpoint_dir, list_checkpoints, load_checkpoint
from asyncrl.core.schedule import scheduled_update
from asyncrl.roles.learner import Learner
from asyncrl.roles.serial_runner import take_turn

# truncated every 5 steps: final-observation rows take a slot's rows, so a round splits slots
TRUNCATING = {"step_us": 0, "episode_len": 5}


def _record_updates(learner: Learner) -> list[dict]:
    """Per update: its slots' labels (round, agent, count) in batch order, its samples, and the
    versions that acted them."""
    updates = []
    gather = learner.gather

    def recording_gather(batch):
        keys = [tuple(learner.buffers.slot_key[s].tolist()) for s in batch.slots.tolist()]
        tensors = gather(batch)
        valid = tensors["valid"]
        updates.append(
            {
                "keys": keys,
                "samples": int(valid.sum()),
                "acted": set(tensors["policy_version"][valid].tolist()),
            }
        )
        return tensors

    learner.gather = recording_gather
    return updates


def _updates_of(runner, count: int) -> list[dict]:
    learner = next(c for c in runner.components if isinstance(c, Learner))
    updates = _record_updates(learner)
    for _ in range(20_000):
        for component in runner.components:
            take_turn(component)
        if len(updates) >= count:
            return updates
    raise AssertionError(f"only {len(updates)} of {count} updates: the schedule stalled")


@pytest.mark.parametrize(
    "algo, batch_size, lag, rounds", [("appo", 32, 1, 1), ("appo", 64, 1, 2), ("ppo", 32, 0, 1)]
)
def test_each_update_learns_whole_rounds_in_order_acted_by_the_scheduled_weights(
    tmp_path, algo, batch_size, lag, rounds
):
    """2 workers x 4 envs, rollout 4: a round is 8 agents x 4 steps. Update u learns rounds u*R ..
    u*R + R - 1 of every agent, sorted by (round, agent, slot count), every step of them a sample
    once, and each round's samples were acted by the update scheduled for it (ppo: on-policy)."""
    runner = serial_runner(
        tmp_path,
        algo=algo,
        env="synthetic_constant",
        env_options=TRUNCATING,
        batch_size=batch_size,
        with_vtrace=algo == "appo",
        deterministic=True,
    )
    for u, update in enumerate(_updates_of(runner, 6)):
        learned = range(u * rounds, (u + 1) * rounds)
        assert {key[0] for key in update["keys"]} == set(learned)
        assert update["keys"] == sorted(update["keys"])
        assert {key[1] for key in update["keys"]} == set(range(8))
        assert update["samples"] == rounds * 8 * 4
        assert update["acted"] == {scheduled_update(n, lag, rounds) for n in learned}


@pytest.mark.parametrize(
    "uncovered, needle",
    [
        (dict(selfplay_snapshot_every_env_steps=1000), "--selfplay_snapshot_every_env_steps"),
        (dict(worker_inference=True), "--worker_inference True"),
    ],
)
def test_the_flag_refuses_what_its_schedule_does_not_cover(uncovered, needle):
    result = run_cli("train", *flags(env="CartPole-v1", deterministic=True, **uncovered))
    assert_user_error(result, "--deterministic True does not cover")
    assert needle in result.stderr


def _checkpoints(experiment_dir) -> list[dict]:
    """Each policy's last checkpoint."""
    states = []
    while os.path.isdir(checkpoint_dir(experiment_dir, len(states))):
        paths = list_checkpoints(checkpoint_dir(experiment_dir, len(states)))
        states.append(load_checkpoint(paths[-1]))
    return states


def _train(tmp_path, name: str, seed: int, *extra) -> str:
    result = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            experiment=name,
            train_dir=tmp_path,
            deterministic=True,
            seed=seed,
            num_workers=2,
            num_envs_per_worker=16,
            train_for_env_steps=30_000,
            device="cpu",
        ),
        *map(str, extra),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return os.path.join(tmp_path, name)


def _hog(stop) -> None:
    """A CPU hog: the run beside it gets other timings."""
    while not stop.is_set():
        sum(range(10_000))


@pytest.fixture(scope="module")
def cartpole_runs(tmp_path_factory):
    """Seed 7 three times (plain; beside a CPU hog; with two policy workers), seed 8 once."""
    root = tmp_path_factory.mktemp("deterministic")
    runs = {"first": _train(root, "first", 7)}
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=_hog, args=(stop,))
    hog.start()
    try:
        runs["hogged"] = _train(root, "hogged", 7)
    finally:
        stop.set()
        hog.join()
    runs["two_policy_workers"] = _train(
        root, "two_policy_workers", 7, "--policy_workers_per_policy", 2
    )
    runs["other_seed"] = _train(root, "other_seed", 8)
    return runs


def _assert_same_run(first: str, second: str) -> None:
    """Every policy's counters and weights bit for bit, and every update's stats."""
    states = _checkpoints(first)
    other_states = _checkpoints(second)
    assert len(states) == len(other_states)
    updates = read_jsonl(os.path.join(first, "updates.jsonl"))
    other_updates = read_jsonl(os.path.join(second, "updates.jsonl"))
    for policy, (state, other) in enumerate(zip(states, other_states)):
        for counter in ("train_step", "env_steps"):
            assert state[counter] == other[counter], (policy, counter)
        for name, tensor in state["model"].items():
            assert torch.equal(tensor, other["model"][name]), (policy, name)
        # the policies' learners report in the order they finish: the same per policy
        rows = [row for row in updates if row["policy_id"] == policy]
        assert rows == [row for row in other_updates if row["policy_id"] == policy]
        # a row for the starting weights, then one per update
        assert len(rows) == state["train_step"] + 1


@pytest.mark.slow
@pytest.mark.parametrize("second", ["hogged", "two_policy_workers"])
def test_two_runs_of_one_seed_end_with_the_same_weights_and_stats(cartpole_runs, second):
    _assert_same_run(cartpole_runs["first"], cartpole_runs[second])


@pytest.mark.slow
def test_another_seed_gives_other_weights(cartpole_runs):
    (weights,) = (state["model"] for state in _checkpoints(cartpole_runs["first"]))
    (other,) = (state["model"] for state in _checkpoints(cartpole_runs["other_seed"]))
    assert any(not torch.equal(tensor, other[name]) for name, tensor in weights.items())


@pytest.mark.slow
def test_the_run_says_what_its_schedule_is(cartpole_runs):
    with open(os.path.join(cartpole_runs["first"], "log.txt")) as f:
        log = f.read()
    assert "deterministic, seed 7: each update learns 1 round(s) of 32 agents x 32 steps" in log


def _twins(tmp_path, env: str, name: str, *extra, seeds=(7, 7)) -> list[str]:
    """Runs of one config, one per seed; returns their folders."""
    runs = []
    for i, seed in enumerate(seeds):
        experiment = f"{name}_{i}"
        result = run_cli(
            "train",
            *flags(env=env, experiment=experiment, train_dir=tmp_path, deterministic=True),
            *flags(seed=seed, num_workers=2, device="cpu"),
            *map(str, extra),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        runs.append(os.path.join(tmp_path, experiment))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, extra",
    [
        ("two_policies", ["--num_policies", 2]),
        ("ppo", ["--algo", "ppo"]),
        ("ver", ["--algo", "ver"]),
    ],
)
def test_several_policies_ppo_and_ver_repeat_too(tmp_path, name, extra):
    first, second = _twins(
        tmp_path,
        "CartPole-v1",
        name,
        "--num_envs_per_worker",
        16,
        "--train_for_env_steps",
        20_000,
        *extra,
    )
    _assert_same_run(first, second)


@pytest.mark.slow
def test_doom_repeats_and_another_seed_does_not(tmp_path):
    """VizDoom with its GRU, 2 workers x 8 envs."""
    doom = ("--num_envs_per_worker", 8, "--train_for_env_steps", 8192)
    first, second, other = _twins(tmp_path, "doom_basic", "doom", *doom, seeds=(7, 7, 8))
    _assert_same_run(first, second)
    weights = _checkpoints(first)[0]["model"]
    other_weights = _checkpoints(other)[0]["model"]
    assert any(not torch.equal(tensor, other_weights[name]) for name, tensor in weights.items())
