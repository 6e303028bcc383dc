"""The env service on gRPC: its methods, each answered with the status of its error
(refusals.py), and the auth token's check on every call."""

from __future__ import annotations

import hmac

import grpc

from asyncrl.remote.refusals import Refused, status_of
from asyncrl.remote.service import EnvService
from asyncrl.remote.wire import pb

RPCS = {
    "Describe": (pb.DescribeRequest, pb.DescribeReply),
    "Open": (pb.OpenRequest, pb.OpenReply),
    "Reset": (pb.ResetRequest, pb.ResetReply),
    "Step": (pb.StepRequest, pb.StepReply),
    "SideChannel": (pb.SideChannelRequest, pb.SideChannelReply),
    "Close": (pb.CloseRequest, pb.CloseReply),
}


def service_handler(service: EnvService) -> grpc.GenericRpcHandler:
    """The gRPC handler of every RPC of `service`. Requests are parsed here, not by gRPC, so a
    malformed one is an INVALID_ARGUMENT like any other bad request (gRPC's own parser logs a
    traceback per bad message); a Refused becomes its status, anything else INTERNAL."""

    def wrap(method, request_type):
        def handler(raw: bytes, context):
            try:
                return method(request_type.FromString(raw), context)
            except Exception as e:
                context.abort(*status_of(e, request_type))

        return handler

    def wrap_stream(method):
        def handler(raw_requests, context):
            try:
                yield from method(raw_requests, context)
            except Refused as e:
                context.abort(e.code, str(e))

        return handler

    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            wrap(getattr(service, name), request), response_serializer=reply.SerializeToString
        )
        for name, (request, reply) in RPCS.items()
    }
    handlers["StepStream"] = grpc.stream_stream_rpc_method_handler(
        wrap_stream(service.StepStream), response_serializer=pb.StepReply.SerializeToString
    )
    return grpc.method_handlers_generic_handler("asyncrl.remote.EnvServer", handlers)


class TokenCheck(grpc.ServerInterceptor):
    """Every call must carry `authorization: Bearer <token>` (compared in constant time)."""

    def __init__(self, token: str):
        self.expected = f"Bearer {token}".encode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong auth token")

        self.denied = grpc.unary_unary_rpc_method_handler(deny)
        # a handler of the method's own kind
        self.denied_stream = grpc.stream_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        given = dict(handler_call_details.invocation_metadata).get("authorization", "")
        if hmac.compare_digest(given.encode(), self.expected):
            return continuation(handler_call_details)
        return (
            self.denied_stream
            if handler_call_details.method.endswith("/StepStream")
            else self.denied
        )
