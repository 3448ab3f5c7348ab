"""The simulated world one EtcdCluster lives in: etcd's membership and raft semantics,
pods, PVCs and their data, on a simulated clock. Pure Python, driven by a seeded
random.Random; no threads, no sleeps.

Only what the planners can see or change is modelled: who is a member (voter or learner,
started or not), who leads, how far each member's data has applied, which dataset
(lineage) a data directory belongs to, and the pod and PVC objects the operator reads."""

from __future__ import annotations

import random

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.observed import Member

CLUSTER, NAMESPACE = "sim", "ns"
EPOCH = 1_700_000_000.0
HEALTH_INTERVAL = 5.0  # etcd's strict reconfiguration check: connected for at least this long
LEARNER_READY_PERCENT = 0.9  # etcd promotes a learner once its match index is 90 % of the leader's commit
ELECTION_TIMEOUT = 1.0
MAX_LEARNERS = 1
GOOD_VERSIONS = ("3.6.16", "3.6.17")
GRACEFUL_STOP_SECONDS = (0.0, 0.0, 1.5, 2.5)  # from a pod's deletion until its etcd stops


class Refused(Exception):
    """etcd or Kubernetes refused a request; `not_yet` mirrors the executor's NotYet/EtcdError
    split (retry next pass) versus an error that aborts the pass."""

    def __init__(self, message: str, not_yet: bool = True):
        super().__init__(message)
        self.not_yet = not_yet


# A PriorityClass that does not exist: the CRD accepts it in spec.pod, the API server refuses
# every pod that names it (the refused_pod_spec fault).
MISSING_PRIORITY_CLASS = "no-such-class"
POD_REFUSAL = f"pods is forbidden: no PriorityClass with name {MISSING_PRIORITY_CLASS} was found"


def api_refuses_pod(spec) -> bool:
    """Whether the API server refuses a member pod built from `spec`."""
    return spec.pod.get("priorityClassName") == MISSING_PRIORITY_CLASS


class Data:
    """The content of one data directory (a PVC). Empty directories are None on the PVC."""

    __slots__ = ("cluster_id", "lineage", "member_id", "applied", "revision", "members_view", "db_size", "db_in_use")

    def __init__(self, cluster_id, lineage, member_id, applied, revision, members_view):
        self.cluster_id = cluster_id
        self.lineage = lineage
        self.member_id = member_id
        self.applied = applied
        self.revision = revision
        self.members_view = members_view  # this member's local copy of the member list
        self.db_size = 1000 + revision
        self.db_in_use = self.db_size


class PVC:
    __slots__ = (
        "name",
        "uid",
        "member_id",
        "deleting",
        "data",
        "deleted_by_operator",
        "restored",
        "initial_cluster",
        "bound",
    )

    def __init__(self, name, uid, member_id, initial_cluster=""):
        self.name = name
        self.uid = uid
        self.member_id = member_id
        self.deleting = False
        self.data: Data | None = None
        self.deleted_by_operator = False
        self.restored = False  # an EtcdRestore's pod wrote its data directory (the restored-by annotation)
        self.initial_cluster = initial_cluster  # a static bootstrap created it (the initial-cluster annotation)
        self.bound = False  # a pod using it was placed (WaitForFirstConsumer binding)


class Pod:
    __slots__ = (
        "name",
        "uid",
        "member_id",
        "phase",
        "deleting",
        "ip",
        "spec_hash",
        "initial_state",
        "initial_cluster",
        "force_new_cluster",
        "restarts",
        "waiting",
        "up",
        "up_since",
        "version",
        "bad_image",
        "crash_until",
        "fail_reason",
        "ip_released",
        "isolated_until",
        "quota_bytes",
        "stops_at",
    )

    def __init__(
        self, name, uid, member_id, spec_hash, initial_state, initial_cluster, force_new_cluster, version, bad_image
    ):
        self.name = name
        self.uid = uid
        self.member_id = member_id
        self.phase = "Pending"
        self.deleting = False
        self.ip: str | None = None
        self.spec_hash = spec_hash
        self.initial_state = initial_state
        self.initial_cluster = initial_cluster
        self.force_new_cluster = force_new_cluster
        self.restarts = 0
        self.waiting: str | None = "ContainerCreating"
        self.up = False  # the etcd process runs
        self.up_since = 0.0
        self.version = version
        self.bad_image = bad_image
        self.quota_bytes: int | None = None  # --quota-backend-bytes of its etcd (None: etcd's default)
        self.crash_until = 0.0  # a crash-loop fault keeps the process from starting until then
        self.fail_reason = ""
        self.ip_released = False  # a Failed pod keeps showing an address the node already reuses
        self.isolated_until = 0.0  # cut off from its peers (not from the operator) until then
        self.stops_at = 0.0  # once deleting: etcd runs until then (SIGTERM, then its graceful stop)


