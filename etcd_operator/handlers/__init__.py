"""kopf handlers: thin adapters from kopf's callbacks to the reconcilers."""

from etcd_operator.handlers import backup, cluster, restore  # noqa: F401
