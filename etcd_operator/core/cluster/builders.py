"""Pure manifest builders: from the spec (and a member's identity) to Kubernetes objects."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import pod_security
from etcd_operator.core.cluster import certs, naming
from etcd_operator.core.cluster.spec import MANAGED_FLAGS, ClusterSpec

DATA_MOUNT = "/var/lib/etcd"
DATA_DIR = f"{DATA_MOUNT}/data"
STATE_NEW = "new"
STATE_EXISTING = "existing"
# Requests when spec.pod.resources is unset, so a member is Burstable, not BestEffort
# (evicted first under node pressure). No limits: a memory limit risks OOM-killing a member.
DEFAULT_MEMBER_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
# The startup probe's budget (period x failures) also bounds how long a rolled member may take.
STARTUP_PROBE_PERIOD = 5
STARTUP_PROBE_FAILURES = 60
# A joining TLS member's init container (etcd_operator/programs/peer_name.py): waits until
# its peer name resolves to its pod IP.
PEER_NAME_CONTAINER = "peer-name"
PEER_NAME_WAIT_SECONDS = 60


def _annotation_env(name: str, annotation: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}}


def etcd_args(spec: ClusterSpec, cluster: str, namespace: str, member: str, token: str) -> list[str]:
    tls = spec.tls.enabled
    scheme = naming.scheme(tls)
    args = [
        f"--name={member}",
        f"--data-dir={DATA_DIR}",
        # Also on the pod's loopback address: `kubectl port-forward` (kubectl etcd etcdctl)
        # dials localhost inside the pod. Only the pod's own network namespace reaches it, and
        # a TLS member asks for a client certificate there as on the pod IP; the member
        # certificate names 127.0.0.1 (certs.MEMBER_IP_ADDRESSES).
        f"--listen-client-urls={scheme}://$(POD_IP):{naming.CLIENT_PORT},{scheme}://127.0.0.1:{naming.CLIENT_PORT}",
        f"--advertise-client-urls={naming.client_url(cluster, namespace, member, tls)}",
        f"--listen-peer-urls={scheme}://$(POD_IP):{naming.PEER_PORT}",
        f"--initial-advertise-peer-urls={naming.peer_url(cluster, namespace, member, tls)}",
        f"--listen-metrics-urls=http://$(POD_IP):{naming.METRICS_PORT}",
        # Read from pod annotations at every container start, so the operator can narrow
        # them once the member has joined (see ClusterActions.settle_member_pod).
        "--initial-cluster=$(INITIAL_CLUSTER)",
        "--initial-cluster-state=$(INITIAL_CLUSTER_STATE)",
        "--force-new-cluster=$(FORCE_NEW_CLUSTER)",
        f"--initial-cluster-token={token}",
        f"--auto-compaction-mode={spec.etcd.auto_compaction_mode}",
        f"--auto-compaction-retention={spec.etcd.auto_compaction_retention}",
    ]
    optional = {
        "quota-backend-bytes": spec.etcd.quota_backend_bytes,
        "heartbeat-interval": spec.etcd.heartbeat_interval_ms,
        "election-timeout": spec.etcd.election_timeout_ms,
        "snapshot-count": spec.etcd.snapshot_count,
    }
    args += [f"--{flag}={value}" for flag, value in optional.items() if value is not None]
    if tls:
        args += tls_args(spec.tls.peer_common_name)
    args += [f"--{flag}={value}" for flag, value in allowed_extra_args(spec)]
    return args


def tls_args(peer_common_name: str | None = None) -> list[str]:
    """Client and peer TLS from the mounted member Secret, with client certificates required
    on both. etcd reads the certificate files at each handshake, and the CAs at start. With
    `peer_common_name`, the peer port accepts only certificates with that CN (the members'),
    and a member dialling a peer checks the same CN on the peer's certificate."""
    cert = f"{certs.MOUNT_DIR}/{certs.CERT_KEY}"
    key = f"{certs.MOUNT_DIR}/{certs.PRIVATE_KEY_KEY}"
    ca = f"{certs.MOUNT_DIR}/{certs.CA_KEY}"
    return [
        f"--cert-file={cert}",
        f"--key-file={key}",
        f"--trusted-ca-file={ca}",
        "--client-cert-auth=true",
        f"--peer-cert-file={cert}",
        f"--peer-key-file={key}",
        f"--peer-trusted-ca-file={ca}",
        "--peer-client-cert-auth=true",
    ] + ([f"--peer-cert-allowed-cn={peer_common_name}"] if peer_common_name else [])


def allowed_extra_args(spec: ClusterSpec) -> list[tuple[str, str]]:
    """spec.etcd.extraArgs without the flags the operator manages (those are reported)."""
    return [(flag.lstrip("-"), value) for flag, value in spec.etcd.extra_args if flag.lstrip("-") not in MANAGED_FLAGS]


def pod_spec_hash(spec: ClusterSpec) -> str:
    """Changes exactly when a member pod must be recreated to follow the spec."""
    relevant: dict[str, Any] = {
        "image": spec.image,
        # Pull secrets matter only to the next pull: changing them rolls no member.
        "pod": {key: value for key, value in spec.pod.items() if key != "imagePullSecrets"},
        "etcd": [
            spec.etcd.quota_backend_bytes,
            spec.etcd.auto_compaction_mode,
            spec.etcd.auto_compaction_retention,
            spec.etcd.heartbeat_interval_ms,
            spec.etcd.election_timeout_ms,
            spec.etcd.snapshot_count,
            allowed_extra_args(spec),
        ],
    }
    if spec.tls.enabled:
        relevant["tls"] = [spec.tls.issuer, spec.tls.member_secret, list(spec.tls.trusted)]
        if spec.tls.peer_common_name:  # appended only when set: recording it rolls the members
            relevant["tls"].append(spec.tls.peer_common_name)
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def _probe(path: str, period: int, failures: int, initial_delay: int = 0) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": naming.METRICS_PORT},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _default_affinity(cluster: str) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {naming.LABEL_CLUSTER: cluster}},
                    },
                }
            ],
        },
    }


