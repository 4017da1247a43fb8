"""Kubernetes manifests as the checks of deploy/ and the chart read them:
which objects are built-in kinds (validated with kubernetes-validate
against the Kubernetes API's schemas, unknown fields refused as `kubectl
apply` refuses them), which are Karpenter's (validated by `karpctl
validate`), and which are other custom resources neither knows."""

import os
import subprocess
import sys
import tempfile

import yaml

KARPENTER_GROUPS = {"karpenter.sh", "karpenter.k8s.aws"}


def group_of(api_version):
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def is_builtin(group):
    # The core group, the unqualified groups (apps, batch, policy, ...) and
    # the *.k8s.io groups are served by kube-apiserver itself.
    return group == "" or "." not in group or group.endswith(".k8s.io")


def load(path):
    """The documents of a YAML stream, empty ones left out."""
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def split(docs):
    """(built-in, Karpenter's, other custom resources) of `docs`."""
    builtin, karpenter, other = [], [], []
    for doc in docs:
        group = group_of(doc.get("apiVersion", ""))
        if group in KARPENTER_GROUPS:
            karpenter.append(doc)
        elif is_builtin(group):
            builtin.append(doc)
        else:
            other.append(doc)
    return builtin, karpenter, other


def describe(doc):
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind', '?')} {meta.get('name', '?')} ({doc.get('apiVersion', '?')})"


def latest_kubernetes_version():
    import kubernetes_validate.utils as utils
    return utils.latest_version()


def validate_builtin(docs, version=None):
    """kubernetes-validate's complaints about `docs` (empty when valid). A
    kind it has no schema for is a complaint too: for a built-in kind it
    means a wrong or removed apiVersion."""
    if not docs:
        return ""
    version = version or latest_kubernetes_version()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)
        path = f.name
    try:
        out = subprocess.run(
            [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version, path],
            capture_output=True, text=True)
        problems = (out.stdout + out.stderr).strip()
        if out.returncode != 0 and not problems:
            problems = f"kubernetes-validate exited {out.returncode}"
        return problems
    finally:
        os.unlink(path)
