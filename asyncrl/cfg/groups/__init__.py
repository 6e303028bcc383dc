"""The config's flag groups: one dataclass each, composed into the one Config (config.py). A
group's docstring is its title in `--help` and in the docs' configuration reference."""
