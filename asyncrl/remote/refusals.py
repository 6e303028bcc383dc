"""What the env service refuses, and the gRPC status each error is answered with."""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError


class Refused(Exception):
    """A request the server will not carry out: answered with this gRPC status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def status_of(error: Exception, request_type) -> tuple[grpc.StatusCode, str]:
    """The status a request that raised `error` is answered with: a malformed request is an
    INVALID_ARGUMENT, a Refused its own status, anything else (a bug or an env's error: the client
    hears of it, the server serves on) INTERNAL."""
    if isinstance(error, DecodeError):
        return grpc.StatusCode.INVALID_ARGUMENT, f"malformed {request_type.__name__}"
    if isinstance(error, Refused):
        return error.code, str(error)
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"
