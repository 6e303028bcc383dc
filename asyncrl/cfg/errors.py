"""The errors a user's input can raise, which the command line prints as one line."""


class ConfigError(ValueError):
    """A user error: the CLI prints it as one line and exits with code 2, before any process
    starts."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and what is wrong. (Here, not
    in checkpoint.py, so the command line catches it without importing torch.)"""
