"""The official Python `kubernetes` client against local-apiserver.

Usage: kube_client.py KUBECONFIG

Lists, watches, creates seed 001's deployment (`cpu: 1`) and reads it back
into the client's typed models, scales it through the scale subresource,
evicts a pod, and creates and lists custom objects (a NodePool). Prints one
`ok <step>` line per step; any failure raises.
"""

import sys
import threading

from kubernetes import client, config, watch
from kubernetes.dynamic import DynamicClient

NAMESPACE = "default"


def seed_001_deployment():
    labels = {"app.kubernetes.io/name": "app"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "alpine:latest",
                            "command": ["sh", "-c", "sleep infinity"],
                            "resources": {"requests": {"cpu": 1, "memory": "2048Mi"}},
                        }
                    ]
                },
            },
        },
    }


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    apps = client.AppsV1Api()
    custom = client.CustomObjectsApi()

    namespaces = [n.metadata.name for n in core.list_namespace().items]
    assert NAMESPACE in namespaces, namespaces
    print("ok list")

    # A watch sees a config map created after it started.
    events = []
    started = threading.Event()

    def watching():
        w = watch.Watch()
        started.set()
        for event in w.stream(core.list_namespaced_config_map, NAMESPACE, timeout_seconds=10):
            events.append((event["type"], event["object"].metadata.name))
            if event["object"].metadata.name == "watched":
                w.stop()

    thread = threading.Thread(target=watching)
    thread.start()
    started.wait()
    core.create_namespaced_config_map(
        NAMESPACE, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="watched"), data={"a": "1"})
    )
    thread.join(timeout=15)
    assert ("ADDED", "watched") in events, events
    print("ok watch")

    # Seed 001 as its YAML has it (`cpu: 1`, an integer): the typed API
    # refuses that body client-side, the dynamic client sends it as written.
    dynamic = DynamicClient(client.ApiClient())
    deployments = dynamic.resources.get(api_version="apps/v1", kind="Deployment")
    deployments.create(body=seed_001_deployment(), namespace=NAMESPACE)
    deployment = apps.read_namespaced_deployment("app", NAMESPACE)
    requests = deployment.spec.template.spec.containers[0].resources.requests
    assert requests == {"cpu": "1", "memory": "2Gi"}, requests
    assert deployment.spec.strategy.type == "RollingUpdate", deployment.spec.strategy
    assert deployment.metadata.creation_timestamp is not None
    print("ok create")

    apps.patch_namespaced_deployment_scale("app", NAMESPACE, {"spec": {"replicas": 3}})
    scale = apps.read_namespaced_deployment_scale("app", NAMESPACE)
    assert scale.spec.replicas == 3, scale
    assert apps.read_namespaced_deployment("app", NAMESPACE).spec.replicas == 3
    print("ok scale")

    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="evictee", labels={"app": "evictee"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="pause:3.7")]),
    )
    core.create_namespaced_pod(NAMESPACE, pod)
    read = core.read_namespaced_pod("evictee", NAMESPACE)
    assert read.spec.dns_policy == "ClusterFirst", read.spec
    core.create_namespaced_pod_eviction(
        "evictee",
        NAMESPACE,
        client.V1Eviction(metadata=client.V1ObjectMeta(name="evictee", namespace=NAMESPACE)),
    )
    remaining = [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items]
    gone = "evictee" not in remaining
    terminating = (
        not gone and core.read_namespaced_pod("evictee", NAMESPACE).metadata.deletion_timestamp is not None
    )
    assert gone or terminating, remaining
    print("ok evict")

    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                    ],
                }
            },
            "limits": {"cpu": 1000},
        },
    }
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool)
    listed = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodepools")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["default"], listed
    got = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default")
    assert got["spec"]["disruption"]["consolidateAfter"] == "0s", got["spec"]
    custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default", {"spec": {"weight": 10}})
    got = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "default")
    assert got["spec"]["weight"] == 10, got["spec"]
    print("ok custom objects")


if __name__ == "__main__":
    main(sys.argv[1])
