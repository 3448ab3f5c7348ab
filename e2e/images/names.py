"""The image names the nodes, the product and the tests refer to, fully qualified as the
CRI normalizes them (`busybox:1.36` is looked up as `docker.io/library/busybox:1.36`)."""

from __future__ import annotations

# containerd's sandbox_image on every node.
PAUSE = "registry.k8s.io/pause:3.10"
# etcd_operator/core/cluster/spec.py DEFAULT_REPOSITORY; the tag is `v<version>` (EtcdSpec.image).
ETCD_REPOSITORY = "gcr.io/etcd-development/etcd"
# The local-path helper pod and e2e/tests/test_real_nodes.py use busybox:1.36.
BUSYBOX = "docker.io/library/busybox:1.36"
# The cluster DNS and the volume provisioner, named as upstream publishes them; the tag is the
# version e2e/testbin/<recipe>/go.mod pins (names.coredns(), names.local_path_provisioner()).
COREDNS_REPOSITORY = "registry.k8s.io/coredns/coredns"
LOCAL_PATH_PROVISIONER_REPOSITORY = "docker.io/rancher/local-path-provisioner"
# etcd_operator/__init__.py DEFAULT_OPERATOR_IMAGE, the Helm chart's repository:appVersion.
OPERATOR = "ghcr.io/etcd-operator/etcd-operator:0.1.0"


def etcd(version: str) -> str:
    return f"{ETCD_REPOSITORY}:v{version.removeprefix('v')}"


def coredns(version: str) -> str:
    return f"{COREDNS_REPOSITORY}:v{version.removeprefix('v')}"


def local_path_provisioner(version: str) -> str:
    return f"{LOCAL_PATH_PROVISIONER_REPOSITORY}:v{version.removeprefix('v')}"