def member_pod(
    spec: ClusterSpec,
    cluster: str,
    namespace: str,
    member: str,
    member_id: int | None,
    initial_cluster: str,
    initial_state: str,
    token: str,
    force_new_cluster: bool = False,
    joining_image: str | None = None,
) -> dict[str, Any]:
    """`joining_image`: the member joins the cluster (a learner's first pod); with TLS its etcd
    starts only once its peer name resolves to its pod IP, or after PEER_NAME_WAIT_SECONDS,
    waited for by an init container of that image (the operator's): see peer_name_container."""
    pod_settings = spec.pod
    labels = {**(pod_settings.get("labels") or {}), **naming.member_labels(cluster, member)}
    annotations = {
        **(pod_settings.get("annotations") or {}),
        naming.ANNOTATION_MEMBER_ID: member_id_text(member_id),
        naming.ANNOTATION_INITIAL_CLUSTER: initial_cluster,
        naming.ANNOTATION_INITIAL_STATE: initial_state,
        naming.ANNOTATION_FORCE_NEW_CLUSTER: "true" if force_new_cluster else "false",
        naming.ANNOTATION_SPEC_HASH: pod_spec_hash(spec),
    }
    if spec.storage.empty_dir:
        empty_dir = {
            k: v
            for k, v in {
                "medium": spec.storage.empty_dir_medium,
                "sizeLimit": spec.storage.empty_dir_size_limit,
            }.items()
            if v
        }
        data_volume = {"name": "data", "emptyDir": empty_dir}
    else:
        data_volume = {"name": "data", "persistentVolumeClaim": {"claimName": naming.pvc_name(member)}}
    container: dict[str, Any] = {
        "name": "etcd",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["etcd"],
        "args": etcd_args(spec, cluster, namespace, member, token),
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            _annotation_env("INITIAL_CLUSTER", naming.ANNOTATION_INITIAL_CLUSTER),
            _annotation_env("INITIAL_CLUSTER_STATE", naming.ANNOTATION_INITIAL_STATE),
            _annotation_env("FORCE_NEW_CLUSTER", naming.ANNOTATION_FORCE_NEW_CLUSTER),
            {"name": "ETCDCTL_API", "value": "3"},
        ],
        "ports": [
            {"name": "client", "containerPort": naming.CLIENT_PORT},
            {"name": "peer", "containerPort": naming.PEER_PORT},
            {"name": "metrics", "containerPort": naming.METRICS_PORT},
        ],
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}]
        + ([{"name": "tls", "mountPath": certs.MOUNT_DIR, "readOnly": True}] if spec.tls.enabled else []),
        "readinessProbe": _probe("/readyz", period=5, failures=3),
        "livenessProbe": _probe("/livez", period=10, failures=8),
        "startupProbe": _probe("/livez", period=STARTUP_PROBE_PERIOD, failures=STARTUP_PROBE_FAILURES),
    }
    container["resources"] = pod_settings.get("resources") or {"requests": dict(DEFAULT_MEMBER_REQUESTS)}
    pod_spec: dict[str, Any] = {
        "hostname": member,
        "subdomain": naming.peer_service(cluster),
        "restartPolicy": "Always",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": pod_settings.get("terminationGracePeriodSeconds", 30),
        "containers": [container],
        "volumes": [data_volume]
        + (
            [
                {
                    "name": "tls",
                    "secret": {
                        "secretName": certs.secret_name(spec, cluster, certs.CertKind.MEMBER),
                        "defaultMode": 0o400,
                        "items": [{"key": k, "path": k} for k in (certs.CERT_KEY, certs.PRIVATE_KEY_KEY, certs.CA_KEY)],
                    },
                }
            ]
            if spec.tls.enabled
            else []
        ),
        "affinity": pod_settings.get("affinity") or _default_affinity(cluster),
    }
    if spec.tls.enabled and joining_image:
        bootstrapping = initial_state == STATE_NEW  # its peers start with it: their names too
        others = tuple(
            url.split("://", 1)[-1].rsplit(":", 1)[0]
            for name, _, url in (entry.partition("=") for entry in initial_cluster.split(",") if "=" in entry)
            if name != member and bootstrapping
        )
        pod_spec["initContainers"] = [
            peer_name_container(cluster, namespace, member, joining_image, container["resources"], others)
        ]
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        if pod_settings.get(key):
            pod_spec[key] = pod_settings[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": member, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": pod_security.restricted(with_pull_secrets(pod_spec, image_pull_secrets(spec))),
    }


