"""Population-based training (Jaderberg et al. 2017), with Sample Factory's flags, run by the
runner.

PBT runs on the population's clock: its mean env steps (the policies' env steps summed, divided by their number).
Each time that clock passes another --pbt_period_env_steps (after --pbt_start_mutation), every policy gets a
decision, however few env steps it made itself (a policy whose episodes are short, as a bad policy's often are,
collects a small share of the steps: on its own steps it would wait many periods for the decision that could save
it). At a decision the policies are ranked by their objective (the mean of --pbt_target_objective over the last
--stats_avg episodes, or of the return for envs that do not report it). The bottom ceil(--pbt_replace_fraction * P)
are "bottom", as many "top". A bottom policy whose objective trails a random top policy's by the gaps copies that
policy (exploit): its learner loads the top learner's weights and Adam state from shared memory, never from disk.
Then every updated policy mutates (explore): each hyperparameter, with probability --pbt_mutation_rate, is
multiplied or divided by U[min, max] (gamma through 1 - gamma, if --pbt_optimize_gamma). Every decision is a line of
<experiment>/pbt.jsonl.
"""

from __future__ import annotations

import json
import math
import os
import random
import time

import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.cfg.groups.population import PER_POLICY_HPARAMS
from asyncrl.core.buffers import SharedBuffers
from asyncrl.core.messages import ExportState, ImportState, StateExported, StateImported
from asyncrl.population.policy_stats import PolicyStats

# gamma only with --pbt_optimize_gamma
MUTATED = tuple(name for name in PER_POLICY_HPARAMS if name != "gamma")
MAX_GAMMA = 0.9999


def objective(policy: PolicyStats, key: str) -> float | None:
    """The mean of the episode stat `key` over the policy's recent episodes (its return if the env
    has no such stat); None before its first episode."""
    window = policy.env_stats.get(key) or policy.episode_returns
    return float(np.mean(window)) if window else None


def mutate(hparams: dict, cfg: Config, rng: random.Random) -> dict:
    """Each hyperparameter, with probability --pbt_mutation_rate, times or divided by U[perturb_min,
    perturb_max]."""
    mutated = dict(hparams)
    names = MUTATED + (("gamma",) if cfg.pbt_optimize_gamma else ())
    for name in names:
        if rng.random() >= cfg.pbt_mutation_rate:
            continue
        factor = rng.uniform(cfg.pbt_perturb_min, cfg.pbt_perturb_max)
        factor = factor if rng.random() < 0.5 else 1 / factor
        # the horizon 1 / (1 - gamma) is what scales
        if name == "gamma":
            mutated[name] = min(MAX_GAMMA, 1 - (1 - hparams[name]) * factor)
        else:
            mutated[name] = hparams[name] * factor
    return mutated


def copy_source(p: int, objectives: list[float], cfg: Config, rng: random.Random) -> int | None:
    """The top policy that bottom policy p copies, or None: p is not in the bottom, or the top one
    is not better by the gaps (--pbt_replace_reward_gap of its magnitude, and
    --pbt_replace_reward_gap_absolute)."""
    # how many policies count as bottom, and as top
    share = math.ceil(cfg.pbt_replace_fraction * len(objectives))
    ranked = sorted(range(len(objectives)), key=lambda policy: objectives[policy])
    if p not in ranked[:share]:
        return None
    source = rng.choice(ranked[-share:])
    gap = objectives[source] - objectives[p]
    if gap > max(
        cfg.pbt_replace_reward_gap * abs(objectives[source]), cfg.pbt_replace_reward_gap_absolute
    ):
        return source
    return None


class PopulationBasedTraining:
    def __init__(
        self, cfg: Config, buffers: SharedBuffers, commands: list, policies: list[PolicyStats]
    ):
        self.cfg = cfg
        self.buffers = buffers
        self.commands = commands
        self.policies = policies
        self.rng = random.Random(cfg.seed)
        # the population's clock (mean env steps) at the next decisions
        self.next_update: float | None = None
        # source -> (policy, its new hparams): awaiting export
        self.waiting: dict[int, list[tuple[int, dict]]] = {}
        # source -> imports of its exported state not yet done (do not overwrite)
        self.importing: dict[int, int] = {}
        self.log_path = os.path.join(cfg.experiment_dir, "pbt.jsonl")
        self.start = time.monotonic()

    def update(self) -> None:
        """Once the population's clock passes the next point, a decision for every policy (see the
        module docstring)."""
        # not every learner has reported yet
        if any(p.launch_env_steps is None for p in self.policies):
            return
        if self.next_update is None:
            self.next_update = self._next_point(
                np.mean([p.launch_env_steps for p in self.policies])
            )
        objectives = [objective(p, self.cfg.pbt_target_objective) for p in self.policies]
        clock = np.mean([p.env_steps for p in self.policies])
        if clock >= self.next_update and None not in objectives:
            for p in self.policies:
                self._update_policy(p, objectives, clock)
            self.next_update = self._next_point(clock)

    def _next_point(self, env_steps: float) -> float:
        start = self.cfg.pbt_start_mutation
        period = self.cfg.pbt_period_env_steps
        return start if env_steps < start else start + ((env_steps - start) // period + 1) * period

    def _update_policy(self, policy: PolicyStats, objectives: list[float], clock: float) -> None:
        p = policy.policy_id
        before = self.buffers.hparams(p)
        source = copy_source(p, objectives, self.cfg, self.rng)
        after = mutate(
            self.buffers.hparams(source) if source is not None else before, self.cfg, self.rng
        )
        if source is None:
            self.buffers.set_hparams(p, after)
        # the copy and the new hyperparameters take effect once the source's learner has exported
        # its state
        else:
            if source not in self.waiting and not self.importing.get(source):
                self.commands[source].put(ExportState())
            self.waiting.setdefault(source, []).append((p, after))
        self._log(
            {
                "time_s": round(time.monotonic() - self.start, 3),
                "policy": p,
                "env_steps": policy.env_steps,
                "population_env_steps": round(float(clock)),
                "objectives": objectives,
                "copied_from": source,
                "hparams_before": before,
                "hparams_after": after,
            }
        )

    def exported(self, report: StateExported) -> None:
        """The policies waiting for that source's state load it, with their new hparams; their
        episode windows restart, so that their next ranking judges the copied weights."""
        source = report.policy_id
        for p, hparams in self.waiting.pop(source, []):
            self.buffers.set_hparams(p, hparams)
            self.commands[p].put(ImportState(source))
            self.importing[source] = self.importing.get(source, 0) + 1
            self.policies[p].clear_episodes()

    def imported(self, report: StateImported) -> None:
        """Once nobody reads the source's exported state, a copy that was decided meanwhile asks for
        a fresh export."""
        source = report.source
        self.importing[source] -= 1
        if self.importing[source] == 0 and source in self.waiting:
            self.commands[source].put(ExportState())

    def restart(self, commands: list) -> None:
        """The learners were restarted with new queues: copies in flight are dropped (the next
        update decides anew)."""
        self.commands = commands
        self.waiting = {}
        self.importing = {}

    def _log(self, row: dict) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps(row) + "\n")
