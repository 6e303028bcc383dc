"""The engine's own lines go through Python's logging, logger "asyncrl": to the terminal as `PROCESS: message` (the
runner's process is "asyncrl", a child its title, e.g. asyncrl-rollout-0; a record with a traceback to stderr, the
others to stdout), at --log_level and above, and with
--log_to_file to <experiment>/log.txt with the time and level, from every process of the run. The live progress
line and a command's own output (enjoy's episodes, bench's table) are not log records: they print as they are."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys

from asyncrl.cfg.config import Config

log = logging.getLogger("asyncrl")
# in the experiment folder
LOG_FILE = "log.txt"


class _ProcessPrefix(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        process = multiprocessing.current_process()
        record.process_title = "asyncrl" if process.name == "MainProcess" else process.name
        return super().format(record)


def run_log_file(cfg: Config, writes: bool) -> str | None:
    """The run's log file (<experiment>/log.txt), or None: without --log_to_file, or on a rank that
    writes no files."""
    return os.path.join(cfg.experiment_dir, LOG_FILE) if cfg.log_to_file and writes else None


def setup_logging(level: str = "info", file: str | None = None) -> None:
    """Configure this process's "asyncrl" logger (again: the handlers of an earlier call are
    replaced)."""
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    log.setLevel(level.upper())
    # a user's root logger configuration (in a script calling asyncrl.train) is theirs
    log.propagate = False
    # tracebacks to stderr, as Python's
    for stream, with_traceback in ((sys.stdout, False), (sys.stderr, True)):
        console = logging.StreamHandler(stream)
        console.setFormatter(_ProcessPrefix("%(process_title)s: %(message)s"))
        console.addFilter(lambda record, wanted=with_traceback: bool(record.exc_info) == wanted)
        log.addHandler(console)
    if file is not None:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        # appends: each process's records, each line whole
        to_file = logging.FileHandler(file, encoding="utf-8")
        to_file.setFormatter(
            _ProcessPrefix("%(asctime)s %(levelname)s %(process_title)s: %(message)s")
        )
        log.addHandler(to_file)
