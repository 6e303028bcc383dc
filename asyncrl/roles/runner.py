"""Runner (the main process): checks everything that can be checked before a process starts, allocates
the shared buffers and queues, starts the learners, policy workers and rollout workers, reports
progress, and stops them all: at the step or time limit, on Ctrl-C/SIGTERM, or when one of them fails."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import time
from functools import partial

import torch

from asyncrl.algo.optimizer import learner_state_floats
from asyncrl.cfg.config import Config, ConfigError
from asyncrl.cfg.settle import Settled
from asyncrl.core.buffers import SharedBuffers, buffer_layout, layout_nbytes, num_agents, num_slots
from asyncrl.core.checkpoint import check_compatible, checkpoint_dir, list_checkpoints, load_checkpoint
from asyncrl.core.messages import Episodes, Fatal, LearnerStopped, Matches, Snapshot, StateExported, StateImported
from asyncrl.core.processes import RUN_STOPPED_EXIT_CODE, RunStopped, StopFlag, plan_cores, start_child
from asyncrl.core.queues import GuardedCalls, GuardedQueue, Queues
from asyncrl.core.weights import num_state_floats
from asyncrl.distributed.preemption import EpisodeRelay
from asyncrl.distributed.rank import Rank, this_rank
from asyncrl.envs import adopt_entry, make_agents, portable_entry
from asyncrl.envs.multi_agent import SingleAgent, is_agents
from asyncrl.model.actor_critic import build_model
from asyncrl.population.pbt import PopulationBasedTraining
from asyncrl.population.ratings import Ratings
from asyncrl.roles.env_backends import BACKENDS
from asyncrl.roles.evaluator import Evaluator
from asyncrl.roles.learner import Learner
from asyncrl.roles.policy_worker import PolicyWorker
from asyncrl.roles.rollout_worker import RolloutWorker
from asyncrl.roles.rollouts import reset_after_restart
from asyncrl.roles.stats import StatsWriter
from asyncrl.roles.wandb_run import WandbRun

SHUTDOWN_TIMEOUT_S = 10.0
# On a restart the rollout and policy workers have nothing to save (their samples in flight are dropped) and one of
# them may never return: blocked on a queue lock the dead child held. They get this long, the learners the above.
WORKER_RESTART_GRACE_S = 2.0
WORKER_TITLES = ("asyncrl-rollout-", "asyncrl-policy-")
RESTART_WINDOW_S = 300.0
QUEUES_SHM_BYTES = 64 * 2**20  # faster-fifo queues and headroom


class ChildFailed(RuntimeError):
    pass


def rollout_title(worker: int) -> str:
    """Process title of a rollout worker; the heartbeat check finds the process by it."""
    return f"asyncrl-rollout-{worker}"


@dataclasses.dataclass
class EnvInfo:
    obs_space: object
    action_space: object
    frameskip: int
    num_agents: int
    portable: tuple[str, bytes]  # (name, entry) for the worker processes: see asyncrl.envs.portable_entry


def resolve_device(cfg: Config, rank: Rank = Rank()) -> torch.device:
    """The device of the policy workers and learners; under torchrun, --device cuda is GPU LOCAL_RANK."""
    if cfg.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {cfg.device} but torch sees no CUDA GPU; use --device cpu (or auto)")
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
    """The rank stage of the settings (cfg/settle.py): under torchrun, one rank's share of the run. --batch_size is the
    batch of all ranks together; seeds differ per rank. Options a distributed run does not have are one line, exit 2."""
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
        dataclasses.replace(cfg, **values).validate()
    except ConfigError as e:
        raise ConfigError(
            f"{e} (each of the {rank.world_size} ranks learns from --batch_size / {rank.world_size})"
        ) from None
    return values


def probe_env(cfg: Config) -> EnvInfo:
    """Make one env in the main process to learn the spaces and agent count that size the shared buffers. A local
    multi-agent env is also reset once: it must start an episode with every agent it declares (a remote one's
    server checks that itself, and the env is not even opened here)."""
    env = make_agents(cfg.env, **cfg.env_kwargs())
    try:
        if not isinstance(env, SingleAgent) and not is_agents(env):
            env.reset(seed=0)
        if getattr(env, "turn_based", False) and cfg.synchronous:  # multi_agent.TurnBasedAgents
            raise ConfigError(
                f"env {cfg.env!r} is a turn-based game: --algo {cfg.algo} is not supported for its "
                f"agents yet (a rollout would close before a turn pays for the last moves); use --algo "
                f"appo"
            )
        BACKENDS[cfg.env_backend].check(cfg, env.observation_space, env.action_space, env.num_agents)
        return EnvInfo(
            env.observation_space, env.action_space, env.frameskip, env.num_agents, (cfg.env, portable_entry(cfg.env))
        )
    finally:
        env.close()


def model_and_layout(cfg: Config, env: EnvInfo) -> tuple[torch.nn.Module, dict]:
    """The run's model (its sizes set the recurrent-state and weight tensors) and its shared-memory layout."""
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
    return ConfigError(f"cannot write to --train_dir {cfg.train_dir!r} ({e.strerror}); choose a writable folder")


