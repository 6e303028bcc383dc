"""The one typed config of a run: the flag groups of cfg/groups composed into Config, whose
fields are the flags (`--num_workers 4` sets `cfg.num_workers`). Names follow Sample Factory's
where the concept is the same. Its checks are in checks.py, its command line in parsing.py, where
its values come from in settle.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.groups.evaluation import EvaluationFlags
from asyncrl.cfg.groups.learning import LearningFlags
from asyncrl.cfg.groups.model import ModelFlags
from asyncrl.cfg.groups.output import OutputFlags
from asyncrl.cfg.groups.population import PER_POLICY_HPARAMS, PopulationFlags, SelfPlayFlags
from asyncrl.cfg.groups.remote import RemoteFlags
from asyncrl.cfg.groups.run import SYNC_ALGOS, AlgorithmFlags, RunFlags
from asyncrl.cfg.groups.sampling import SamplingFlags


# A dataclass takes its bases' fields from the last base to the first: the groups are listed here
# in reverse, so that the fields stand in the order --help, config.json and the docs show them.
@dataclass
class Config(
    PopulationFlags,
    SelfPlayFlags,
    EvaluationFlags,
    OutputFlags,
    RemoteFlags,
    ModelFlags,
    LearningFlags,
    SamplingFlags,
    AlgorithmFlags,
    RunFlags,
):
    """Every setting of a run, each a flag of `asyncrl train`; `cfg.x` reads flag --x."""

    @property
    def bptt_len(self) -> int:
        """Steps of backpropagation through time: --recurrence, or what -1 stands for."""
        if self.recurrence == -1:
            return self.rollout if self.use_rnn else 1
        return self.recurrence

    def policy_hparams(self, policy_id: int) -> dict:
        """The starting values of a policy's own hyperparameters (PER_POLICY_HPARAMS): the flags,
        then --policy_overrides."""
        return {
            **{name: float(getattr(self, name)) for name in PER_POLICY_HPARAMS},
            **self.policy_overrides.get(str(policy_id), {}),
        }

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# the flag groups in the order of their fields: Config's bases, first to last
GROUPS = tuple(reversed(Config.__bases__))


def group_title(group: type) -> str:
    """A flag group's title: its docstring."""
    return group.__doc__.strip()


def default_value(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def schema_defaults() -> dict:
    """Every field's default, by name."""
    return {f.name: default_value(f) for f in dataclasses.fields(Config)}


def experiment_dir_of(given: dict) -> str:
    """<train_dir>/<experiment> for the flags given (the defaults where not given)."""
    return os.path.join(
        given.get("train_dir", Config.train_dir), given.get("experiment", Config.experiment)
    )


def read_saved_config(experiment_dir: str) -> dict | None:
    """The config.json a run left in experiment_dir, or None if there is none; ConfigError if it is
    unreadable."""
    path = os.path.join(experiment_dir, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"cannot read {path} ({e}); fix or delete it, or use --restart_behavior restart"
        ) from None


def algo_defaults(values: dict, world_size: int = 1) -> dict:
    """Fields whose default follows --algo: ppo and ver learn on-policy with GAE, and ppo's batch
    is every agent's --rollout steps (agents per env: 1 until the env says otherwise, which the
    runner then checks). --worker_inference (an env's default) gives way where it cannot run: with
    ppo or ver, --deterministic, or a --policy_workers_per_policy count."""
    defaults = {}
    policy_workers_given = values["policy_workers_per_policy"] != -1
    if values["algo"] in SYNC_ALGOS or values["deterministic"] or policy_workers_given:
        defaults["worker_inference"] = False
    if values["algo"] not in SYNC_ALGOS:
        return defaults
    defaults["with_vtrace"] = False
    # under torchrun --batch_size is the batch of all ranks together
    if values["algo"] == "ppo":
        defaults["batch_size"] = (
            values["num_workers"]
            * values["num_envs_per_worker"]
            * max(1, values["agents_per_env"])
            * values["rollout"]
            * world_size
        )
    return defaults
