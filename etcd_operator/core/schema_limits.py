"""Limits the CRDs enforce, as named numbers the runtime and the tests share. Pure.

Name maxima come from the longest names the operator derives (cluster/naming.py,
restore/builders.py); tests/unit/test_schema_limits.py runs maximal names through those
functions and checks that the CRDs carry exactly these numbers.
"""

from __future__ import annotations

# Kubernetes: a DNS-1123/1035 label (Service names, pod hostnames) and a label value.
DNS_LABEL_MAX = 63
LABEL_VALUE_MAX = 63

# Member ordinals only grow: a replaced member gets a new ordinal and an in-place restore
# seeds above every ordinal in use. Four digits leave room for thousands of replacements.
MEMBER_ORDINAL_DIGITS = 4

# EtcdCluster: the longest derived name is the member PVC `data-<cluster>-<ordinal>`
# (5 + name + 1 + 4); Services `<cluster>-client`, member pods and hostnames
# `<cluster>-<ordinal>` and the label values are shorter. Names also become Service
# names, so they must be DNS-1035 labels (start with a letter, no dots).
CLUSTER_NAME_MAX = 53
CLUSTER_NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"

# EtcdRestore: the restore pods `<restore>-s<ordinal>` (DNS labels for ordinals below 1000, so their hostnames are their
# name) and the label values etcd.operator.dev/restore and preserved-by-restore.
RESTORE_NAME_MAX = 58

# EtcdBackup: the name is an S3 key segment and a metrics label; no object derives its
# name from it. Kept a valid label value so it can select objects it produced.
BACKUP_NAME_MAX = LABEL_VALUE_MAX

# spec.recovery floors. quorumLossTimeout shorter than a leader election would declare
# quorum lost during ordinary elections (the operator adds its own runtime floor of one
# election timeout plus a margin); memberUnhealthyTimeout shorter than a pod restart
# would replace members that are merely restarting.
QUORUM_LOSS_TIMEOUT_MIN_SECONDS = 10
MEMBER_UNHEALTHY_TIMEOUT_MIN_SECONDS = 30
