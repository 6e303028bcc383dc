"""Launching a run: everything that can be checked is checked before a process starts (the rank's
share, the device, the env, the automatic settings, shared memory, the experiment folder and its
checkpoints), then the runner class the config asks for runs it."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import shutil

import torch

from asyncrl.algo.optimizer import learner_state_floats
from asyncrl.cfg.checks import validate
from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.settle import Settled
from asyncrl.core.buffers import buffer_layout, layout_nbytes, num_agents
from asyncrl.core.checkpoint import (
    check_compatible,
    checkpoint_dir,
    list_checkpoints,
    load_checkpoint,
)
from asyncrl.core.log import log, run_log_file, setup_logging
from asyncrl.core.weights import num_state_floats
from asyncrl.distributed.rank import Rank, this_rank
from asyncrl.envs import make_agents, portable_entry
from asyncrl.envs.multi_agent import SingleAgent, is_agents
from asyncrl.model.actor_critic import build_model
from asyncrl.population.ratings import openskill_models
from asyncrl.roles.env_backends import BACKENDS
from asyncrl.roles.parallel_runner import ParallelRunner
from asyncrl.roles.runner import EnvInfo
from asyncrl.roles.scheduled import schedule_line
from asyncrl.roles.serial_runner import SerialRunner
from asyncrl.roles.wandb_run import WandbRun, require_wandb

# faster-fifo queues and headroom
QUEUES_SHM_BYTES = 64 * 2**20


def resolve_device(cfg: Config, rank: Rank = Rank()) -> torch.device:
    """The device of the policy workers and learners; under torchrun, --device cuda is GPU
    LOCAL_RANK."""
    if cfg.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"--device {cfg.device} but torch sees no CUDA GPU; use --device cpu (or auto)"
        )
    else:
        device = torch.device(cfg.device)
    if device.type == "cuda" and rank.distributed and device.index is None:
        if rank.local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"rank {rank.rank} has LOCAL_RANK {rank.local_rank} but this machine has "
                f"{torch.cuda.device_count()} GPU(s): start at most that many ranks per machine"
            )
        device = torch.device("cuda", rank.local_rank)
    return device


def rank_settings(cfg: Config, rank: Rank) -> dict:
    """The rank stage of the settings (cfg/settle.py): under torchrun, one rank's share of the run.
    --batch_size is the batch of all ranks together; seeds differ per rank. Options a distributed
    run does not have are one line, exit 2."""
    if not rank.distributed:
        return {}
    for used, what in [
        (cfg.num_policies > 1, "--num_policies > 1 (train one policy per launch)"),
        (cfg.serial_mode, "--serial_mode True"),
        (cfg.sampler_only, "--sampler_only True"),
    ]:
        if used:
            raise ConfigError(
                f"{what} cannot run under torchrun (WORLD_SIZE {rank.world_size}); drop it or start one process"
            )
    if cfg.batch_size % rank.world_size:
        raise ConfigError(
            f"--batch_size ({cfg.batch_size}) is the batch of all ranks together: it must be divisible "
            f"by the number of ranks ({rank.world_size})"
        )
    values = {"batch_size": cfg.batch_size // rank.world_size}
    if cfg.seed is not None:
        values["seed"] = cfg.seed + 1_000_003 * rank.rank
    try:
        validate(dataclasses.replace(cfg, **values))
    except ConfigError as e:
        raise ConfigError(
            f"{e} (each of the {rank.world_size} ranks learns from --batch_size / {rank.world_size})"
        ) from None
    return values


def probe_env(cfg: Config) -> EnvInfo:
    """Make one env in the main process to learn the spaces and agent count that size the shared
    buffers. A local multi-agent env is also reset once: it must start an episode with every agent
    it declares (a remote one's server checks that itself, and the env is not even opened here)."""
    env = make_agents(cfg.env, **cfg.env_kwargs())
    try:
        if not isinstance(env, SingleAgent) and not is_agents(env):
            env.reset(seed=0)
        # multi_agent.TurnBasedAgents
        if getattr(env, "turn_based", False) and cfg.synchronous:
            raise ConfigError(
                f"env {cfg.env!r} is a turn-based game: --algo {cfg.algo} is not supported for its "
                f"agents yet (a rollout would close before a turn pays for the last moves); use --algo "
                f"appo"
            )
        BACKENDS[cfg.env_backend].check(
            cfg, env.observation_space, env.action_space, env.num_agents
        )
        return EnvInfo(
            env.observation_space,
            env.action_space,
            env.frameskip,
            env.num_agents,
            (cfg.env, portable_entry(cfg.env)),
        )
    finally:
        env.close()


def model_and_layout(cfg: Config, env: EnvInfo) -> tuple[torch.nn.Module, dict]:
    """The run's model (its sizes set the recurrent-state and weight tensors) and its shared-memory
    layout."""
    model = build_model(env.obs_space, env.action_space, cfg)
    return model, buffer_layout(
        cfg,
        env.obs_space,
        env.action_space,
        model.rnn_state_size,
        model.distribution_params_size,
        num_state_floats(model),
        learner_state_floats(model),
    )


def unwritable(cfg: Config, e: OSError) -> ConfigError:
    return ConfigError(
        f"cannot write to --train_dir {cfg.train_dir!r} ({e.strerror}); choose a writable folder"
    )


@contextlib.contextmanager
def experiment_dir_claimed(cfg: Config):
    """Holds an exclusive lock on the experiment folder while the run lasts: a second run of the
    same experiment would interleave its checkpoints and stats with this one's. The kernel drops the
    lock with the process, however it ends, so no stale lock is ever left behind."""
    try:
        os.makedirs(cfg.experiment_dir, exist_ok=True)
        folder = os.open(cfg.experiment_dir, os.O_RDONLY)
    except OSError as e:
        raise unwritable(cfg, e) from None
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"another run is training experiment {cfg.experiment!r} in {cfg.experiment_dir}; wait "
                f"for it or stop it, or choose another --experiment"
            ) from None
        yield
    finally:
        os.close(folder)