class Group:
    """One raft group: the members sharing a dataset lineage."""

    __slots__ = (
        "cluster_id",
        "lineage",
        "_members",
        "_by_id",
        "leader",
        "election_due",
        "alarms",
        "committed",
        "revision",
        "lost_since",
        "leader_changes",
    )

    def __init__(self, cluster_id, lineage, members, committed, revision, now):
        self.cluster_id = cluster_id
        self.lineage = lineage
        self.members = members
        self.leader: int | None = None
        self.election_due = now
        self.alarms: set[str] = set()
        self.committed = committed
        self.revision = revision
        self.lost_since: float | None = None  # model truth: quorum of voters not up since
        self.leader_changes = 0

    @property
    def members(self) -> tuple[Member, ...]:
        return self._members

    @members.setter
    def members(self, members: tuple[Member, ...]) -> None:
        self._members = members
        self._by_id = {m.id: m for m in members}

    def voters(self):
        return [m for m in self._members if not m.is_learner]

    def member(self, member_id):
        return self._by_id.get(member_id)


class Foreign:
    """An etcd of another cluster answering on an IP our pods once had."""

    __slots__ = ("cluster_id", "member_id", "applied")

    def __init__(self, cluster_id, member_id, applied):
        self.cluster_id = cluster_id
        self.member_id = member_id
        self.applied = applied


def peer_url(name: str) -> str:
    return naming.peer_url(CLUSTER, NAMESPACE, name)


def client_url(name: str) -> str:
    return naming.client_url(CLUSTER, NAMESPACE, name)


