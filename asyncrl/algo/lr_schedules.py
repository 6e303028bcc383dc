"""How the learner's learning rate moves over a run (--lr_schedule), chosen once per learner.

Each schedule sets the learner's optimizer's rate for a batch's first step from the policy's own
--learning_rate (PBT may change it) and its env steps, and may change it again after each minibatch
or epoch from the KL between the policy that acted and the one being trained. The KL-adaptive ones
are Sample Factory's (after rl_games): they keep the update's KL near --lr_schedule_kl_threshold
instead of following a fixed decay.
"""

from __future__ import annotations

from asyncrl.cfg.config import Config

# the KL-adaptive rule's band around the threshold, and its step (Sample Factory's and rl_games'
# values)
KL_BAND = 2.0
LR_STEP = 1.5


def kl_adapted(lr: float, kl: float, threshold: float, lowest: float, highest: float) -> float:
    """The next learning rate: divided by LR_STEP when the KL is above KL_BAND x threshold,
    multiplied when it is below threshold / KL_BAND, kept within [lowest, highest]."""
    if kl > KL_BAND * threshold:
        lr = lr / LR_STEP
    elif kl < threshold / KL_BAND:
        lr = lr * LR_STEP
    return min(max(lr, lowest), highest)


class Constant:
    """The policy's --learning_rate throughout."""

    def __init__(self, cfg: Config, optimizer, collective):
        self.cfg = cfg
        self.optimizer = optimizer
        self.collective = collective

    @property
    def rate(self) -> float:
        """The rate the optimizer's next step takes."""
        return self.optimizer.param_groups[0]["lr"]

    def _set(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def batch_start(self, learning_rate: float, env_steps: int) -> None:
        self._set(learning_rate)

    def after_minibatch(self, stats: dict) -> None:
        """After a minibatch's step, from its stats (an empty minibatch's have no KL)."""

    def after_epoch(self) -> None:
        pass

    def state(self) -> list[float]:
        """What a checkpoint keeps (and DD-PPO's ranks take from rank 0): the adapted rate and the
        --learning_rate it started from; zeros for a schedule that keeps none."""
        return [0.0, 0.0]

    def load_state(self, values: list[float]) -> None:
        pass


class LinearDecay(Constant):
    """--learning_rate decaying linearly to 0 at --train_for_env_steps."""

    def batch_start(self, learning_rate: float, env_steps: int) -> None:
        self._set(learning_rate * max(0.0, 1.0 - env_steps / self.cfg.train_for_env_steps))


class KlAdaptive(Constant):
    """Starts at --learning_rate and moves by kl_adapted after every minibatch (from its KL) or
    every epoch (from the mean of its minibatches' KLs). Each KL is averaged over DD-PPO's ranks, so
    the rate stays the same on every rank. A new --learning_rate from PBT restarts it there."""

    def __init__(self, cfg: Config, optimizer, collective, per_minibatch: bool):
        super().__init__(cfg, optimizer, collective)
        self.per_minibatch = per_minibatch
        # the adapted rate
        self.lr = 0.0
        # the --learning_rate it started from (0 until the first batch: rates are positive)
        self.base = 0.0
        self.epoch_kls: list[float] = []

    def batch_start(self, learning_rate: float, env_steps: int) -> None:
        if learning_rate != self.base:
            self.lr = self.base = learning_rate
        self._set(self.lr)

    def after_minibatch(self, stats: dict) -> None:
        kl = self.collective.mean_of_present(stats.get("kl_divergence"))
        # every rank's minibatch was empty
        if kl is None:
            return
        if self.per_minibatch:
            self._adapt(kl)
        else:
            self.epoch_kls.append(kl)

    def after_epoch(self) -> None:
        # (none kept per minibatch)
        if self.epoch_kls:
            kl = sum(self.epoch_kls) / len(self.epoch_kls)
            self.epoch_kls = []
            self._adapt(kl)

    def _adapt(self, kl: float) -> None:
        cfg = self.cfg
        self.lr = kl_adapted(
            self.lr, kl, cfg.lr_schedule_kl_threshold, cfg.lr_adaptive_min, cfg.lr_adaptive_max
        )
        self._set(self.lr)

    def state(self) -> list[float]:
        return [self.lr, self.base]

    def load_state(self, values: list[float]) -> None:
        self.lr, self.base = (float(v) for v in values)


def lr_schedule(cfg: Config, optimizer, collective) -> Constant:
    """The learner's schedule for `optimizer`'s rate; `collective` averages KLs over DD-PPO's
    ranks."""
    if cfg.lr_schedule == "linear_decay":
        return LinearDecay(cfg, optimizer, collective)
    if cfg.lr_schedule.startswith("kl_adaptive"):
        return KlAdaptive(
            cfg, optimizer, collective, per_minibatch=cfg.lr_schedule == "kl_adaptive_minibatch"
        )
    return Constant(cfg, optimizer, collective)
