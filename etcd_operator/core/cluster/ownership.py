"""Which objects named like a cluster's children are the operator's to write. Pure.

The operator writes only what it created. Every child it creates (certificate Secrets,
Services, PodDisruptionBudget, NetworkPolicy) carries the label LABEL_CLUSTER=<cluster> and
a controller owner reference to the EtcdCluster, by uid. An object of a child's name
without both is someone else's: it is reported (condition ChildrenOwned, reason
ForeignSecret for a Secret, NameCollision for another kind), never applied over, adopted
or deleted (controllers/cluster/execute_context.StepContext.apply checks it again at the
moment of the write, and writes with the object's resourceVersion and uid as preconditions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.observed import Observed

CONDITION = "ChildrenOwned"
FOREIGN_SECRET = "ForeignSecret"
NAME_COLLISION = "NameCollision"


def foreign_reason(meta: Mapping[str, Any], cluster: str, cluster_uid: str) -> str | None:
    """Why the object with metadata `meta` is not this cluster's to write; None when it is
    (the cluster's label and a controller owner reference to this EtcdCluster's uid)."""
    missing = []
    if (meta.get("labels") or {}).get(naming.LABEL_CLUSTER) != cluster:
        missing.append(f"the label {naming.LABEL_CLUSTER}={cluster}")
    controllers = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if not any(o.get("uid") == cluster_uid for o in controllers):  # a uid names one object, whatever its kind
        held_by = ", ".join(f"{o.get('kind')} {o.get('name')}" for o in controllers)
        missing.append(
            "a controller owner reference to this EtcdCluster"
            + (f" (it is controlled by {held_by})" if held_by else "")
        )
    return f"it lacks {' and '.join(missing)}" if missing else None


def ref(kind: str, name: str) -> str:
    return f"{kind} {name}"


def collisions(observed: Observed) -> dict[str, str]:
    """Every child name taken by an object that is not the operator's: the certificate
    Secrets as this pass read them, and the other children as their last write found them."""
    found = {ref("Secret", name): why for name, why in observed.tls.foreign.items()}
    return {**observed.collisions, **found}


def secret_collision(observed: Observed, name: str) -> str | None:
    return observed.tls.foreign.get(name)


def describe(what: str, why: str) -> str:
    return (
        f"{what} exists and is not this cluster's: {why}. The operator writes nothing to it; "
        f"rename or delete it (or choose another cluster name) so that the operator can create its own"
    )


def condition(observed: Observed) -> c.Condition:
    found = collisions(observed)
    if not found:
        return c.Condition(CONDITION, True, "Owned", "")
    reason = FOREIGN_SECRET if any(k.startswith("Secret ") for k in found) else NAME_COLLISION
    return c.Condition(CONDITION, False, reason, "; ".join(describe(k, w) for k, w in sorted(found.items())))