def prepare_experiment_dir(cfg: Config) -> None:
    """The experiment folder, emptied for --restart_behavior restart (emptied, not replaced: its
    lock stays)."""
    try:
        os.makedirs(cfg.experiment_dir, exist_ok=True)
        if cfg.restart_behavior == "restart":
            for entry in os.scandir(cfg.experiment_dir):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.remove(entry.path)
    except OSError as e:
        raise unwritable(cfg, e) from None


def save_config(settled: Settled) -> None:
    """This run's config.json, written once nothing else can refuse the run (checkpoints, wandb): a
    refused resume leaves the saved config as it was, and the next plain resume as it would have
    been."""
    try:
        with open(os.path.join(settled.config.experiment_dir, "config.json"), "w") as f:
            json.dump(settled.to_json(), f, indent=2)
    except OSError as e:
        raise unwritable(settled.config, e) from None


def check_checkpoints(cfg: Config, model: torch.nn.Module) -> None:
    """Fail before any process starts if the checkpoint a learner would resume from cannot be used;
    say which one it is (running a command again resumes: a user who meant a new run learns it at
    once)."""
    for policy_id in range(cfg.num_policies):
        paths = list_checkpoints(checkpoint_dir(cfg.experiment_dir, policy_id))
        if paths:
            saved = load_checkpoint(paths[-1])
            check_compatible(paths[-1], saved["model"], model)
            done = (
                f", already past --train_for_env_steps {cfg.train_for_env_steps:,}"
                if saved["env_steps"] >= cfg.train_for_env_steps
                else ""
            )
            log.info(
                f"resuming policy {policy_id} at {saved['env_steps']:,} env steps from {paths[-1]}{done} "
                f"(--restart_behavior restart starts over)"
            )
            if cfg.deterministic and policy_id == 0:
                log.warning(
                    "--deterministic: a resumed run starts its envs over, so it is a function of the seed "
                    "and this checkpoint, not the same as a run that never stopped"
                )


