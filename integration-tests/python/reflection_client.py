"""A client that knows nothing but gRPC reflection: it lists the services a
server offers and resolves one method's request and response types.

Usage: reflection_client.py ADDRESS SERVICE METHOD [REQUEST_JSON]
Prints JSON: {"services": [...], "input": "...", "output": "..."}.
With REQUEST_JSON it also calls the (unary) method with that request, built
from the reflected descriptors alone, and adds "response" (the answer as JSON).
"""
import json
import sys

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase


def main() -> None:
    address, service_name, method_name = sys.argv[1:4]
    request_json = sys.argv[4] if len(sys.argv) > 4 else None
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = sorted(database.get_services())
        pool = DescriptorPool(database)
        method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
        answer = {
            "services": services,
            "input": method.input_type.full_name,
            "output": method.output_type.full_name,
        }
        if request_json is not None:
            request_class = message_factory.GetMessageClass(method.input_type)
            response_class = message_factory.GetMessageClass(method.output_type)
            request = json_format.Parse(request_json, request_class())
            call = channel.unary_unary(
                f"/{service_name}/{method_name}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            response = call(request, timeout=120)
            answer["response"] = json_format.MessageToDict(response)
        print(json.dumps(answer))


if __name__ == "__main__":
    main()