def image_pull_secrets(spec: ClusterSpec) -> list[dict[str, str]]:
    """The `imagePullSecrets` of every pod made for the cluster (members, restores,
    verifications), from spec.pod."""
    return [{"name": entry["name"]} for entry in spec.pod.get("imagePullSecrets") or [] if entry.get("name")]


def with_pull_secrets(pod_spec: dict[str, Any], secrets: list[dict[str, str]]) -> dict[str, Any]:
    """`pod_spec` with `secrets` as its imagePullSecrets; unchanged (no key) when there are none."""
    return {**pod_spec, "imagePullSecrets": list(secrets)} if secrets else pod_spec


def peer_name_container(
    cluster: str,
    namespace: str,
    member: str,
    operator_image: str,
    resources: Mapping[str, Any],
    other_peers: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The members a TLS member joins check its peer certificate's names against its address
    by DNS: before its record exists under the peer Service they refuse it, and a joining etcd
    exits (one that restarts on its data retries instead: no wait for it). It also waits for
    the names of `other_peers` (the rest of its initial cluster): members of a bootstrap start
    together, and one that dialled a name before its record existed would refuse that peer's
    certificate while the negative answer is cached. The etcd image has no shell, the
    operator's has Python. The etcd container's resources, so that the pod's requests are
    unchanged and a quota that needs them admits it."""
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PEER_NAME", "value": naming.member_host(cluster, namespace, member)},
        {"name": "PEER_NAME_WAIT_SECONDS", "value": str(PEER_NAME_WAIT_SECONDS)},
    ]
    if other_peers:
        env.append({"name": "OTHER_PEER_NAMES", "value": ",".join(other_peers)})
    return {
        "name": PEER_NAME_CONTAINER,
        "image": operator_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "etcd_operator.programs.peer_name"],
        "env": env,
        "resources": copy.deepcopy(dict(resources)),
    }


def member_id_text(member_id: int | None) -> str:
    """Member IDs are hex, as etcdctl prints them; empty before etcd assigned one."""
    return "" if member_id is None else f"{member_id:x}"


def member_pvc(
    spec: ClusterSpec, cluster: str, namespace: str, member: str, member_id: int | None, initial_cluster: str = ""
) -> dict[str, Any]:
    """`initial_cluster`: the bootstrap's, on a PVC a static bootstrap creates (cluster/bootstrap.py)."""
    annotations = {naming.ANNOTATION_MEMBER_ID: member_id_text(member_id)}
    if initial_cluster:
        annotations[naming.ANNOTATION_INITIAL_CLUSTER] = initial_cluster
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.storage.size}},
    }
    if spec.storage.storage_class:
        pvc_spec["storageClassName"] = spec.storage.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": naming.pvc_name(member),
            "namespace": namespace,
            "labels": naming.member_labels(cluster, member),
            "annotations": annotations,
        },
        "spec": pvc_spec,
    }


