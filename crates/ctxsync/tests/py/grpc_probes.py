"""Asks a ctxsync agent listener what generic gRPC tooling asks, with grpcio's own
health and reflection clients and no token, and prints the answers as one JSON object.

Usage: grpc_probes.py HOST:PORT
"""

import json
import sys

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

AGENT = "ctxsync.agent.v1.Agent"
TIMEOUT = 10


def health(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    answers = {}
    for service in ["", AGENT, "no.such.Service"]:
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
            answers[service] = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.RpcError as error:
            answers[service] = error.code().name
    return answers


def list_services(channel, method):
    """Lists services over the reflection stream at `method`; v1 and v1alpha share their
    messages on the wire, so the v1alpha classes serve both."""
    call = channel.stream_stream(
        method,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    replies = list(call(iter([request]), timeout=TIMEOUT))
    return sorted(s.name for r in replies for s in r.list_services_response.service)


def describe_agent(channel):
    """What a reflection client builds from the server's descriptors alone."""
    database = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(database)
    service = pool.FindServiceByName(AGENT)
    push = service.FindMethodByName("PushContextState")
    return {
        "methods": sorted(m.name for m in service.methods),
        "push_input": push.input_type.full_name,
        "push_input_fields": sorted(f.name for f in push.input_type.fields),
        "file": service.file.name,
    }


def unauthenticated_call(channel):
    """An agent RPC without a token, as a generic client would send it."""
    call = channel.unary_unary(
        f"/{AGENT}/UpdateStartup",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    try:
        call(b"", timeout=TIMEOUT)
        return "OK"
    except grpc.RpcError as error:
        return error.code().name


def main():
    target = sys.argv[1]
    with grpc.insecure_channel(target) as channel:
        out = {
            "health": health(channel),
            "services_v1": list_services(
                channel, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
            ),
            "services_v1alpha": list_services(
                channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
            ),
            "agent": describe_agent(channel),
            "unauthenticated": unauthenticated_call(channel),
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
