"""A Python gRPC client of the scheduler, generated from the proto files.

Usage: solve_client.py STUBS_DIR ADDRESS
Prints the SolveResponse as JSON (protobuf's json_format).
"""
import sys

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from karpenter.scheduler.v1 import cluster_pb2, scheduler_pb2, scheduler_pb2_grpc  # noqa: E402
from karpenter.types.v1 import types_pb2  # noqa: E402


def main() -> None:
    address = sys.argv[2]
    instance_type = types_pb2.InstanceType(
        name="m5.large",
        requirements=[types_pb2.Requirement(key="kubernetes.io/arch", operator=types_pb2.OPERATOR_IN, values=["amd64"])],
        offerings=[
            types_pb2.Offering(zone="us-west-2a", capacity_type="spot", price=0.035, available=True),
            types_pb2.Offering(zone="us-west-2a", capacity_type="on-demand", price=0.096, available=True),
        ],
        capacity=types_pb2.ResourceList(quantities={"cpu": 2000, "memory": 8 << 30, "pods": 29}),
    )
    pods = [
        cluster_pb2.Pod(
            namespace="default",
            name=f"app-{i}",
            containers=[cluster_pb2.Container(name="app", requests=types_pb2.ResourceList(quantities={"cpu": 500}))],
        )
        for i in range(3)
    ]
    request = scheduler_pb2.SolveRequest(
        cluster=cluster_pb2.ClusterSnapshot(
            pending_pods=pods,
            node_pools=[cluster_pb2.NodePool(name="default", ready=True)],
            instance_type_catalogs=[cluster_pb2.InstanceTypeCatalog(name="default", instance_types=[instance_type])],
        )
    )
    with grpc.insecure_channel(address) as channel:
        response = scheduler_pb2_grpc.SchedulerStub(channel).Solve(request, timeout=30)
    print(json_format.MessageToJson(response, preserving_proto_field_name=True))


if __name__ == "__main__":
    main()