def check_shared_memory(layout: dict, shm_dir: str = "/dev/shm") -> None:
    """Shared tensors live in /dev/shm (tmpfs); Docker's default of 64 MiB is often too small."""
    if not os.path.isdir(shm_dir):
        return
    needed = layout_nbytes(layout) + QUEUES_SHM_BYTES
    free = shutil.disk_usage(shm_dir).free
    if needed > free:
        raise ConfigError(
            f"the run needs {needed / 2**20:.0f} MiB of shared memory but {shm_dir} has "
            f"{free / 2**20:.0f} MiB free; enlarge it (docker run --shm-size=2g, or mount -o "
            f"remount,size=2G {shm_dir}) or lower --num_workers/--num_envs_per_worker/--batch_size/"
            f"--rollout"
        )


def auto_settings(cfg: Config, device: torch.device, env: EnvInfo, world_size: int = 1) -> dict:
    """The auto stage of the settings (cfg/settle.py): the values --policy_workers_per_policy and
    --agents_per_env take for this run and env (config.json keeps them automatic)."""
    policy_workers = cfg.policy_workers_per_policy
    # see the flag's help: 2 only where no CPU learner needs a core; ppo/ver's budget: 1; none with
    # --worker_inference (left at -1: the runner starts none)
    if policy_workers == -1 and not cfg.worker_inference:
        sampling_alone = cfg.sampler_only and device.type == "cpu" and not cfg.synchronous
        policy_workers = min(2, len(os.sched_getaffinity(0))) if sampling_alone else 1
    if cfg.agents_per_env not in (-1, env.num_agents):
        raise ConfigError(
            f"--agents_per_env {cfg.agents_per_env}, but env {cfg.env!r} has {env.num_agents} agent(s); "
            f"drop the flag or choose the env you mean"
        )
    values = {"policy_workers_per_policy": policy_workers, "agents_per_env": env.num_agents}
    lock_step_batch = num_agents(dataclasses.replace(cfg, **values)) * cfg.rollout
    if cfg.algo == "ppo" and cfg.batch_size != lock_step_batch:
        raise ConfigError(
            f"--algo ppo learns from every agent's --rollout steps at once: --batch_size must be "
            f"{lock_step_batch * world_size} (workers x envs per worker x agents per env x rollout"
            f"{' x ranks' if world_size > 1 else ''}), got {cfg.batch_size * world_size}"
        )
    return values


def train(settled: Settled) -> int:
    """Validate, settle this rank's and the automatic values, prepare and run. Raises
    ConfigError/EnvError/ CheckpointError before any process starts."""
    validate(settled.config)
    # a deterministic run is a function of its seed: without one, one is drawn and saved
    if settled.config.deterministic and settled.config.seed is None:
        settled = settled.then("drawn", {"seed": secrets.randbits(31)})
    cfg = settled.config
    setup_logging(cfg.log_level)
    if cfg.with_wandb:
        require_wandb()
    rank = this_rank()
    if cfg.deterministic and rank.distributed:
        raise ConfigError(
            "--deterministic True does not cover torchrun's ranks (DD-PPO's straggler rule is timing); "
            "drop it or run one process group"
        )
    if cfg.compile_learner and rank.distributed:
        raise ConfigError(
            "--compile_learner True is not built for torchrun's ranks (their collectives run within the "
            "compiled step); drop it"
        )
    run = settled.then("rank", rank_settings(cfg, rank))
    device = resolve_device(cfg, rank)
    env = probe_env(cfg)
    run = run.then("auto", auto_settings(run.config, device, env, rank.world_size))
    run_cfg = run.config
    # the runner rates the players of multi-agent episodes
    if run_cfg.agents_per_env > 1:
        openskill_models()
    model, layout = model_and_layout(run_cfg, env)
    check_shared_memory(layout)
    with experiment_dir_claimed(cfg) if rank.writes else contextlib.nullcontext():
        wandb = None
        if rank.writes:
            prepare_experiment_dir(cfg)
            # from here every line also goes to log.txt, the checkpoint it resumes from first
            setup_logging(cfg.log_level, run_log_file(cfg, rank.writes))
            check_checkpoints(cfg, model)
            # may refuse the run
            wandb = WandbRun(run_cfg, cfg.num_policies) if cfg.with_wandb else None
            save_config(settled)
            for line in run.lines():
                log.info(line)
            if run_cfg.deterministic:
                log.info(schedule_line(run_cfg))
        runner = SerialRunner if cfg.serial_mode else ParallelRunner
        return runner(run_cfg, env, device, layout, rank, wandb).run()
