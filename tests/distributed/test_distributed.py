"""Several ranks training one policy over torch.distributed (gloo on the CPU), launched as torchrun
launches them."""

import os
import re
import signal
import socket
import time

import pytest
import torch
from helpers import flags, read_stats, run_cli_error, start_cli, start_python, wait_for_training

from asyncrl.algo import losses
from asyncrl.core.checkpoint import checkpoint_dir, list_checkpoints, load_checkpoint

CARTPOLE = [
    "train",
    *flags(
        env="CartPole-v1",
        train_dir="runs",
        experiment="dd",
        num_workers=1,
        experiment_summaries_interval=1,
        seed=0,
    ),
]
DIGEST = re.compile(
    r"\(rank (\d) of 2\): train step (\d+), env steps ([\d,]+) \(all ranks\), weights (\w+)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, port: int) -> dict:
    """The variables torchrun gives rank `rank` of 2 on this machine."""
    return {
        **os.environ,
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def start_ranks(tmp_path, *flags, port=None):
    """Rank 0 and rank 1 of a run, each in a folder of its own (so we see what each writes)."""
    port = port or free_port()
    procs = []
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir(exist_ok=True)
        procs.append(
            start_cli(*CARTPOLE, *flags, cwd=tmp_path / f"rank{rank}", env=rank_env(rank, port))
        )
    return procs


def digests(outputs: list[str]) -> list[tuple]:
    found = [m.groups() for out in outputs for m in DIGEST.finditer(out)]
    return sorted(found)


@pytest.mark.slow
def test_a_killed_rank_stops_the_other_with_one_line_and_the_run_resumes(tmp_path, clean_machine):
    """... with a KL-adaptive learning rate: both ranks resume from rank 0's saved rate, and adapt it alike (any
    epoch's KL is above a threshold of 1e-9, so the rate falls after every epoch, to --lr_adaptive_min)."""
    adaptive = ("--lr_schedule", "kl_adaptive_epoch", "--lr_schedule_kl_threshold", 1e-9)
    procs = start_ranks(tmp_path, "--save_every_sec", 1, *adaptive)
    exp = tmp_path / "rank0" / "runs" / "dd"
    deadline = time.time() + 120
    while not (exp / "checkpoint_p0").is_dir() or not list_checkpoints(checkpoint_dir(str(exp), 0)):
        assert time.time() < deadline and procs[0].poll() is None, "rank 0 did not start training"
        time.sleep(0.5)
    os.killpg(procs[1].pid, signal.SIGKILL)
    killed = time.time()
    out = procs[0].communicate(timeout=90)[0]
    assert time.time() - killed < 60
    assert procs[0].returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("asyncrl: error:")]
    assert len(errors) == 1 and "another rank is gone" in errors[0] and "resume" in errors[0], out
    checkpoint = load_checkpoint(list_checkpoints(checkpoint_dir(str(exp), 0))[-1])
    saved = checkpoint["env_steps"]
    assert checkpoint["lr_schedule"][0] != checkpoint["lr_schedule"][1], (
        "the rate did not move: nothing to resume"
    )

    # both ranks resume
    procs = start_ranks(tmp_path, "--train_for_env_steps", saved + 8192, *adaptive)
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert read_stats(exp)[-1]["env_steps"] >= saved + 8192
    assert len({d[1:] for d in digests(outputs)}) == 1


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_after_the_same_update_with_a_checkpoint(tmp_path, clean_machine):
    """Ctrl-C reaches every rank's runner (a terminal's process group): the ranks agree to stop
    after one update, rank 0 saves that update's checkpoint, and both print the same weights."""
    procs = start_ranks(tmp_path)
    exp = tmp_path / "rank0" / "runs" / "dd"
    wait_for_training(exp, procs[0], min_train_step=3)
    for p in procs:
        p.send_signal(signal.SIGINT)
    outputs = [p.communicate(timeout=90)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    (_, step0, _, weights0), (_, step1, _, weights1) = digests(outputs)
    assert (step0, weights0) == (step1, weights1)
    assert load_checkpoint(list_checkpoints(checkpoint_dir(str(exp), 0))[-1])["train_step"] == int(
        step0
    )


@pytest.mark.slow
@pytest.mark.parametrize("algo, rule", [("appo", "ddppo"), ("ver", "optimal")])
def test_a_straggling_rank_is_preempted_and_the_ranks_stay_bit_identical(
    tmp_path, algo, rule, clean_machine
):
    """Rank 0's envs cost 20x rank 1's: with DD-PPO's rule (--preemption_threshold 0.5) rank 1's
    finished batches preempt rank 0; with VER's estimate the best collection time is about rank 1's.
    Rank 0 learns from part of its batch (preempted_steps in rank 0's stats), and the ranks end with
    the same train step, env steps and weights, bit for bit; only rank 0 writes files. Rank 0's
    stats count both ranks' episodes (each env reports its worker's global index: rank 1's worker is
    1). Each rule runs once, under a batch source of its own: the rule and the batch source are
    separate seams. (The ranks' weights without preemption: the Ctrl-C and killed-rank tests.)"""
    procs = start_ranks(
        tmp_path,
        *flags(
            algo=algo,
            preemption_rule=rule,
            env="synthetic_constant",
            env_options='{"step_us": 100, "worker_cost": [20, 1]}',
            preemption_threshold=0.5,
            rollout=16,
            batch_size=512,
            num_batches_per_epoch=2,
            train_for_env_steps=6_000,
        ),
    )
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    exp = tmp_path / "rank0" / "runs" / "dd"
    rows = read_stats(exp)
    assert max(row.get("preempted_steps", 0) for row in rows) > 0, rows[-1]
    worker_means = [
        row["episode_worker_mean"] for row in rows if row.get("episode_worker_mean") is not None
    ]
    # rows of rank 0's episodes alone would be 0.0; the rows written while the ranks train hold rank
    # 1's episodes only if a summary interval passed after they were sent, but the last row holds
    # every rank's episodes
    assert max(worker_means) > 0.0, worker_means
    assert worker_means[-1] > 0.0, worker_means
    found = digests(outputs)
    assert [d[0] for d in found] == ["0", "1"] and int(found[0][1]) > 5, found
    assert found[0][1:] == found[1][1:], "the ranks' weights differ"
    assert rows[-1]["env_steps"] >= 6_000 and rows[-1]["env_steps"] == int(
        found[0][2].replace(",", "")
    )
    assert os.listdir(tmp_path / "rank1") == [], "rank 1 wrote files"
    assert list_checkpoints(checkpoint_dir(str(exp), 0))


def test_two_torchrun_launches_on_loopback_train_together(tmp_path, clean_machine):
    """Two `torchrun --nnodes 2` launches, one process each, meet at a c10d rendezvous and train one
    policy."""
    port = free_port()
    procs = []
    for node in (0, 1):
        (tmp_path / f"node{node}").mkdir()
        procs.append(
            start_python(
                "-m",
                "torch.distributed.run",
                *flags(
                    nnodes=2,
                    nproc_per_node=1,
                    rdzv_backend="c10d",
                    rdzv_endpoint=f"127.0.0.1:{port}",
                ),
                "--rdzv_id",
                "t",
                "-m",
                "asyncrl",
                *CARTPOLE,
                *flags(train_for_env_steps=8_000),
                cwd=tmp_path / f"node{node}",
            )
        )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    found = digests(outputs)
    assert [d[0] for d in found] == ["0", "1"] and found[0][1:] == found[1][1:]
    written = [
        n for n in (0, 1) if (tmp_path / f"node{n}" / "runs" / "dd" / "stats.jsonl").exists()
    ]
    assert len(written) == 1
    assert read_stats(tmp_path / f"node{written[0]}" / "runs" / "dd")[-1]["env_steps"] >= 8_000


@pytest.mark.parametrize(
    "flags, needle",
    [
        (
            ["--batch_size", 99, "--rollout", 33, "--num_batches_per_epoch", 3],
            "must be divisible by the number of ranks (2)",
        ),
        (
            ["--num_policies", 2],
            "--num_policies > 1 (train one policy per launch) cannot run under torchrun",
        ),
        (["--device", "cuda"], "torch sees no CUDA GPU"),
        (
            ["--algo", "ppo", "--batch_size", 1024],
            "--batch_size must be 4096 (workers x envs per worker x agents per env x rollout x ranks)",
        ),
        (["--compile_learner", "True"], "--compile_learner True is not built for torchrun's ranks"),
    ],
)
def test_distributed_bad_input_is_one_line_and_exit_2(tmp_path, flags, needle):
    if "cuda" in flags and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    # torchrun's variables
    ranks = {k: v for k, v in rank_env(0, free_port()).items() if os.environ.get(k) != v}
    r = run_cli_error(*CARTPOLE, *flags, cwd=tmp_path, env=ranks)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_ranks_on_one_machine_split_its_cores():
    from asyncrl.distributed.rank import Rank

    assert [Rank(r, 4, r, 2).my_cores([0, 1, 2, 3]) for r in (0, 1)] == [[0, 1], [2, 3]]
    assert [Rank(r, 2, r, 2).my_cores([0, 1, 2]) for r in (0, 1)] == [[0], [1]]
    assert [Rank(r, 3, r, 3).my_cores([0, 1]) for r in (0, 1, 2)] == [[0], [1], [0]]
    assert Rank().my_cores([0, 1]) == [0, 1]


def test_advantages_are_normalized_over_every_ranks_minibatch():
    """normalize with a sum over ranks (two halves standing in for two ranks) equals normalize over
    the whole."""
    torch.manual_seed(0)
    advantages = torch.randn(8, 6) * 3 + 1
    mask = torch.rand(8, 6) > 0.3
    halves = [(advantages[:, :3], mask[:, :3]), (advantages[:, 3:], mask[:, 3:])]
    a, m, zero = *halves[1], torch.zeros(())
    # rank 0's sums, in the order normalize all-reduces them
    seen = []

    # what rank 0 holds after each all-reduce: its sums plus rank 1's
    def sum_over_two_ranks(sums):
        seen.append(sums.clone())
        # the masked sum and count
        if len(seen) == 1:
            return sums + torch.stack([torch.where(m, a, zero).sum(), m.sum().float()])
        mean = (seen[0][0] + torch.where(m, a, zero).sum()) / (seen[0][1] + m.sum())
        # then the squared deviations from the mean
        return sums + torch.where(m, (a - mean) ** 2, zero).sum()

    together = losses.normalize(halves[0][0], halves[0][1], sum_over_two_ranks)
    whole = losses.normalize(advantages, mask)
    torch.testing.assert_close(
        together[halves[0][1]], whole[:, :3][halves[0][1]], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "rates, learn_s",
    [
        ([3.0, 1.0], 0.05),
        ([3.0, 1.0], 5.0),
        ([20.0, 1.0, 1.1], 0.01),
        ([1.0], 0.1),
        ([5.0, 4.0, 0.2, 0.1], 0.3),
    ],
)
def test_best_collection_time_maximises_steps_per_second(rates, learn_s):
    """VER's estimate against a search over a fine grid of collection times (S(t) / (t + learn
    time), each rank collecting at its rate until its batch is full)."""
    from asyncrl.distributed.preemption import best_collection_time

    def steps_per_second(t):
        return sum(min(rate * t, 1.0) for rate in rates) / (t + learn_s)

    grid = [i / 10_000 * 2 / min(rates) for i in range(1, 10_001)]
    best = best_collection_time(rates, learn_s)
    assert steps_per_second(best) >= max(map(steps_per_second, grid)) - 1e-9
    assert best in [1 / rate for rate in rates]


def test_rank_0s_last_exchange_takes_every_ranks_last_episodes(monkeypatch):
    """The relay's finish: rank 1 sends its last episodes and says it is done; rank 0's finish
    returns them, sent after its last exchange or not. A rank that never says so holds rank 0 up for
    TIMEOUT_S at most, and what it sent before still counts. (A real TCPStore on loopback, as
    torchrun's.)"""
    import torch.distributed as dist

    from asyncrl.distributed.preemption import EpisodeRelay
    from asyncrl.distributed.rank import Rank

    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    rank0, rank1, rank2 = (EpisodeRelay(Rank(rank=r, world_size=3)) for r in range(3))
    rank1.add([[0, 1.0, 5, {}]])
    assert rank1.exchange() == [] and rank0.exchange() == [[0, 1.0, 5, {}]]
    rank1.add([[0, 2.0, 6, {}]])
    rank2.add([[0, 3.0, 7, {}]])
    # sent, but rank 2 never finishes
    rank2.exchange()
    assert rank1.finish() == []
    monkeypatch.setattr(EpisodeRelay, "TIMEOUT_S", 0.5)
    assert sorted(rank0.finish()) == [[0, 2.0, 6, {}], [0, 3.0, 7, {}]]
    del master