class World:
    def __init__(self, rng: random.Random):
        self.rng = rng
        # Graceful stops draw from their own generator, seeded without drawing from `rng`, so
        # that they leave the fault schedule of a seed as it was.
        self.stop_rng = random.Random(repr(rng.getstate()[1][:8]))
        self.now = EPOCH
        self.pods: dict[str, Pod] = {}
        self.pvcs: dict[str, PVC] = {}
        self.groups: dict[int, Group] = {}
        self.main_lineage: int | None = None  # the dataset the operator created or recovered last
        self.foreign: dict[str, Foreign] = {}
        self.set_aside: list[PVC] = []  # PVCs a quorum recovery kept out of the cluster
        self.free_ips: list[str] = []
        self.next_ip = 1
        self.next_uid = 1
        self.next_lineage = 1
        self.next_member_id = 0x1000
        self.lag = 0.3  # chance a follower misses a round of replication
        self.events: list[str] = []  # what the world did on its own (for replays)
        self.leader_moves = 0
        # Static bootstraps: the lineage each --initial-cluster value formed (etcd derives the
        # member and cluster IDs from it and the token, the same for every member and restart).
        self.static_lineages: dict[str, int] = {}
        self.started_ids: set[int] = set()  # members whose etcd ran on a data directory (and may have voted)
        self.rebootstraps: list[str] = []  # members bootstrapped again over an emptied data directory

    # --- identities ---------------------------------------------------------------------

    def uid(self, prefix: str) -> str:
        self.next_uid += 1
        return f"{prefix}-{self.next_uid}"

    def new_member_id(self) -> int:
        self.next_member_id += self.rng.randint(1, 0x7F)
        return self.next_member_id

    def allocate_ip(self) -> str:
        if self.free_ips and self.rng.random() < 0.5:
            ip = self.free_ips.pop(self.rng.randrange(len(self.free_ips)))
        else:
            ip = f"10.0.{self.next_ip // 250}.{self.next_ip % 250 + 1}"
            self.next_ip += 1
        self.foreign.pop(ip, None)  # one pod per address
        return ip

    def release_ip(self, pod: Pod) -> None:
        if pod.ip and not pod.ip_released:
            pod.ip_released = True
            self.free_ips.append(pod.ip)

    @property
    def main(self) -> Group | None:
        return self.groups.get(self.main_lineage) if self.main_lineage is not None else None

    # --- process state ------------------------------------------------------------------

    def data_of(self, pod: Pod) -> Data | None:
        pvc = self.pvcs.get(naming.pvc_name(pod.name))
        return pvc.data if pvc is not None else None

    def cut_off(self, pod: Pod, group: Group) -> bool:
        """Isolated from its peers. A lone voter still forms its own quorum and leads."""
        if pod.isolated_until <= self.now:
            return False
        voters = group.voters()
        data = self.data_of(pod)
        return not (len(voters) == 1 and data is not None and voters[0].id == data.member_id)

    def member_up(self, pod: Pod) -> bool:
        """etcd runs in the pod; a pod being deleted serves until its process stops."""
        return pod.up and pod.phase == "Running"

    def up_members(self, group: Group) -> dict[int, Pod]:
        """member id -> pod, for members of this group whose process runs."""
        found = {}
        lineage, by_id, pvcs, now = group.lineage, group._by_id, self.pvcs, self.now
        for pod in self.pods.values():
            if not pod.up or pod.phase != "Running":
                continue
            pvc = pvcs.get(naming.pvc_name(pod.name))
            data = pvc.data if pvc is not None else None
            if data is not None and data.lineage == lineage and data.member_id in by_id:
                if pod.isolated_until > now and self.cut_off(pod, group):
                    continue
                found[data.member_id] = pod
        return found

    def stop_process(self, pod: Pod) -> None:
        if pod.up:
            pod.up = False

    def remove_pod(self, pod: Pod) -> None:
        self.stop_process(pod)
        self.pods.pop(pod.name, None)
        self.release_ip(pod)

    def delete_pod(self, pod: Pod, graceful: bool = True) -> None:
        """Graceful: the object shows as deleting while etcd still serves, for up to about
        two passes (the kubelet's SIGTERM and etcd's own stop take a while); once the process
        has stopped, the object lingers one more tick. Otherwise both go at once."""
        if graceful:
            if not pod.deleting:
                pod.deleting = True
                pod.stops_at = self.now + self.stop_rng.choice(GRACEFUL_STOP_SECONDS)
        else:
            self.remove_pod(pod)

    def set_aside_pvc(self, pvc: PVC) -> None:
        """Out of the cluster's selector: invisible to the operator, its data kept."""
        del self.pvcs[pvc.name]
        self.set_aside.append(pvc)

    def delete_pvc(self, pvc: PVC, by_operator: bool) -> None:
        pvc.deleting = True
        pvc.deleted_by_operator = by_operator

    # --- starting etcd ------------------------------------------------------------------

    def try_start(self, pod: Pod) -> None:
        """The kubelet starts (or restarts) the etcd container; etcd decides from its data
        directory and flags whether it can run."""
        pvc = self.pvcs.get(naming.pvc_name(pod.name))
        if pvc is None or pvc.deleting:
            pod.phase, pod.waiting = "Pending", "ContainerCreating"  # the volume cannot mount
            return
        if pod.ip is None:
            pod.ip = self.allocate_ip()
        pvc.bound = True
        if pod.bad_image:
            pod.phase, pod.waiting = "Pending", "ImagePullBackOff"
            return
        pod.phase = "Running"
        if self.now < pod.crash_until:
            self._crash(pod, "injected crash loop")
            return
        reason = self._start_etcd(pod, pvc)
        if reason:
            self._crash(pod, reason)
            return
        pod.up, pod.up_since, pod.waiting, pod.fail_reason = True, self.now, None, ""

    def _crash(self, pod: Pod, reason: str) -> None:
        pod.up = False
        pod.restarts += 1
        pod.waiting = "CrashLoopBackOff"
        pod.fail_reason = reason

    def _start_etcd(self, pod: Pod, pvc: PVC) -> str:
        data = pvc.data
        if data is not None:
            if data.cluster_id is None:
                return "corrupt data"
            if pod.force_new_cluster:
                self._force_new_cluster(pod, data)
                return ""
            group = self.groups.get(data.lineage)
            if group is None or group.member(data.member_id) is None:
                return "the member was removed from the cluster"
            newer = self._newer_lineage_serving(data)
            if newer:
                return "rejected by the peers: the member was removed (cluster recovered without it)"
            return ""
        # Empty data directory.
        entries = dict(e.split("=", 1) for e in pod.initial_cluster.split(",") if "=" in e)
        own = peer_url(pod.name)
        if entries.get(pod.name) != own:
            return "couldn't find local name in the initial cluster configuration"
        if pod.initial_state == "new":
            if len(entries) != 1:
                return self._static_bootstrap(pod, pvc, entries)
            lineage = self._new_lineage()
            member_id = self.new_member_id()
            cluster_id = self.rng.randint(1, 2**63)
            members = (Member(member_id, pod.name, (own,), (client_url(pod.name),), False),)
            group = Group(cluster_id, lineage, members, 1, 1, self.now)
            self.groups[lineage] = group
            self.main_lineage = lineage
            pvc.data = Data(cluster_id, lineage, member_id, 1, 1, members)
            return ""
        peers = [url for name, url in entries.items() if name != pod.name]
        if not peers:
            return "cannot fetch cluster info from peer URLs: the initial cluster names only this member"
        group = self._group_reachable_via(peers)
        if group is None:
            return "cannot fetch cluster info from peer URLs"
        member = next((m for m in group.members if own in m.peer_urls), None)
        if member is None:
            return "member not found in the cluster's member list"
        if member.client_urls:  # published: it ran (etcd's isMemberBootstrapped)
            return "member has already been bootstrapped (empty data dir for a started member)"
        if {u for m in group.members for u in m.peer_urls} != set(entries.values()):
            return "member count is unequal (initial cluster differs from the member list)"
        started = Member(member.id, pod.name, member.peer_urls, (client_url(pod.name),), member.is_learner)
        group.members = tuple(started if m.id == member.id else m for m in group.members)
        pvc.data = Data(group.cluster_id, group.lineage, member.id, 0, 0, group.members)
        return ""

    def _static_bootstrap(self, pod: Pod, pvc: PVC, entries: dict[str, str]) -> str:
        """etcd with --initial-cluster-state=new and an empty data directory: it becomes the
        member the initial cluster names it, with the same ID every time."""
        lineage = self.static_lineages.get(pod.initial_cluster)
        group = self.groups.get(lineage) if lineage is not None else None
        if group is None:
            ids = random.Random(pod.initial_cluster)  # its own draws: a digest of the flags, as etcd's
            members = tuple(
                Member(0x1000 + ids.randrange(2**40), name, (url,), (), False) for name, url in sorted(entries.items())
            )
            lineage = self._new_lineage()
            group = Group(ids.randint(1, 2**63), lineage, members, 1, 1, self.now)
            self.groups[lineage] = group
            self.static_lineages[pod.initial_cluster] = lineage
            if self.main_lineage is None:  # the cluster's first dataset; any later one is a stray
                self.main_lineage = lineage
        member = next((m for m in group.members if m.peer_urls == (peer_url(pod.name),)), None)
        if member is None:
            return "the member was removed from the cluster"
        if member.client_urls and any(m != member.id for m in self.up_members(group)):
            # etcd asks its peers first (isMemberBootstrapped): a member they list as published
            # refuses to bootstrap again.
            return "member has already been bootstrapped"
        if member.id in self.started_ids:
            self.rebootstraps.append(f"{pod.name} (id {member.id:x}) at {self.now:.1f}")
        started = Member(member.id, pod.name, member.peer_urls, (client_url(pod.name),), member.is_learner)
        group.members = tuple(started if m.id == member.id else m for m in group.members)
        pvc.data = Data(group.cluster_id, group.lineage, member.id, 0, 0, group.members)
        self.started_ids.add(member.id)
        return ""

    def _new_lineage(self) -> int:
        self.next_lineage += 1
        return self.next_lineage

    def _group_reachable_via(self, peer_urls: list[str]) -> Group | None:
        for pod in self.pods.values():
            if peer_url(pod.name) in peer_urls and self.member_up(pod):
                data = self.data_of(pod)
                if data is not None:
                    return self.groups.get(data.lineage)
        return None

    def _newer_lineage_serving(self, data: Data) -> bool:
        main = self.main
        if main is None or main.lineage == data.lineage or main.cluster_id != data.cluster_id:
            return False
        return main.leader is not None and main.member(data.member_id) is None

    def _force_new_cluster(self, pod: Pod, data: Data) -> None:
        old = self.groups.get(data.lineage)
        member = old.member(data.member_id) if old else None
        if old is not None and [m.id for m in old.members] == [data.member_id]:
            return  # already alone in its cluster: forcing again changes nothing
        me = Member(data.member_id, pod.name, (peer_url(pod.name),), (client_url(pod.name),), False)
        lineage = self._new_lineage()
        data.applied += 1
        group = Group(data.cluster_id, lineage, (me,), data.applied, data.revision, self.now)
        if old is not None:
            group.alarms = set(old.alarms)
        data.lineage, data.members_view = lineage, group.members
        self.groups[lineage] = group
        self.main_lineage = lineage
        self.events.append(
            f"{pod.name} forced a new cluster from applied index {data.applied - 1}"
            + ("" if member else " (it was not a member)")
        )

    # --- time passing -------------------------------------------------------------------

    def advance(self, dt: float) -> None:
        self.now += dt
        for pod in list(self.pods.values()):
            if pod.deleting and pod.up and self.now >= pod.stops_at:
                self.stop_process(pod)
            elif pod.deleting and not pod.up:
                self.remove_pod(pod)
        for pvc in list(self.pvcs.values()):
            if pvc.deleting and not any(p.name == naming.pvc_member(pvc.name) for p in self.pods.values()):
                del self.pvcs[pvc.name]
        for pod in self.pods.values():
            if pod.up:
                data = self.data_of(pod)
                group = self.groups.get(data.lineage) if data is not None else None
                if group is not None and self.cut_off(pod, group):
                    continue  # cut off, it does not learn it was removed
                if group is None or group.member(data.member_id) is None:
                    self._crash(pod, "the member was removed from the cluster")  # etcd exits
                continue
            if pod.phase != "Failed" and not pod.deleting:
                self.try_start(pod)
        for group in list(self.groups.values()):
            self._raft(group)

    def _raft(self, group: Group) -> None:
        up = self.up_members(group)
        voters = group.voters()
        up_voters = [m for m in voters if m.id in up]
        has_quorum = bool(voters) and len(up_voters) >= naming.quorum(len(voters))
        if group.leader is not None and (
            group.leader not in up
            or not has_quorum
            or group.member(group.leader) is None
            or group.member(group.leader).is_learner
        ):
            group.leader = None
            group.election_due = self.now + ELECTION_TIMEOUT * self.rng.uniform(1.0, 3.0)
        if group.leader is None and has_quorum and self.now >= group.election_due:
            best = max(self.data_of(up[m.id]).applied for m in up_voters)
            candidates = [m.id for m in up_voters if self.data_of(up[m.id]).applied == best]
            group.leader = self.rng.choice(candidates)
            group.leader_changes += 1
        if group.lineage == self.main_lineage:
            # Model truth for the quorum-loss timer: the cluster served (had a leader) last then.
            if group.leader is not None:
                group.lost_since = None
            elif group.lost_since is None:
                group.lost_since = self.now
        if group.leader is None:
            return
        if "NOSPACE" not in group.alarms and self.rng.random() < 0.9:
            writes = self.rng.randint(1, 3)
            group.committed += writes
            group.revision += writes
        self._replicate(group, up, up_voters)

    def _replicate(self, group: Group, up: dict[int, Pod], up_voters: list[Member]) -> None:
        """The leader and a quorum of voters hold every committed entry; other members lag
        at random and catch up later."""
        needed = naming.quorum(len(group.voters()))
        order = [group.leader] + [m.id for m in up_voters if m.id != group.leader]
        for m in group.members:
            if m.id in up and m.id not in order:
                order.append(m.id)
        if up[group.leader].isolated_until > self.now:
            order = [group.leader]  # a lone voter cut off from its learner replicates to nobody
        for rank, member_id in enumerate(order):
            data = self.data_of(up[member_id])
            in_quorum = rank < needed
            if in_quorum or self.rng.random() >= self.lag:
                data.applied, data.revision = group.committed, group.revision
                data.members_view = group.members
                grow = max(0, data.revision + 1000 - data.db_in_use)
                data.db_in_use += grow
                data.db_size += grow

    # --- etcd's cluster API (called by the model executor) --------------------------------

    def process_at(self, endpoint: str | None):
        """(pod, data, group) of our etcd answering on an endpoint, or the Foreign there."""
        if not endpoint:
            raise Refused("no endpoint")
        ip = endpoint.rsplit(":", 1)[0]
        if ip in self.foreign:
            return self.foreign[ip]
        for pod in self.pods.values():
            if pod.ip == ip and self.member_up(pod):
                data = self.data_of(pod)
                if data is not None:
                    return pod, data, self.groups[data.lineage]
        raise Refused(f"{endpoint}: connection refused")

    def group_with_leader(self, endpoint: str | None) -> Group | None:
        """etcd forwards a cluster request to the leader; None when the endpoint answers for a
        foreign cluster (the request lands there, not here)."""
        found = self.process_at(endpoint)
        if isinstance(found, Foreign):
            return None
        pod, _, group = found
        if group.leader is None or self.cut_off(pod, group):
            raise Refused("etcdserver: no leader")
        return group

    def connected_since(self, group: Group, member_id: int) -> float | None:
        pod = self.up_members(group).get(member_id)
        return pod.up_since if pod else None

    def _connected_long_enough(self, group: Group, member_id: int) -> bool:
        since = self.connected_since(group, member_id)
        return member_id == group.leader or (since is not None and self.now - since >= HEALTH_INTERVAL)

    def member_add_learner(self, group: Group, url: str) -> Member:
        if any(url in m.peer_urls for m in group.members):
            raise Refused("etcdserver: Peer URLs already exists", not_yet=False)
        if sum(1 for m in group.members if m.is_learner) >= MAX_LEARNERS:
            raise Refused("etcdserver: too many learner members in cluster")
        # isConnectedFullySince: every voter connected to the leader for HEALTH_INTERVAL.
        if not all(self._connected_long_enough(group, m.id) for m in group.voters()):
            raise Refused("etcdserver: unhealthy cluster")
        member = Member(self.new_member_id(), "", (url,), (), True)
        group.members = group.members + (member,)
        group.committed += 1
        return member

    def member_remove(self, group: Group, member_id: int) -> None:
        member = group.member(member_id)
        if member is None:
            raise Refused("etcdserver: member not found", not_yet=False)
        if not member.is_learner:
            voters = group.voters()
            up = self.up_members(group)
            remaining = [m for m in voters if m.id != member_id]
            started_remaining = [m for m in remaining if m.name]
            if len(started_remaining) < naming.quorum(len(remaining)) or not remaining:
                raise Refused("etcdserver: re-configuration failed due to not enough started members")
            if member_id == group.leader or member_id in up and self.connected_since(group, member_id) is not None:
                active = sum(1 for m in voters if self._connected_long_enough(group, m.id))
                if active - 1 < naming.quorum(len(voters) - 1):
                    raise Refused("etcdserver: unhealthy cluster")
        group.members = tuple(m for m in group.members if m.id != member_id)
        group.committed += 1
        if group.leader == member_id:
            group.leader = None
            group.election_due = self.now + ELECTION_TIMEOUT

    def member_promote(self, group: Group, member_id: int) -> None:
        member = group.member(member_id)
        if member is None:
            raise Refused("etcdserver: member not found", not_yet=False)
        if not member.is_learner:
            raise Refused("etcdserver: can only promote a learner member", not_yet=False)
        up = self.up_members(group)
        pod = up.get(member_id)
        applied = self.data_of(pod).applied if pod else 0
        leader_pod = up.get(group.leader)
        if (
            pod is None
            or applied < group.committed * LEARNER_READY_PERCENT
            or leader_pod is None
            or leader_pod.isolated_until > self.now
        ):
            raise Refused("etcdserver: can only promote a learner member which is in sync with leader")
        voters = group.voters()
        started = [m for m in voters if m.name]
        if len(started) + 1 < naming.quorum(len(voters) + 1):
            raise Refused("etcdserver: re-configuration failed due to not enough started members")
        promoted = Member(member.id, member.name, member.peer_urls, member.client_urls, False)
        group.members = tuple(promoted if m.id == member_id else m for m in group.members)
        group.committed += 1

    def move_leader(self, endpoint: str, to_id: int) -> None:
        found = self.process_at(endpoint)
        if isinstance(found, Foreign):
            raise Refused("etcdserver: not leader", not_yet=False)
        pod, data, group = found
        if group.leader != data.member_id or self.cut_off(pod, group):
            raise Refused("etcdserver: not leader", not_yet=False)
        target = group.member(to_id)
        pod = self.up_members(group).get(to_id)
        if target is None or target.is_learner or pod is None:
            raise Refused("etcdserver: bad leader transferee")
        self.data_of(pod).applied = group.committed
        group.leader = to_id
        group.leader_changes += 1
        self.leader_moves += 1


def merge_patch(target: dict, patch: dict) -> dict:
    """JSON merge patch (RFC 7386), as the API server applies a status write: absent keys
    stay, null deletes, and an object merges into what was there (into {} if that was no
    object). The unit tests of status writes use it too."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result[key] if isinstance(result.get(key), dict) else {}, value)
        else:
            result[key] = value
    return result
