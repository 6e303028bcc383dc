"""Builds ude_pb2.py and ude_pb2_grpc.py from ude.proto with grpcio-tools' protoc. setup.py runs it
at install (it loads this file alone: nothing here imports the package); wire.py runs it on first
import from a source checkout that was never installed."""

import os

PROTO_DIR = os.path.dirname(os.path.abspath(__file__))
PROTO = "ude.proto"


def compile_proto(out_dir: str = PROTO_DIR) -> None:
    import grpc_tools
    from grpc_tools import protoc

    # google/protobuf's own .proto files
    includes = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    status = protoc.main(
        [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{includes}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            os.path.join(PROTO_DIR, PROTO),
        ]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (exit {status})")
    # protoc writes `import ude_pb2` (a top-level name): make it the package's module
    grpc_module = os.path.join(out_dir, "ude_pb2_grpc.py")
    with open(grpc_module) as f:
        text = f.read()
    with open(grpc_module, "w") as f:
        f.write(text.replace("import ude_pb2 as", "from asyncrl.remote import ude_pb2 as"))