def _service_ports() -> list[dict[str, Any]]:
    return [
        {"name": "client", "port": naming.CLIENT_PORT, "targetPort": naming.CLIENT_PORT},
        {"name": "peer", "port": naming.PEER_PORT, "targetPort": naming.PEER_PORT},
    ]


def peer_service(cluster: str, namespace: str) -> dict[str, Any]:
    """Headless, and publishing members before they are ready: a joining learner must
    resolve before it can catch up."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": naming.peer_service(cluster),
            "namespace": namespace,
            "labels": naming.selector_labels(cluster),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": naming.selector_labels(cluster),
            "ports": _service_ports(),
        },
    }


def client_service(cluster: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": naming.client_service(cluster),
            "namespace": namespace,
            "labels": naming.selector_labels(cluster),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": naming.selector_labels(cluster),
            "ports": [{"name": "client", "port": naming.CLIENT_PORT, "targetPort": naming.CLIENT_PORT}],
        },
    }


def disruption_budget(spec: ClusterSpec, cluster: str, namespace: str, voters: int | None = None) -> dict[str, Any]:
    """Voluntary evictions may never take the cluster below quorum. The quorum is that of the
    larger of the current voters and spec.size, so that it holds during a scale-down (more
    voters than the spec) as well as a scale-up; with no member list, spec.size."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": naming.pdb_name(cluster),
            "namespace": namespace,
            "labels": naming.selector_labels(cluster),
        },
        "spec": {
            "minAvailable": naming.quorum(max(spec.size, voters or 0)),
            "selector": {"matchLabels": naming.selector_labels(cluster)},
        },
    }


def owners_without(owners: list[Mapping[str, Any]], cluster_uid: str) -> list[dict[str, Any]] | None:
    """A PVC's owner references less the cluster's (None, in a merge patch, removes the field)."""
    kept = [dict(o) for o in owners if o.get("uid") != cluster_uid]
    return kept or None


def set_aside_pvc_patch(
    cluster: str, cluster_uid: str, owners: list[Mapping[str, Any]], marks: Mapping[str, str]
) -> dict[str, Any]:
    """Takes a member's PVC out of the cluster (no selector labels, no owner reference to the
    cluster) and labels it with `marks`, saying who kept it and why. The PVC and its data stay."""
    labels: dict[str, Any] = {key: None for key in naming.member_labels(cluster, "")}
    labels.update(marks)
    return {"metadata": {"labels": labels, "ownerReferences": owners_without(owners, cluster_uid)}}
