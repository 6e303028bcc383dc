import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import engine_processes, shm_entries  # noqa: E402


@pytest.fixture
def clean_machine():
    """Fails the test if the run leaves a process or a /dev/shm entry behind."""
    before_procs = {p.pid for p in engine_processes()}
    before_shm = shm_entries()
    yield
    deadline = time.time() + 5
    while time.time() < deadline and {p.pid for p in engine_processes()} - before_procs:
        time.sleep(0.2)
    assert not {p.pid for p in engine_processes()} - before_procs, "a child process outlived the run"
    assert not shm_entries() - before_shm, "a shared-memory segment outlived the run"