@contextlib.contextmanager
def experiment_dir_claimed(cfg: Config):
    """Holds an exclusive lock on the experiment folder while the run lasts: a second run of the same experiment
    would interleave its checkpoints and stats with this one's. The kernel drops the lock with the process, however
    it ends, so no stale lock is ever left behind."""
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


def prepare_experiment_dir(cfg: Config, model: torch.nn.Module) -> None:
    """The experiment folder, emptied for --restart_behavior restart (emptied, not replaced: its lock stays), with
    the checkpoints to resume from checked against the model."""
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
    check_checkpoints(cfg, model)


def save_config(settled: Settled) -> None:
    """This run's config.json, written once nothing else can refuse the run (checkpoints, wandb): a refused resume
    leaves the saved config as it was, and the next plain resume as it would have been."""
    try:
        with open(os.path.join(settled.config.experiment_dir, "config.json"), "w") as f:
            json.dump(settled.to_json(), f, indent=2)
    except OSError as e:
        raise unwritable(settled.config, e) from None


def check_checkpoints(cfg: Config, model: torch.nn.Module) -> None:
    """Fail before any process starts if the checkpoint a learner would resume from cannot be used; say which one
    it is (running a command again resumes: a user who meant a new run learns it at once)."""
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
            print(
                f"asyncrl: resuming policy {policy_id} at {saved['env_steps']:,} env steps from {paths[-1]}{done} "
                f"(--restart_behavior restart starts over)",
                flush=True,
            )


