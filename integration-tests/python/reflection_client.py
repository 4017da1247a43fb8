"""A client that knows nothing but gRPC reflection: it lists the services a
server offers and resolves one method's request and response types.

Usage: reflection_client.py ADDRESS SERVICE METHOD
Prints JSON: {"services": [...], "input": "...", "output": "..."}.
"""
import json
import sys

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase


def main() -> None:
    address, service_name, method_name = sys.argv[1:4]
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = sorted(database.get_services())
        pool = DescriptorPool(database)
        method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
        print(json.dumps({
            "services": services,
            "input": method.input_type.full_name,
            "output": method.output_type.full_name,
        }))


if __name__ == "__main__":
    main()
