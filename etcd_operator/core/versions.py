"""The supported etcd versions and upgrade paths. Pure; docs/operations/upgrades.md's version table says the same.

- MINIMUM_PATCH: the oldest patch of each supported minor the operator runs;
- KNOWN_BAD: patches it refuses, with why;
- UPGRADE_FROM: to upgrade to a minor, every member must first run at least this patch of
  the minor before (etcd's upgrade guide for 3.5 -> 3.6 asks for 3.5.32: learner and v2store
  upgrade blockers are fixed up to there, and this operator always adds members as learners).

Direct paths: any patch upgrade within a minor; one minor up from at least UPGRADE_FROM.
Anything else is refused with a reason naming the step to take first (the operator never
rolls through an intermediate patch by itself: which patch to run is the user's choice).
"""

from __future__ import annotations

import dataclasses

Version = tuple[int, int, int]

MINIMUM_PATCH: dict[tuple[int, int], int] = {(3, 5): 3, (3, 6): 0}
KNOWN_BAD: dict[Version, str] = {
    (3, 5, 0): "etcd 3.5.0-3.5.2 can lose data consistency after a crash (fixed in 3.5.3)",
    (3, 5, 1): "etcd 3.5.0-3.5.2 can lose data consistency after a crash (fixed in 3.5.3)",
    (3, 5, 2): "etcd 3.5.0-3.5.2 can lose data consistency after a crash (fixed in 3.5.3)",
}
UPGRADE_FROM: dict[tuple[int, int], Version] = {(3, 6): (3, 5, 32)}


def _numbers(text: str) -> list[str]:
    return text.lstrip("v").split("-")[0].split(".")


def parse(text: str) -> Version:
    """(major, minor, patch) of "3.6.1", "v3.6.1" or "3.6.1-rc.0"; ValueError otherwise."""
    major, minor, patch = (int(p) for p in _numbers(text))
    return major, minor, patch


def parse_minor(text: str) -> tuple[int, int]:
    """(major, minor) of "3.6" or of any version `parse` reads; ValueError otherwise."""
    major, minor = (int(p) for p in _numbers(text)[:2])
    return major, minor


def text(version: tuple[int, ...]) -> str:
    """ "3.6.1" of (3, 6, 1); "3.6" of a (major, minor)."""
    return ".".join(map(str, version))


@dataclasses.dataclass(frozen=True)
class VersionProblem:
    reason: str
    message: str


def release_problem(wanted: str) -> VersionProblem | None:
    """A version the operator never runs, whatever runs now."""
    version = parse(wanted)
    minimum = MINIMUM_PATCH.get(version[:2])
    if minimum is None:
        supported = ", ".join(f"{a}.{b}.x" for a, b in sorted(MINIMUM_PATCH))
        return VersionProblem("UnsupportedVersion", f"etcd {wanted} is not supported; use {supported}")
    if version in KNOWN_BAD:
        return VersionProblem("KnownBadVersion", f"etcd {wanted} is refused: {KNOWN_BAD[version]}")
    if version[2] < minimum:
        return VersionProblem(
            "UnsupportedVersion", f"etcd {wanted} is older than the oldest supported {text(version[:2] + (minimum,))}"
        )
    return None


def upgrade_problem(running: str | None, wanted: str) -> VersionProblem | None:
    """A minor upgrade the running members are not ready for: the reason names the patch
    every member must run first."""
    if not running:
        return None
    have, want = parse(running), parse(wanted)
    needed = UPGRADE_FROM.get(want[:2])
    if want[:2] <= have[:2] or needed is None or have[:2] != needed[:2] or have >= needed:
        return None
    return VersionProblem(
        "UpgradeNeedsPatch",
        f"upgrading to {wanted} needs every member on {text(needed)} or later first (etcd's upgrade "
        f"guide); the cluster runs {running}. Set spec.version to {text(needed[:2])}.x "
        f"(>= {text(needed)}), let it roll, then to {wanted}",
    )


def skew(server_versions: list[str]) -> dict[str, object]:
    """status fields for version skew: the cluster version etcd runs at (the lowest minor any
    member runs; etcd itself never runs a cluster above its oldest member) and whether the
    members run different versions, as during a roll."""
    if not server_versions:
        return {"clusterVersion": None, "mixedVersions": None}
    lowest = min(map(parse, server_versions))
    return {"clusterVersion": text(lowest[:2]) + ".0", "mixedVersions": len(set(server_versions)) > 1}


# Minor downgrades through etcd's downgrade API: from a minor to the one below it, to a patch
# that could be upgraded from again (UPGRADE_FROM), so a downgrade can always be undone.
DOWNGRADE_FROM = frozenset({(3, 6)})


def downgrade_target(running: str | None, wanted: str) -> str | None:
    """The target minor ("3.5") when `wanted` is a supported downgrade from what runs."""
    if not running:
        return None
    have, want = parse(running), parse(wanted)
    if have[:2] not in DOWNGRADE_FROM or want[:2] != (have[0], have[1] - 1):
        return None
    needed = UPGRADE_FROM.get(have[:2])
    if needed is not None and want < needed:
        return None
    return text(want[:2])


# `etcdutl snapshot restore --bump-revision --mark-compacted` (etcd PR #16029) is in every
# 3.6 and, backported by PR #16165, in 3.5 from 3.5.10 on: etcd-io/etcd
# CHANGELOG/CHANGELOG-3.5.md, "v3.5.10 (2023-10-27)", etcdutl v3. The testbin's etcdutl
# 3.5.21, 3.5.35 and 3.6.16 list both flags in `snapshot restore --help`.
REVISION_BUMP_SINCE: Version = (3, 5, 10)


def revision_bump_problem(version: str, bump: int) -> VersionProblem | None:
    """A restore that bumps revisions (bump > 0) into a version whose etcdutl cannot."""
    if bump <= 0 or parse(version) >= REVISION_BUMP_SINCE:
        return None
    return VersionProblem(
        "RevisionBumpUnsupported",
        f"etcd {version}'s etcdutl cannot bump revisions (--bump-revision is in etcd "
        f"{text(REVISION_BUMP_SINCE)} and later), and spec.revisionBump is {bump}. Restore into "
        f"etcd {text(REVISION_BUMP_SINCE)} or later, or set spec.revisionBump: 0 if no client "
        f"watches this store (then revisions restart from the snapshot's)",
    )


def of_image(image: str) -> Version | None:
    """The version an etcd image's tag names ("registry:5000/etcd:v3.6.1"), None when the tag
    names none (a digest, "latest")."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return None
    try:
        return parse(tag.split("@", 1)[0])
    except ValueError:
        return None
