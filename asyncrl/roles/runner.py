"""Runner (the main process): what every run does the same way, whether its roles run in processes
of their own (parallel_runner.py) or all in this one (serial_runner.py): the shared buffers and
queues, the reports and progress, the limits, evaluations, PBT and ratings, and the stop at the step
or time limit, on Ctrl-C/SIGTERM, or when a role fails. launch.py prepares a run and chooses its
runner class."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from functools import partial

import torch

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers, num_slots
from asyncrl.core.log import log
from asyncrl.core.messages import (
    Episodes,
    Fatal,
    LearnerStopped,
    Matches,
    Snapshot,
    StateExported,
    StateImported,
)
from asyncrl.core.processes import RunStopped, StopFlag
from asyncrl.core.queues import GuardedCalls, GuardedQueue, Queues
from asyncrl.distributed.preemption import EpisodeRelay
from asyncrl.distributed.rank import Rank
from asyncrl.population.pbt import PopulationBasedTraining
from asyncrl.population.ratings import Ratings
from asyncrl.roles.action_requests import InWorkerPolicies
from asyncrl.roles.evaluator import Evaluator
from asyncrl.roles.learner import Learner
from asyncrl.roles.policy_worker import PolicyWorker
from asyncrl.roles.rollout_worker import RolloutWorker
from asyncrl.roles.stats import StatsWriter
from asyncrl.roles.wandb_run import WandbRun

EVALUATOR_TITLE = "asyncrl-eval"


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
    # (name, entry) for the worker processes: see asyncrl.envs.portable_entry
    portable: tuple[str, bytes]


class Runner:
    """The run's main loop and everything it owns but the roles' processes. A runner class
    (ParallelRunner, SerialRunner) decides where the roles run: its _start, _poll_in_process,
    _check_children and _stop_children."""

    # how long one turn of the loop waits for reports
    REPORT_TIMEOUT_S = 0.05
    # a rollout worker without a free slot waits for a learner to free one
    WORKERS_WAIT_FOR_SLOTS = True

    def __init__(
        self,
        cfg: Config,
        env: EnvInfo,
        device: torch.device,
        layout: dict,
        rank: Rank = Rank(),
        wandb: WandbRun | None = None,
    ):
        self.cfg = cfg
        self.env = env
        self.device = device
        self.rank = rank
        self.buffers = SharedBuffers.allocate(layout)
        self.queues = Queues(cfg, num_slots(cfg))
        self._guard_queues()
        self.stop_flag = StopFlag()
        self.stats = StatsWriter(
            cfg.experiment_dir,
            cfg.num_policies,
            cfg.stats_avg,
            write=rank.writes,
            wandb=wandb,
            record_updates=cfg.deterministic,
        )
        self.stats_state_path = os.path.join(cfg.experiment_dir, "stats_state.json")
        if rank.writes:
            self.stats.load_state(self.stats_state_path)
        # under torchrun: the ranks' learners agreed to stop
        self.learners_stopped = False
        # under torchrun: every rank's episodes
        self.relay = EpisodeRelay(rank) if rank.distributed else None
        # env steps of each policy's next one
        self.next_evaluation: list[int | None] = [None] * cfg.num_policies
        # env steps of each policy's last one asked
        self.evaluated_at: list[int | None] = [None] * cfg.num_policies
        self.pbt = (
            PopulationBasedTraining(cfg, self.buffers, self.learner_commands, self.stats.policies)
            if cfg.with_pbt
            else None
        )
        self.ratings = Ratings(cfg, self.buffers) if cfg.agents_per_env > 1 else None
        if self.ratings is not None:
            self.stats.policy_extras = self.ratings.policy_stats
        # a child's error that stops the run (a Fatal report)
        self.fatal: str | None = None
        self.handlers = self._report_handlers()

    def _guard_queues(self) -> None:
        """The queues this process uses, through GuardedCalls: a child that died holding a queue's
        lock must not leave the runner waiting for it (queues.py)."""
        self.queue_calls = GuardedCalls(self._a_child_died)
        self.reports = GuardedQueue(self.queues.reports, self.queue_calls)
        self.eval_requests = GuardedQueue(self.queues.eval_requests, self.queue_calls)
        self.learner_commands = [
            GuardedQueue(q, self.queue_calls) for q in self.queues.learner_commands
        ]

    def _report_handlers(self) -> dict:
        """Who handles each kind of report the runner itself acts on; the stats take every other
        kind."""
        handlers = {
            Fatal: self._fatal,
            LearnerStopped: self._learners_stopped,
            Episodes: self._episodes,
        }
        if self.pbt is not None:
            handlers.update({StateExported: self.pbt.exported, StateImported: self.pbt.imported})
        if self.ratings is not None:
            handlers.update(
                {
                    Matches: lambda report: self.ratings.add_matches(report.matches),
                    Snapshot: lambda report: self.ratings.add_snapshot(
                        report.policy_id, report.slot, report.version
                    ),
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
        """Learners first (they publish the initial weights), then policy workers, then rollout
        workers."""
        cfg = self.cfg
        shared = dict(cfg=cfg, buffers=self.buffers, queues=self.queues)
        spaces = dict(obs_space=self.env.obs_space, action_space=self.env.action_space)
        factories = []
        for policy_id in range(cfg.num_policies):
            learner = partial(
                Learner,
                policy_id=policy_id,
                **shared,
                **spaces,
                device=self.device,
                frameskip=self.env.frameskip,
                stop_flag=self.stop_flag,
            )
            factories.append((f"asyncrl-learner-{policy_id}", learner))
        # --worker_inference: each rollout worker acts for itself; no policy worker processes
        policy_workers = 0 if cfg.worker_inference else cfg.policy_workers_per_policy
        for policy_id in range(cfg.num_policies):
            for worker_idx in range(policy_workers):
                title = f"asyncrl-policy-{policy_id}"
                if cfg.policy_workers_per_policy > 1:
                    title += f"-{worker_idx}"
                policy_worker = partial(
                    PolicyWorker,
                    policy_id=policy_id,
                    worker_idx=worker_idx,
                    **shared,
                    **spaces,
                    device=self.device,
                )
                factories.append((title, policy_worker))
        make_requests = None
        if cfg.worker_inference:
            # the models act on the CPU, beside the envs
            make_policy = partial(PolicyWorker, **shared, **spaces, device=torch.device("cpu"))
            make_requests = partial(
                InWorkerPolicies,
                num_policies=cfg.num_policies,
                make_policy=make_policy,
                stop_flag=self.stop_flag,
            )
        for worker_idx in range(cfg.num_workers):
            rollout_worker = partial(
                RolloutWorker,
                worker_idx=worker_idx,
                **shared,
                stop_flag=self.stop_flag,
                waits_for_slots=self.WORKERS_WAIT_FOR_SLOTS,
                make_requests=make_requests,
            )
            factories.append((rollout_title(worker_idx), rollout_worker))
        if cfg.eval_every_env_steps and self.rank.writes:
            factories.append((EVALUATOR_TITLE, partial(Evaluator, **shared, **spaces)))
        return factories

    def run(self) -> int:
        """Train until a limit is reached or the user stops the run. Returns the process exit
        status."""
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        status = 0
        try:
            self._start()
            last_summary = time.monotonic()
            while not self._limit_reached():
                self._drain_reports(timeout=self.REPORT_TIMEOUT_S)
                self._poll_in_process()
                self._check_children()
                self._request_evaluations()
                if self.pbt is not None:
                    self.pbt.update()
                if time.monotonic() - last_summary >= self.cfg.experiment_summaries_interval:
                    last_summary = time.monotonic()
                    if (
                        self.relay is not None
                        and self.stats.policies[0].launch_env_steps is not None
                    ):
                        # rank 0's stats count every rank's episodes (once the learners have joined:
                        # the store is up)
                        self.stats.add_episodes(Episodes(self.relay.exchange()))
                    self.stats.summarize(self._seconds_left(), self._fraction_done())
            self._request_evaluations(final=True)
            self._stop_with_the_other_ranks()
            self._last_episodes_of_every_rank()
        except KeyboardInterrupt:
            # a supervisor's SIGTERM after Ctrl-C must not cut the save
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            log.info("stopping, saving a checkpoint (Ctrl-C again to force)")
            self._stop_with_the_other_ranks()
            self._last_episodes_of_every_rank()
        # RunStopped: from a component in this process (serial mode)
        except (ChildFailed, RunStopped) as e:
            log.error(f"error: {e}")
            status = 1
        finally:
            # a second Ctrl-C kills at once; children die with us
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            self._stop_children()
            self._drain_reports(timeout=0.0)
            self.stats.summarize(self._seconds_left(), self._fraction_done())
            if self.rank.writes:
                self.stats.save_state(self.stats_state_path)
            self.stats.close()
            if self.ratings is not None:
                self.ratings.save()
            if self.rank.writes:
                log.info(self.stats.end_line())
        return status

    def _last_episodes_of_every_rank(self) -> None:
        """Under torchrun, once the ranks agreed to stop: every rank's episodes so far reach rank
        0's last stats row, however the ranks' summaries fell. Before the children stop: rank 0's
        learner holds the process group's store, which the relay goes through."""
        if self.relay is not None:
            self._drain_reports(timeout=0.0)
            self.stats.add_episodes(Episodes(self.relay.finish()))

    def _request_evaluations(self, final: bool = False) -> None:
        """Ask the evaluator for a policy's evaluation each time its env steps pass a multiple of
        --eval_every_env_steps (counted from where this launch started), and (final) of its last weights once the run
        reached its limit: the evaluator plays that one as it stops."""
        every = self.cfg.eval_every_env_steps
        # under torchrun, rank 0 evaluates
        if not every or not self.rank.writes:
            return
        for p in self.stats.policies:
            if p.launch_env_steps is not None:
                if self.next_evaluation[p.policy_id] is None:
                    self.next_evaluation[p.policy_id] = (p.launch_env_steps // every + 1) * every
                due = p.env_steps >= self.next_evaluation[p.policy_id]
                if due or (final and self.evaluated_at[p.policy_id] != p.env_steps):
                    self.eval_requests.put((p.policy_id, p.env_steps))
                    self.next_evaluation[p.policy_id] = (p.env_steps // every + 1) * every
                    self.evaluated_at[p.policy_id] = p.env_steps

    def _limit_reached(self) -> bool:
        # under torchrun: another rank's limit or Ctrl-C stopped every rank
        if self.learners_stopped:
            return True
        if self.stats.elapsed() >= self.cfg.train_for_seconds:
            return True
        return all(p.env_steps >= self.cfg.train_for_env_steps for p in self.stats.policies)

    def _fraction_done(self) -> float:
        """How far the run is towards the nearer of its two limits."""
        steps = min(p.env_steps for p in self.stats.policies) / self.cfg.train_for_env_steps
        return max(steps, self.stats.elapsed() / self.cfg.train_for_seconds)

    def _seconds_left(self) -> float | None:
        """To the nearer of the limits given (--train_for_seconds, --train_for_env_steps at this
        launch's average rate); None while there is no estimate (no limit given, or no steps
        yet)."""
        elapsed = max(1e-6, self.stats.elapsed())
        estimates = (
            [self.cfg.train_for_seconds - elapsed]
            if self.cfg.train_for_seconds < Config.train_for_seconds
            else []
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
        """A role's error that stops the run (a Fatal report) stops it here."""
        if self.fatal:
            raise ChildFailed(self.fatal)

    # --- what a runner class decides: where the roles run
    def _start(self) -> None:
        """Start every role (_component_factories)."""
        raise NotImplementedError

    def _poll_in_process(self) -> None:
        """Give the roles that run in this process their turn."""

    def _a_child_died(self) -> bool:
        """Whether a role's process has exited (the queues stop waiting on a lock it may have
        held)."""
        return False

    def _stop_with_the_other_ranks(self) -> None:
        """Under torchrun: agree with the other ranks to stop (ParallelRunner: only a parallel run
        has ranks)."""

    def _stop_children(self) -> None:
        """Stop every role; a learner saves its checkpoint on the way."""
        raise NotImplementedError


def _raise_keyboard_interrupt(signum, frame):
    # the first SIGTERM stops the run; more would cut its save short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt()
