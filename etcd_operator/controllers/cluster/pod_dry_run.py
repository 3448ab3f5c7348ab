"""Asks the API server whether it accepts a member pod, storing nothing (server-side dry
run, `dryRun=All`: admission plugins, quotas and validation all run), and which spec.pod
settings it refuses. I/O: the Kubernetes client and the pod builder are injected; what to
ask and what to do with the answer is decided in cluster/admission.py."""

from __future__ import annotations

from collections.abc import Callable

from etcd_operator.clients.kube import client as kube
from etcd_operator.core.cluster import admission, builders
from etcd_operator.core.cluster.observed import PodAdmission
from etcd_operator.core.cluster.spec import ClusterSpec

# Statuses with which the API server refuses an object it will refuse again while the object
# stays the same: malformed (400), refused by an admission plugin or a quota (403), invalid (422).
REFUSED = frozenset({400, 403, 422})

PodBuilder = Callable[[ClusterSpec, str], dict]  # (spec, member) -> the pod manifest a create would send


def is_refusal(error: kube.ApiError) -> bool:
    return error.status in REFUSED and not isinstance(error, kube.NamespaceTerminating)


class PodDryRun:
    def __init__(self, kube_client: kube.KubeClient, namespace: str, build: PodBuilder):
        self.kube = kube_client
        self.namespace = namespace
        self.build = build

    async def refusal(self, spec: ClusterSpec, member: str) -> kube.ApiError | None:
        """The API server's refusal of `member`'s pod built from `spec`; None: accepted."""
        try:
            await self.kube.create(kube.PODS, self.namespace, self.build(spec, member), dry_run=True)
        except kube.Conflict:
            return None  # the pod exists and passed every check before the name's: a re-create would too
        except kube.ApiError as e:
            if not is_refusal(e):
                raise
            return e
        return None

    async def answer(self, spec: ClusterSpec, member: str, error: kube.ApiError) -> PodAdmission:
        """The refusal as evidence, naming the spec.pod settings refused: those the server
        named, else those without which a dry run is accepted."""
        fields = tuple(dict.fromkeys(admission.spec_field(f) for f in error.fields))
        if not fields:
            found = []
            for key in admission.settings_in(spec):
                if await self.refusal(admission.without_setting(spec, key), member) is None:
                    found.append(f"spec.pod.{key}")
            fields = tuple(found)
        return PodAdmission(member, builders.pod_spec_hash(spec), error.message or str(error), fields)

    async def check(self, spec: ClusterSpec, member: str) -> PodAdmission:
        refused = await self.refusal(spec, member)
        if refused is None:
            return PodAdmission(member, builders.pod_spec_hash(spec))
        return await self.answer(spec, member, refused)
