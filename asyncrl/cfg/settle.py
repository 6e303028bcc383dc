"""Where a run's settings come from, settled in one pipeline. Each stage overrides the ones before
it:

    schema defaults -> env defaults -> tuned -> saved run -> flags -> algo -> rank -> auto

`settle` runs the stages up to the algorithm's: the config a run saves in config.json, and what
`asyncrl enjoy`, `bench` and `tune` start from. The runner adds the last two with `Settled.then`
once it knows the ranks (torchrun), the device and the env. Every setting remembers the stage that
set it last, so that a run's first lines and its config.json say which settings differ from the
defaults and where each came from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from asyncrl.cfg.config import Config, algo_defaults, schema_defaults

# A run saved before these fields existed ran as these values say (its checkpoints hold no returns
# normalizer): resumed, it goes on that way instead of taking today's defaults.
SAVED_BEFORE_DEFAULTS = {
    "normalize_returns": False,
    "normalize_input": False,
    "encoder_conv_architecture": "convnet_simple",
}
# config.json's record of where each setting that differs from the default came from
ORIGINS_KEY = "settings_origins"


@dataclass(frozen=True)
class Settled:
    """A config and, for each setting a stage set, the stage that set it last."""

    config: Config
    origins: dict[str, str]

    @classmethod
    def of(cls, config: Config, stage: str) -> Settled:
        """A config built in code (a benchmark's run, a test's): every setting off its default comes
        from `stage`."""
        return cls(config, dict.fromkeys(differences(config), stage))

    def then(self, stage: str, values: dict) -> Settled:
        """A later stage: `values` on top; the settings it changes are its."""
        changed = {k: v for k, v in values.items() if getattr(self.config, k) != v}
        return Settled(
            dataclasses.replace(self.config, **values),
            {**self.origins, **dict.fromkeys(changed, stage)},
        )

    def changes(self) -> dict[str, list[str]]:
        """Stage -> the settings it left off their defaults, as name=value (config.json's record,
        the first lines)."""
        by_stage: dict[str, list[str]] = {}
        for name in differences(self.config):
            value = getattr(self.config, name)
            by_stage.setdefault(self.origins.get(name, "given"), []).append(f"{name}={value}")
        return by_stage

    def lines(self) -> list[str]:
        """The run's first log lines: one per stage that left a setting off its default."""
        return [f"{stage}: {', '.join(items)}" for stage, items in self.changes().items()]

    def to_json(self) -> dict:
        """config.json: the config's fields, and where the ones off their defaults came from."""
        return {**self.config.to_json(), ORIGINS_KEY: self.changes()}


def differences(config: Config) -> list[str]:
    """The fields whose value is not the schema's default, in the schema's order."""
    defaults = schema_defaults()
    return [name for name, value in config.to_json().items() if value != defaults[name]]


def settle(
    flags: dict,
    env: dict | None = None,
    tuned: dict | None = None,
    saved: dict | None = None,
    world_size: int = 1,
) -> Settled:
    """The config of `flags` (given on the command line, or as keyword arguments) on top of the env
    family's defaults, `asyncrl tune`'s fastest flags and a resumed run's config.json; then the
    settings that follow --algo (ppo's batch is every agent's --rollout steps on all `world_size`
    ranks together) unless a flag set them."""
    values = schema_defaults()
    origins = {}
    # unknown keys (a removed flag, the saved origins) are not settings
    if saved is not None:
        saved = {**{k: v for k, v in SAVED_BEFORE_DEFAULTS.items() if k not in saved}, **saved}
        saved = {k: v for k, v in saved.items() if k in values}
    for stage, layer in (
        ("env defaults", env),
        ("tuned", tuned),
        ("saved run", saved),
        ("flags", flags),
    ):
        values.update(layer or {})
        origins.update(dict.fromkeys(layer or {}, stage))
    algo = {k: v for k, v in algo_defaults(values, world_size).items() if k not in flags}
    return Settled(Config(**values), origins).then("algo", algo)
