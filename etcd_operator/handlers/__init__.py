"""kopf handlers: thin adapters from kopf's callbacks to the reconcilers."""

from etcd_operator.handlers import cluster  # noqa: F401
