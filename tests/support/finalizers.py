"""Clean-up of test debris: finalizers no operator will remove any more."""

from __future__ import annotations


def release_finalizers(kube_api, namespace: str) -> None:
    """The test's operator has stopped; without this, the operator's finalizers would keep
    the namespace (and the etcd processes of its pods) alive for good."""
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_api)
    for plural in ("etcdclusters", "etcdbackups", "etcdrestores"):
        try:
            items = custom.list_namespaced_custom_object("etcd.operator.dev", "v1alpha1", namespace, plural)["items"]
        except client.ApiException:
            continue
        for item in items:
            if item["metadata"].get("finalizers"):
                try:
                    custom.patch_namespaced_custom_object(
                        "etcd.operator.dev",
                        "v1alpha1",
                        namespace,
                        plural,
                        item["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
                except client.ApiException:
                    pass
