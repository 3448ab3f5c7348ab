"""Fault points: named places where a test can make the operator die at once, to prove
that every step resumes from observed state. Enabled only through ETCD_OPERATOR_FAULTS."""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

AFTER_MEMBER_ADD = "after-member-add"
AFTER_MEMBER_REMOVE = "after-member-remove"
DURING_BACKUP_UPLOAD = "during-backup-upload"
DURING_RESTORE = "during-restore"
# The first backup pass after the one that recorded its verification's scratch pod: the
# attempt must resume with that same pod.
AFTER_SCRATCH_POD_RECORDED = "after-scratch-pod-recorded"


def enabled() -> frozenset[str]:
    return frozenset(p.strip() for p in os.environ.get("ETCD_OPERATOR_FAULTS", "").split(",") if p.strip())


def hit(point: str) -> None:
    """Exits the process without any cleanup when `point` is enabled."""
    if point in enabled():
        logger.error("fault point %s reached: exiting now", point)
        logging.shutdown()
        os._exit(86)
