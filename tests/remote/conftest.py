"""The remote tests' fixtures."""

import os

import pytest
from env_servers import SERVER_LOGS


@pytest.fixture(autouse=True)
def server_logs_are_removed():
    """The log of every server a test started goes with the test."""
    yield
    while SERVER_LOGS:
        os.unlink(SERVER_LOGS.pop())
