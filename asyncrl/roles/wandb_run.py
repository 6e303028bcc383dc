"""--with_wandb True: the run in Weights & Biases (wandb), beside TensorBoard: the same scalars, the config, and the
replay videos `asyncrl enjoy --save_video` writes. Flags as Sample Factory names them: --wandb_user, --wandb_project,
--wandb_group, --wandb_job_type, --wandb_tags.

A run's wandb id is kept in <experiment>/wandb_id, so a resumed run (and enjoy's video) goes on in
the same wandb run. Each policy's scalars are logged under policy_<p>/ against its own env steps
(policy_<p>/env_steps). WANDB_MODE=offline keeps everything on disk, under <experiment>/wandb/
(`wandb sync` uploads it later).
"""

from __future__ import annotations

import os
import uuid

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.extras import require


def require_wandb() -> None:
    require("wandb", "--with_wandb True")


def _wandb():
    require_wandb()
    # the wandb extra's, checked above
    import wandb

    return wandb


def run_id(experiment_dir: str) -> str:
    """The experiment's wandb run id: made at its first launch, read back at every later one."""
    path = os.path.join(experiment_dir, "wandb_id")
    if not os.path.isfile(path):
        with open(path, "w") as f:
            f.write(uuid.uuid4().hex[:16])
    with open(path) as f:
        return f.read().strip()


class WandbRun:
    """One experiment's wandb run, started (or resumed) in the main process. ConfigError, one line,
    if wandb is not installed or cannot start (no API key outside offline mode, no network)."""

    def __init__(self, cfg: Config, policies: int):
        wandb = _wandb()
        try:
            self.run = wandb.init(
                project=cfg.wandb_project,
                entity=cfg.wandb_user,
                group=cfg.wandb_group,
                job_type=cfg.wandb_job_type,
                tags=cfg.wandb_tags,
                name=cfg.experiment,
                id=run_id(cfg.experiment_dir),
                resume="allow",
                config=cfg.to_json(),
                dir=cfg.experiment_dir,
            )
        # wandb's errors for a missing key, a bad entity or no network
        except Exception as e:
            raise ConfigError(
                f"--with_wandb True: wandb could not start ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200] if str(e) else 'no message'}); `wandb login`, or "
                f"WANDB_MODE=offline to keep the run on disk"
            ) from None
        for p in range(policies):
            self.run.define_metric(f"policy_{p}/env_steps")
            self.run.define_metric(f"policy_{p}/*", step_metric=f"policy_{p}/env_steps")

    def log(self, policy_id: int, env_steps: int, scalars: dict) -> None:
        self.run.log(
            {
                f"policy_{policy_id}/env_steps": env_steps,
                **{f"policy_{policy_id}/{key}": value for key, value in scalars.items()},
            }
        )

    def log_video(self, policy_id: int, path: str, env_steps: int | None) -> None:
        wandb = _wandb()
        self.run.log(
            {
                f"policy_{policy_id}/replay": wandb.Video(
                    path, format=os.path.splitext(path)[1][1:]
                ),
                **({f"policy_{policy_id}/env_steps": env_steps} if env_steps is not None else {}),
            }
        )

    def finish(self) -> None:
        self.run.finish()
