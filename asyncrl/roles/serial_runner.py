"""The runner of --serial_mode True: every role in this process, each polled in turn by the runner's
loop. One process to debug or profile, and with --seed a run that repeats bit for bit."""

from __future__ import annotations

from asyncrl.roles.learner import Learner
from asyncrl.roles.runner import Runner


def take_turn(role) -> None:
    """A role's turn in this process: one poll; a learner's lasts while it has a batch to learn,
    which frees the slots the rollout workers need next."""
    while role.poll(0.0) and isinstance(role, Learner):
        pass


class SerialRunner(Runner):
    # the roles are this process's too: the loop never waits
    REPORT_TIMEOUT_S = 0.0
    # a rollout worker without a free slot here could never get one (slots are sized so that this
    # cannot happen)
    WORKERS_WAIT_FOR_SLOTS = False

    def __init__(self, *args, **kwargs):
        # the roles, in the order they were made: learners first
        self.components: list = []
        super().__init__(*args, **kwargs)

    def _start(self) -> None:
        for _, factory in self._component_factories():
            component = factory()
            if hasattr(component, "start"):
                component.start()
            self.components.append(component)

    def _poll_in_process(self) -> None:
        for component in self.components:
            take_turn(component)

    def _stop_children(self) -> None:
        self.stop_flag.set()
        for component in self.components:
            if hasattr(component, "stop"):
                component.stop()
            if hasattr(component, "close"):
                component.close()
