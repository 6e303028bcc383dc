"""Every message the run's processes send each other, in one place (queues.py allocates the queues).

The data itself stays in the shared tensors of buffers.py. The queues of the data path carry small
tuples of ints, pickled in a fraction of a microsecond (a NamedTuple costs 8x that); a Signal takes
the place of an index where a queue also carries news rather than data:

    free_slots          -> rollout workers      slot index ready to be filled
    full_slots[p]       -> learner p            slot index of a finished trajectory of policy p;
                                                Signal.ROLLOUT_CLOSED: ppo/ver's policy worker closed the rollout;
                                                (Signal.ROUND_ENDED, round): --deterministic, a group sent that
                                                round's slots (scheduled.py)
    policy_requests[p]  -> policy workers of p  (worker, group): that env group waits for actions;
                                                (Signal.NEW_VERSION, version): ppo/ver's next rollout may start
    actions_ready[w]    -> rollout worker w     (group, policy): actions for that group are written;
                                                (group, Signal.ENV_RESULTS): the group's envs, stepped elsewhere
                                                (an env backend's begin_step), have all replied;
                                                (group, Signal.END_ROLLOUT): ppo/ver's rollout is closed, send the
                                                group's slots to the learner (its actions come with the next version)
    eval_requests       -> evaluator            (policy, env steps): evaluate that policy's newest weights

The other two queues carry a few messages a second, as the typed records below:

    reports             -> runner               a Report: statistics and events (the runner's and StatsWriter's
                                                dispatch tables say who handles which)
    learner_commands[p] -> learner p            ExportState or ImportState: PBT's weight copies (pbt.py)
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class Signal(IntEnum):
    """Values that stand in place of an index (a slot, a worker or a policy id): all negative and
    distinct, so that one can never be read as another or as an index."""

    # on policy_requests, in place of a worker
    NEW_VERSION = -1
    # on full_slots, in place of a slot
    ROLLOUT_CLOSED = -2
    # on actions_ready, in place of a policy
    ENV_RESULTS = -3
    # on actions_ready, in place of a policy
    END_ROLLOUT = -4
    # on full_slots, in place of a slot
    ROUND_ENDED = -5


# --- reports: children -> runner
class Episodes(NamedTuple):
    """Episodes a rollout worker's envs finished: (policy, return, length, the env's episode stats)
    each."""

    episodes: list


class Matches(NamedTuple):
    """Finished multi-agent episodes, each (players, scores), for the ratings (ratings.py)."""

    matches: list


class EnvErrors(NamedTuple):
    """Exceptions a rollout worker's envs raised since its last report (each env was restarted)."""

    count: int


class LearnerStats(NamedTuple):
    """A learner's counters (train_step, env_steps) and, after an update, its losses and lag."""

    policy_id: int
    stats: dict


class TimingReport(NamedTuple):
    """Fractions of wall time per phase of one process, and its counts (timing.py)."""

    role: str
    fractions: dict
    counts: dict
    interval: float


class Evaluation(NamedTuple):
    """An evaluator's result for one policy (evaluator.py)."""

    policy_id: int
    result: dict


class Snapshot(NamedTuple):
    """A frozen copy of a policy's weights joined its pool in entry `slot` (self-play)."""

    policy_id: int
    slot: int
    version: int
    env_steps: int


class StateExported(NamedTuple):
    """PBT: the learner wrote its weights and Adam state to its learner_state row."""

    policy_id: int


class StateImported(NamedTuple):
    """PBT: the learner loaded `source`'s exported state."""

    policy_id: int
    source: int


class LearnerStopped(NamedTuple):
    """Under torchrun: the ranks' learners agreed to stop after their last update."""

    policy_id: int


class Fatal(NamedTuple):
    """An error that must stop the run rather than restart the workers; the message is the run's one
    error line."""

    message: str


Report = (
    Episodes
    | Matches
    | EnvErrors
    | LearnerStats
    | TimingReport
    | Evaluation
    | Snapshot
    | StateExported
    | StateImported
    | LearnerStopped
    | Fatal
)


# --- PBT: runner -> learner
class ExportState(NamedTuple):
    """Write your weights and Adam state to your learner_state row."""


class ImportState(NamedTuple):
    """Load `source`'s learner_state row."""

    source: int
