"""The messages of ude.proto as numpy: arrays as (dtype, shape, bytes), side-channel values as typed
oneofs.

The generated modules (ude_pb2, ude_pb2_grpc) are built from ude.proto at install (setup.py); a
source checkout that was never installed builds them on first import, here.
"""

from __future__ import annotations

import importlib
import math
import os

import numpy as np

from asyncrl.remote.protoc import PROTO, PROTO_DIR, compile_proto

# dtypes an array on the wire may have: numbers and bools only (an object dtype would need pickle)
WIRE_DTYPES = {
    np.dtype(t).str
    for t in (
        np.bool_,
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
}
MAX_ARRAY_DIMS = 8


class WireError(ValueError):
    """A message that does not decode: the text says what is wrong with it."""


def _generated():
    if _stale():
        compile_proto()
        importlib.invalidate_caches()
    return importlib.import_module("asyncrl.remote.ude_pb2"), importlib.import_module(
        "asyncrl.remote.ude_pb2_grpc"
    )


def _stale() -> bool:
    """The generated modules are missing, or older than ude.proto (a source checkout after a pull
    that changed it)."""
    proto = os.path.join(PROTO_DIR, PROTO)
    generated = [os.path.join(PROTO_DIR, name) for name in ("ude_pb2.py", "ude_pb2_grpc.py")]
    if not all(os.path.exists(path) for path in generated):
        return True
    return os.path.exists(proto) and os.path.getmtime(proto) > min(
        os.path.getmtime(path) for path in generated
    )


pb, pb_grpc = _generated()


def encode(array: np.ndarray, out=None):
    """A numpy array as an Array message (written into `out`, a message field, if given)."""
    # tobytes() writes C order; ascontiguousarray would make a 0-d array 1-d
    array = np.asarray(array)
    message = pb.Array() if out is None else out
    message.dtype = array.dtype.str
    message.shape[:] = array.shape
    message.data = array.tobytes()
    return message


def decode(message, max_bytes: int | None = None) -> np.ndarray:
    """An Array message as a read-only numpy array (a view of its bytes). WireError if it is not a
    valid one."""
    if message.dtype not in WIRE_DTYPES:
        raise WireError(
            f"array dtype {message.dtype!r} is not one of the numeric dtypes allowed on the wire"
        )
    shape = tuple(message.shape)
    if len(shape) > MAX_ARRAY_DIMS or any(d < 0 for d in shape):
        raise WireError(f"array shape {shape} is not a valid shape")
    dtype = np.dtype(message.dtype)
    # a 0-d array: prod(()) is 1
    expected = math.prod(shape) * dtype.itemsize
    if max_bytes is not None and expected > max_bytes:
        raise WireError(f"array of shape {shape} is larger than {max_bytes} bytes")
    if len(message.data) != expected:
        raise WireError(
            f"array of shape {shape} and dtype {message.dtype} needs {expected} bytes, got {len(message.data)}"
        )
    return np.frombuffer(message.data, dtype).reshape(shape)


def encode_value(value, out) -> None:
    """A side-channel value (bool, int, float, str or bytes) into a Value message."""
    if isinstance(value, (bool, np.bool_)):
        out.bool_value = bool(value)
    elif isinstance(value, (int, np.integer)):
        out.int_value = int(value)
    elif isinstance(value, (float, np.floating)):
        out.float_value = float(value)
    elif isinstance(value, str):
        out.str_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    else:
        raise WireError(
            f"side-channel value {value!r} is a {type(value).__name__}; values are bool, int, float, str or bytes"
        )


def decode_value(message):
    kind = message.WhichOneof("kind")
    if kind is None:
        raise WireError("a side-channel value without a value")
    return getattr(message, kind)


def encode_values(values: dict, out) -> None:
    for key, value in values.items():
        encode_value(value, out[str(key)])


def decode_values(messages) -> dict:
    return {key: decode_value(value) for key, value in messages.items()}