class Runner:
    def __init__(
        self,
        cfg: Config,
        env: EnvInfo,
        device: torch.device,
        layout: dict,
        rank: Rank = Rank(),
        wandb: WandbRun | None = None,
    ):
        self.cfg, self.env, self.device, self.rank = cfg, env, device, rank
        self.buffers = SharedBuffers.allocate(layout)
        self.processes: dict = {}  # title -> process (multi-process mode)
        self.queues = Queues(cfg, num_slots(cfg))
        self._guard_queues()
        self.stop_flag = StopFlag()
        self.stats = StatsWriter(cfg.experiment_dir, cfg.num_policies, cfg.stats_avg, write=rank.writes, wandb=wandb)
        self.stats_state_path = os.path.join(cfg.experiment_dir, "stats_state.json")
        if rank.writes:
            self.stats.load_state(self.stats_state_path)
        self.learners_stopped = False  # under torchrun: the ranks' learners agreed to stop
        self.relay = EpisodeRelay(rank) if rank.distributed else None  # under torchrun: every rank's episodes
        self.next_evaluation: list[int | None] = [None] * cfg.num_policies  # env steps of each policy's next one
        self.pbt = (
            PopulationBasedTraining(cfg, self.buffers, self.learner_commands, self.stats.policies)
            if cfg.with_pbt
            else None
        )
        self.ratings = Ratings(cfg, self.buffers) if cfg.agents_per_env > 1 else None
        if self.ratings is not None:
            self.stats.policy_extras = self.ratings.policy_stats
        self.restart_times: list[float] = []
        self.components: list = []  # the same components, in this process (serial mode)
        self.fatal: str | None = None  # a child's error that stops the run (a Fatal report)
        self.handlers = self._report_handlers()

    def _guard_queues(self) -> None:
        """The queues this process uses, through GuardedCalls: a child that died holding a queue's lock must not
        leave the runner waiting for it (queues.py)."""
        self.queue_calls = GuardedCalls(lambda: any(p.exitcode is not None for p in self.processes.values()))
        self.reports = GuardedQueue(self.queues.reports, self.queue_calls)
        self.eval_requests = GuardedQueue(self.queues.eval_requests, self.queue_calls)
        self.learner_commands = [GuardedQueue(q, self.queue_calls) for q in self.queues.learner_commands]

    def _report_handlers(self) -> dict:
        """Who handles each kind of report the runner itself acts on; the stats take every other kind."""
        handlers = {Fatal: self._fatal, LearnerStopped: self._learners_stopped, Episodes: self._episodes}
        if self.pbt is not None:
            handlers.update({StateExported: self.pbt.exported, StateImported: self.pbt.imported})
        if self.ratings is not None:
            handlers.update(
                {
                    Matches: lambda report: self.ratings.add_matches(report.matches),
                    Snapshot: lambda report: self.ratings.add_snapshot(report.policy_id, report.k, report.version),
                }
            )
        return handlers

    def _fatal(self, report: Fatal) -> None:
        self.fatal = self.fatal or report.message

    def _learners_stopped(self, report: LearnerStopped) -> None:
        self.learners_stopped = True

    def _episodes(self, report: Episodes) -> None:
        self.stats.add_episodes(report)
        if self.relay is not None:
            self.relay.add(report.episodes)

    def _component_factories(self) -> list[tuple[str, partial]]:
        """Learners first (they publish the initial weights), then policy workers, then rollout workers."""
        cfg, b, q, env = self.cfg, self.buffers, self.queues, self.env
        factories = [
            (
                f"asyncrl-learner-{p}",
                partial(
                    Learner, p, cfg, b, q, env.obs_space, env.action_space, self.device, env.frameskip, self.stop_flag
                ),
            )
            for p in range(cfg.num_policies)
        ]
        factories += [
            (
                f"asyncrl-policy-{p}-{i}" if cfg.policy_workers_per_policy > 1 else f"asyncrl-policy-{p}",
                partial(PolicyWorker, p, i, cfg, b, q, env.obs_space, env.action_space, self.device),
            )
            for p in range(cfg.num_policies)
            for i in range(cfg.policy_workers_per_policy)
        ]
        factories += [
            (rollout_title(w), partial(RolloutWorker, w, cfg, b, q, self.stop_flag)) for w in range(cfg.num_workers)
        ]
        if cfg.eval_every_env_steps and self.rank.writes:
            factories.append(("asyncrl-eval", partial(Evaluator, cfg, b, q, env.obs_space, env.action_space)))
        return factories

    def _start(self) -> None:
        factories = self._component_factories()
        cpu_learning = self.device.type == "cpu" and not self.cfg.sampler_only
        plan = {}
        if self.cfg.set_workers_cpu_affinity and not self.cfg.serial_mode:
            # ppo/ver collect and learn in turn: the rollout workers may use the learner's cores, and the learner all
            plan = plan_cores(
                [title for title, _ in factories],
                self.rank.my_cores(sorted(os.sched_getaffinity(0))),
                cpu_learning and not self.cfg.synchronous,
            )
        for title, factory in factories:
            if self.cfg.serial_mode:
                component = factory()
                if hasattr(component, "start"):
                    component.start()
                self.components.append(component)
                continue
            cores = plan.get(title)
            # a learner with cores of its own uses them all; everyone else keeps --torch_threads
            threads = len(cores) if cores and "learner" in title and cpu_learning else self.cfg.torch_threads
            self.processes[title] = start_child(
                title, factory, self.stop_flag, threads, cores, partial(adopt_entry, *self.env.portable)
            )

    def run(self) -> int:
        """Train until a limit is reached or the user stops the run. Returns the process exit status."""
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        status = 0
        try:
            self._start()
            last_summary = time.monotonic()
            while not self._limit_reached():
                self._drain_reports(timeout=0.0 if self.cfg.serial_mode else 0.05)
                for component in self.components:
                    component.poll(0.0)
                self._check_children()
                self._request_evaluations()
                if self.pbt is not None:
                    self.pbt.update()
                if time.monotonic() - last_summary >= self.cfg.experiment_summaries_interval:
                    last_summary = time.monotonic()
                    if self.relay is not None and self.stats.policies[0].launch_env_steps is not None:
                        # rank 0's stats count every rank's episodes (once the learners have joined: the store is up)
                        self.stats.add_episodes(Episodes(self.relay.exchange()))
                    self.stats.summarize(self._seconds_left(), self._fraction_done())
            self._stop_with_the_other_ranks()
        except KeyboardInterrupt:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a supervisor's SIGTERM after Ctrl-C must not cut the save
            print("asyncrl: stopping, saving a checkpoint (Ctrl-C again to force)", flush=True)
            self._stop_with_the_other_ranks()
        except (ChildFailed, RunStopped) as e:  # RunStopped: from a component in this process (serial mode)
            print(f"asyncrl: error: {e}", flush=True)
            status = 1
        finally:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C kills at once; children die with us
            self._stop_children()
            self._drain_reports(timeout=0.0)
            self.stats.summarize(self._seconds_left(), self._fraction_done())
            if self.rank.writes:
                self.stats.save_state(self.stats_state_path)
            self.stats.close()
            if self.ratings is not None:
                self.ratings.save()
        return status

    def _stop_with_the_other_ranks(self) -> None:
        """Under torchrun: ask this rank's learner to stop, which it agrees with the other ranks' learners after an
        update (a rank that stopped alone would leave the others waiting in an all-reduce), and wait for its word."""
        if not self.rank.distributed or self.learners_stopped:
            return
        self.buffers.stop_requested[0] = True
        deadline = time.monotonic() + 2 * self.cfg.dist_timeout
        learners = [p for title, p in self.processes.items() if "learner" in title]
        while not self.learners_stopped and time.monotonic() < deadline and all(p.is_alive() for p in learners):
            self._drain_reports(timeout=0.05)

    def _request_evaluations(self) -> None:
        """Ask the evaluator for a policy's evaluation each time its env steps pass a multiple of
        --eval_every_env_steps (counted from where this launch started)."""
        every = self.cfg.eval_every_env_steps
        for p in self.stats.policies:
            if every and p.launch_env_steps is not None:
                if self.next_evaluation[p.policy_id] is None:
                    self.next_evaluation[p.policy_id] = (p.launch_env_steps // every + 1) * every
                if p.env_steps >= self.next_evaluation[p.policy_id]:
                    self.eval_requests.put((p.policy_id, p.env_steps))
                    self.next_evaluation[p.policy_id] = (p.env_steps // every + 1) * every

    def _limit_reached(self) -> bool:
        if self.learners_stopped:  # under torchrun: another rank's limit or Ctrl-C stopped every rank
            return True
        if self.stats.elapsed() >= self.cfg.train_for_seconds:
            return True
        return all(p.env_steps >= self.cfg.train_for_env_steps for p in self.stats.policies)

    def _fraction_done(self) -> float:
        """How far the run is towards the nearer of its two limits."""
        steps = min(p.env_steps for p in self.stats.policies) / self.cfg.train_for_env_steps
        return max(steps, self.stats.elapsed() / self.cfg.train_for_seconds)

    def _seconds_left(self) -> float | None:
        """To the nearer of the limits given (--train_for_seconds, --train_for_env_steps at this launch's average
        rate); None while there is no estimate (no limit given, or no steps yet)."""
        elapsed = max(1e-6, self.stats.elapsed())
        estimates = (
            [self.cfg.train_for_seconds - elapsed] if self.cfg.train_for_seconds < Config.train_for_seconds else []
        )
        for p in self.stats.policies:
            rate = (p.env_steps - (p.launch_env_steps or 0)) / elapsed
            if rate > 0 and self.cfg.train_for_env_steps < Config.train_for_env_steps:
                estimates.append((self.cfg.train_for_env_steps - p.env_steps) / rate)
        return max(0.0, min(estimates)) if estimates else None

    def _drain_reports(self, timeout: float) -> None:
        for report in self.reports.take_all(timeout):
            self.handlers.get(type(report), self.stats.handle)(report)

    def _check_children(self) -> None:
        """A dead learner stops the run (its last checkpoint stays); a dead worker restarts the workers;
        a rollout worker stuck in an env for --env_step_timeout is killed, and so counts as dead."""
        if self.fatal:
            raise ChildFailed(self.fatal)
        now = time.monotonic()
        for w, beat in enumerate(self.buffers.worker_heartbeat.tolist()):
            process = self.processes.get(rollout_title(w))
            if process is not None and process.exitcode is None and 0 < beat < now - self.cfg.env_step_timeout:
                print(
                    f"asyncrl: {rollout_title(w)} was stuck for {now - beat:.0f} s (--env_step_timeout "
                    f"{self.cfg.env_step_timeout:g}): an env hangs; killing the worker",
                    flush=True,
                )
                process.kill()
                process.join(timeout=5.0)
        for title, process in self.processes.items():
            if process.exitcode is None:
                continue
            if process.exitcode == RUN_STOPPED_EXIT_CODE:
                self._drain_reports(timeout=1.0)
                raise ChildFailed(self.fatal or f"{title} stopped the run")
            if "learner" in title:
                raise ChildFailed(
                    f"{title} exited with code {process.exitcode} (its traceback is above); the last checkpoint is kept"
                )
            self._restart_children(title, process.exitcode)
            return

    def _restart_children(self, title: str, exitcode: int) -> None:
        """Replace every child, with fresh queues. Why not just the dead one: faster-fifo's queues use
        process-shared mutexes and condition variables that are not robust, so a process killed while it
        held or waited on one can leave that queue blocking everyone else. The learners save a checkpoint
        on the way out and resume from it; the samples in flight are dropped."""
        if self.rank.distributed:
            raise ChildFailed(
                f"{title} exited with code {exitcode}; the ranks of a distributed run cannot replace one "
                f"rank's processes: run the same command again to resume from rank 0's last checkpoint"
            )
        now = time.monotonic()
        self.restart_times = [t for t in self.restart_times if now - t < RESTART_WINDOW_S] + [now]
        if len(self.restart_times) > self.cfg.max_worker_restarts:
            raise ChildFailed(
                f"{title} exited with code {exitcode}; workers died {len(self.restart_times)} times in "
                f"{RESTART_WINDOW_S:.0f} s, more than --max_worker_restarts "
                f"{self.cfg.max_worker_restarts}"
            )
        print(
            f"asyncrl: {title} died (exit code {exitcode}); restarting the workers, "
            f"the learners resume from the checkpoint they save now",
            flush=True,
        )
        self.stats.worker_restarts += 1
        self._stop_children(worker_grace_s=WORKER_RESTART_GRACE_S)
        self._drain_reports(timeout=0.0)
        self.queue_calls.close()
        self.queues = Queues(self.cfg, num_slots(self.cfg))
        self._guard_queues()
        if self.pbt is not None:
            self.pbt.restart(self.learner_commands)
        self.stop_flag = StopFlag()
        self.buffers.worker_heartbeat.zero_()
        reset_after_restart(self.buffers)
        self.processes = {}
        self._start()

    def _stop_children(self, worker_grace_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Stop every child: the ones still running after their time (the learners: SHUTDOWN_TIMEOUT_S, workers:
        worker_grace_s) are killed."""
        self.stop_flag.set()
        for component in self.components:
            if hasattr(component, "stop"):
                component.stop()
            if hasattr(component, "close"):
                component.close()
        start = time.monotonic()
        for title, process in self.processes.items():
            grace = worker_grace_s if title.startswith(WORKER_TITLES) else SHUTDOWN_TIMEOUT_S
            process.join(timeout=max(0.0, start + grace - time.monotonic()))
            if process.is_alive():
                print(f"asyncrl: {title} did not stop within {grace:g} s; killing it", flush=True)
                process.kill()
                process.join(timeout=1.0)


def _raise_keyboard_interrupt(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the first SIGTERM stops the run; more would cut its save short
    raise KeyboardInterrupt()


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
    """The auto stage of the settings (cfg/settle.py): the values --policy_workers_per_policy and --agents_per_env
    take for this run and env (config.json keeps them automatic)."""
    policy_workers = cfg.policy_workers_per_policy
    if policy_workers == -1:  # see the flag's help: 2 only where no CPU learner needs a core; ppo/ver's budget: 1
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
    """Validate, settle this rank's and the automatic values, prepare and run. Raises ConfigError/EnvError/
    CheckpointError before any process starts."""
    cfg = settled.config
    cfg.validate()
    rank = this_rank()
    run = settled.then("rank", rank_settings(cfg, rank))
    device = resolve_device(cfg, rank)
    env = probe_env(cfg)
    run = run.then("auto", auto_settings(run.config, device, env, rank.world_size))
    run_cfg = run.config
    model, layout = model_and_layout(run_cfg, env)
    check_shared_memory(layout)
    with experiment_dir_claimed(cfg) if rank.writes else contextlib.nullcontext():
        wandb = None
        if rank.writes:
            prepare_experiment_dir(cfg, model)
            wandb = WandbRun(run_cfg, cfg.num_policies) if cfg.with_wandb else None  # may refuse the run
            save_config(settled)
            print("\n".join(run.lines()), flush=True)
        return Runner(run_cfg, env, device, layout, rank, wandb).run()
