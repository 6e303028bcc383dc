"""The runner of a run whose roles are processes of their own (the default): each started from the
fork server and pinned to its cores (--set_workers_cpu_affinity). A dead rollout or policy worker
restarts the workers, a dead learner stops the run, and at the end each gets its time to stop before
it is killed."""

from __future__ import annotations

import os
import time
from functools import partial

from asyncrl.core.buffers import num_slots
from asyncrl.core.log import log, run_log_file, setup_logging
from asyncrl.core.processes import RUN_STOPPED_EXIT_CODE, StopFlag, plan_cores, start_child
from asyncrl.core.queues import Queues
from asyncrl.envs import adopt_entry
from asyncrl.roles.rollouts import reset_after_restart
from asyncrl.roles.runner import EVALUATOR_TITLE, ChildFailed, Runner, rollout_title

SHUTDOWN_TIMEOUT_S = 10.0
# On a restart the rollout and policy workers have nothing to save (their samples in flight are
# dropped) and one of them may never return: blocked on a queue lock the dead child held. They get
# this long, the learners the above.
WORKER_RESTART_GRACE_S = 2.0
WORKER_TITLES = ("asyncrl-rollout-", "asyncrl-policy-")
RESTART_WINDOW_S = 300.0


def child_setup(
    log_level: str, log_file: str | None, env_name: str, env_entry: bytes, lowest_priority: bool
) -> None:
    """A child's first steps: the run's logging and env; the evaluator also takes the lowest CPU
    priority (it never takes a core from training)."""
    if lowest_priority:
        os.nice(19)
    setup_logging(log_level, log_file)
    adopt_entry(env_name, env_entry)


class ParallelRunner(Runner):
    def __init__(self, *args, **kwargs):
        # title -> process
        self.processes: dict = {}
        # of the workers' restarts, over the last RESTART_WINDOW_S
        self.restart_times: list[float] = []
        super().__init__(*args, **kwargs)

    def _a_child_died(self) -> bool:
        return any(p.exitcode is not None for p in self.processes.values())

    def _start(self) -> None:
        factories = self._component_factories()
        cpu_learning = self.device.type == "cpu" and not self.cfg.sampler_only
        plan = {}
        if self.cfg.set_workers_cpu_affinity:
            # ppo/ver collect and learn in turn: the rollout workers may use the learner's cores,
            # and the learner all
            plan = plan_cores(
                [title for title, _ in factories],
                self.rank.my_cores(sorted(os.sched_getaffinity(0))),
                cpu_learning and not self.cfg.synchronous,
            )
        logging = self.cfg.log_level, run_log_file(self.cfg, self.rank.writes)
        for title, factory in factories:
            cores = plan.get(title)
            # a learner with cores of its own uses them all; everyone else keeps --torch_threads
            threads = (
                len(cores)
                if cores and "learner" in title and cpu_learning
                else self.cfg.torch_threads
            )
            setup = partial(child_setup, *logging, *self.env.portable, title == EVALUATOR_TITLE)
            self.processes[title] = start_child(
                title, factory, self.stop_flag, threads, cores, setup
            )

    def _stop_with_the_other_ranks(self) -> None:
        """Under torchrun: ask this rank's learner to stop, which it agrees with the other ranks'
        learners after an update (a rank that stopped alone would leave the others waiting in an
        all-reduce), and wait for its word."""
        if not self.rank.distributed or self.learners_stopped:
            return
        self.buffers.stop_requested[0] = True
        deadline = time.monotonic() + 2 * self.cfg.dist_timeout
        learners = [p for title, p in self.processes.items() if "learner" in title]
        while (
            not self.learners_stopped
            and time.monotonic() < deadline
            and all(p.is_alive() for p in learners)
        ):
            self._drain_reports(timeout=0.05)

    def _check_children(self) -> None:
        """A dead learner stops the run (its last checkpoint stays); a dead worker restarts the
        workers; a rollout worker stuck in an env for --env_step_timeout is killed, and so counts as
        dead."""
        super()._check_children()
        now = time.monotonic()
        for w, beat in enumerate(self.buffers.worker_heartbeat.tolist()):
            process = self.processes.get(rollout_title(w))
            if (
                process is not None
                and process.exitcode is None
                and 0 < beat < now - self.cfg.env_step_timeout
            ):
                log.warning(
                    f"{rollout_title(w)} was stuck for {now - beat:.0f} s (--env_step_timeout "
                    f"{self.cfg.env_step_timeout:g}): an env hangs; killing the worker"
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
        """Replace every child, with fresh queues. Why not just the dead one: faster-fifo's queues
        use process-shared mutexes and condition variables that are not robust, so a process killed
        while it held or waited on one can leave that queue blocking everyone else. The learners
        save a checkpoint on the way out and resume from it; the samples in flight are dropped."""
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
        log.warning(
            f"{title} died (exit code {exitcode}); restarting the workers, "
            f"the learners resume from the checkpoint they save now"
        )
        self.stats.worker_restarts += 1
        if self.cfg.deterministic:
            log.warning(
                "--deterministic: from this restart on the run is no longer a function of its seed "
                "(the envs start over at a moment the crash chose)"
            )
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
        start = time.monotonic()
        for title, process in self.processes.items():
            grace = worker_grace_s if title.startswith(WORKER_TITLES) else SHUTDOWN_TIMEOUT_S
            process.join(timeout=max(0.0, start + grace - time.monotonic()))
            if process.is_alive():
                log.warning(f"{title} did not stop within {grace:g} s; killing it")
                process.kill()
                process.join(timeout=1.0)
