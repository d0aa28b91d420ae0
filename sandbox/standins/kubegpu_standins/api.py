# SPDX-License-Identifier: GPL-3.0-or-later
"""The kubelet's device plugin API v1beta1, as protobuf descriptors built in code, and gRPC glue without generated code.

Source of every name, number and type below: k8s.io/kubelet v0.36.3 ``pkg/apis/deviceplugin/v1beta1/api.proto`` and
``constants.go`` (read from the Go module cache; tests/sandbox/test_standin_deviceplugin.py compares these descriptors
with that file when it is there). Package ``v1beta1``, so the services are ``v1beta1.Registration`` and
``v1beta1.DevicePlugin`` and a method's path is ``/v1beta1.DevicePlugin/Allocate``.

Why descriptors in code and not a .proto compiled with grpcio-tools: no build step and no generated module to cache
or to keep in step with the protobuf runtime (generated code pins the protobuf version that made it); the API is
small and frozen (v1beta1 since Kubernetes 1.10), and this file is the one place its facts are written.
"""

from __future__ import annotations

import os
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# constants.go
VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH + "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _INT64, _INT32, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_INT64, _F.TYPE_INT32, _F.TYPE_MESSAGE
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
MAP = "map"

# message -> [(field, number, type or message name or MAP, repeated)], in api.proto's order
MESSAGES = {
    "DevicePluginOptions": [("pre_start_required", 1, _BOOL, False),
                            ("get_preferred_allocation_available", 2, _BOOL, False)],
    "RegisterRequest": [("version", 1, _STRING, False), ("endpoint", 2, _STRING, False),
                        ("resource_name", 3, _STRING, False), ("options", 4, "DevicePluginOptions", False)],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, "Device", True)],
    "TopologyInfo": [("nodes", 1, "NUMANode", True)],
    "NUMANode": [("ID", 1, _INT64, False)],
    "Device": [("ID", 1, _STRING, False), ("health", 2, _STRING, False), ("topology", 3, "TopologyInfo", False)],
    "PreStartContainerRequest": [("devices_ids", 1, _STRING, True)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1, "ContainerPreferredAllocationRequest", True)],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, _STRING, True),
                                            ("must_include_deviceIDs", 2, _STRING, True),
                                            ("allocation_size", 3, _INT32, False)],
    "PreferredAllocationResponse": [("container_responses", 1, "ContainerPreferredAllocationResponse", True)],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, _STRING, True)],
    "AllocateRequest": [("container_requests", 1, "ContainerAllocateRequest", True)],
    "ContainerAllocateRequest": [("devices_ids", 1, _STRING, True)],
    "CDIDevice": [("name", 1, _STRING, False)],
    "AllocateResponse": [("container_responses", 1, "ContainerAllocateResponse", True)],
    "ContainerAllocateResponse": [("envs", 1, MAP, False), ("mounts", 2, "Mount", True),
                                  ("devices", 3, "DeviceSpec", True), ("annotations", 4, MAP, False),
                                  ("cdi_devices", 5, "CDIDevice", True)],
    "Mount": [("container_path", 1, _STRING, False), ("host_path", 2, _STRING, False),
              ("read_only", 3, _BOOL, False)],
    "DeviceSpec": [("container_path", 1, _STRING, False), ("host_path", 2, _STRING, False),
                   ("permissions", 3, _STRING, False)],
}

# service -> {method: (request, response, server streaming)}
SERVICES = {
    "Registration": {"Register": ("RegisterRequest", "Empty", False)},
    "DevicePlugin": {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": ("PreferredAllocationRequest", "PreferredAllocationResponse", False),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    },
}


def _map_entry_name(field):
    """protoc's name for a map field's entry message: ``envs`` -> ``EnvsEntry``."""
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def _file_descriptor():
    fd = descriptor_pb2.FileDescriptorProto(name="kubegpu/standins/deviceplugin/v1beta1/api.proto",
                                            package=VERSION, syntax="proto3")
    for name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            if kind == MAP:
                entry = msg.nested_type.add(name=_map_entry_name(field))
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_STRING, label=_ONE, json_name="key")
                entry.field.add(name="value", number=2, type=_STRING, label=_ONE, json_name="value")
                msg.field.add(name=field, number=number, type=_MESSAGE, label=_MANY,
                              type_name=".%s.%s.%s" % (VERSION, name, entry.name))
            elif isinstance(kind, str):
                msg.field.add(name=field, number=number, type=_MESSAGE, label=_MANY if repeated else _ONE,
                              type_name=".%s.%s" % (VERSION, kind))
            else:
                msg.field.add(name=field, number=number, type=kind, label=_MANY if repeated else _ONE)
    for service, methods in SERVICES.items():
        svc = fd.service.add(name=service)
        for method, (request, response, streaming) in methods.items():
            svc.method.add(name=method, input_type=".%s.%s" % (VERSION, request),
                           output_type=".%s.%s" % (VERSION, response), server_streaming=streaming)
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
FILE = _POOL.FindFileByName("kubegpu/standins/deviceplugin/v1beta1/api.proto")


class _Messages:
    """Attribute access to the message classes: ``pb.AllocateResponse(...)``."""

    def __init__(self):
        for name in MESSAGES:
            setattr(self, name, message_factory.GetMessageClass(_POOL.FindMessageTypeByName("%s.%s" % (VERSION, name))))


pb = _Messages()


def method_path(service, method):
    return "/%s.%s/%s" % (VERSION, service, method)


def generic_handler(service, implementation):
    """A gRPC handler serving ``service`` from ``implementation``'s methods of the same names (``fn(request,
    context)``; a streaming one yields its responses)."""
    handlers = {}
    for method, (request, response, streaming) in SERVICES[service].items():
        make = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
        handlers[method] = make(getattr(implementation, method),
                                request_deserializer=getattr(pb, request).FromString,
                                response_serializer=getattr(pb, response).SerializeToString)
    return grpc.method_handlers_generic_handler("%s.%s" % (VERSION, service), handlers)


class Stub:
    """A client of ``service`` on a channel: ``Stub(channel, "DevicePlugin").Allocate(request, timeout=5)``."""

    def __init__(self, channel, service):
        for method, (request, response, streaming) in SERVICES[service].items():
            make = channel.unary_stream if streaming else channel.unary_unary
            setattr(self, method, make(method_path(service, method),
                                       request_serializer=getattr(pb, request).SerializeToString,
                                       response_deserializer=getattr(pb, response).FromString))


def unix_target(path):
    """gRPC's address of a Unix socket (an absolute path)."""
    return "unix://" + path


DIAL_TIMEOUT_S = 5.0


def serve_device_plugin(socket, servicer, workers):
    """A started gRPC server of the DevicePlugin service on the Unix socket ``socket`` (an old socket file goes first,
    as the kubelet's plugins remove theirs)."""
    try:
        os.unlink(socket)
    except FileNotFoundError:
        pass
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    server.add_generic_rpc_handlers((generic_handler("DevicePlugin", servicer),))
    server.add_insecure_port(unix_target(socket))
    server.start()
    return server


def register(kubelet_socket, socket, resource, options):
    """Register the plugin serving on ``socket`` for ``resource`` with the kubelet's Registration service (api v1beta1:
    the endpoint is the socket's name in the kubelet's device plugin directory)."""
    with grpc.insecure_channel(unix_target(kubelet_socket)) as channel:
        grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_S)
        Stub(channel, "Registration").Register(pb.RegisterRequest(
            version=VERSION, endpoint=os.path.basename(socket), resource_name=resource, options=options),
            timeout=DIAL_TIMEOUT_S)
