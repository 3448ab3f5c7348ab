"""An async client for one etcd member, built on aetcd's generated gRPC stubs.

aetcd's high-level client has no learner calls, so membership and maintenance go through
its stubs directly; the channel is ours so that TLS can be added without forking aetcd.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

import grpc
from aetcd import rpc
from aetcd.rpc import auth_pb2

from etcd_operator.core.cluster.observed import EtcdPermission, Member, MemberStatus
from etcd_operator.core.leadership_fence import WriteGuard, permit_write

DEFAULT_TIMEOUT = 5.0
# Snapshots of large databases stream for a long time; only the idle gap is bounded.
SNAPSHOT_MESSAGE_BYTES = 64 * 1024 * 1024
_Stub = TypeVar("_Stub")
# A refused connection is tried again after 0.2 s, then at most every second.
RECONNECT_BACKOFF_MS = 200
RECONNECT_BACKOFF_MAX_MS = 1000


class EtcdError(Exception):
    """An etcd call failed; `code` is the gRPC status, `detail` etcd's own message."""

    def __init__(self, endpoint: str, call: str, code: grpc.StatusCode | None, detail: str):
        super().__init__(f"{call} on {endpoint}: {detail}")
        self.endpoint = endpoint
        self.call = call
        self.code = code
        self.detail = detail

    @property
    def unavailable(self) -> bool:
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

    @property
    def learner_not_ready(self) -> bool:
        return "learner" in self.detail and "in sync" in self.detail

    @property
    def already_compacted(self) -> bool:
        """etcd's ErrCompacted: the revision asked for is at or below the compacted one."""
        return "required revision has been compacted" in self.detail

    @property
    def cluster_not_ready(self) -> bool:
        """etcd's own reconfiguration guard: peers were not all connected for long enough."""
        return "unhealthy cluster" in self.detail


class WatchCompacted(Exception):
    """The watch's start revision was compacted away: the revisions after it are gone."""

    def __init__(self, endpoint: str, start_revision: int, compact_revision: int):
        super().__init__(
            f"Watch on {endpoint}: revision {start_revision} was compacted (compacted up to {compact_revision})"
        )
        self.start_revision = start_revision
        self.compact_revision = compact_revision


class WatchCanceled(Exception):
    """etcd canceled the watch for another reason (it says which)."""


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    revision: int  # the revision that made the change (a put's or a delete's)
    key: bytes
    value: bytes | None  # None: deleted
    lease: int


@dataclasses.dataclass(frozen=True)
class WatchBatch:
    """One watch response: its events (none for a progress notification), the header's
    cluster and member, and the newest revision the member knew when it answered.
    `fragment`: more events of the last revision follow in the next response."""

    cluster_id: int
    member_id: int
    header_revision: int
    events: tuple[WatchEvent, ...]
    fragment: bool = False


@dataclasses.dataclass(frozen=True)
class ClientTLS:
    """The operator's client certificate for a TLS cluster. Members are dialled by pod IP
    and their certificate is checked against `server_name`, a name every member's
    certificate carries (the client Service's)."""

    ca: bytes = dataclasses.field(repr=False)
    cert: bytes = dataclasses.field(repr=False)
    key: bytes = dataclasses.field(repr=False)
    server_name: str = ""

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def options(self, options: Sequence[tuple[str, object]]) -> list[tuple[str, object]]:
        return [*options, ("grpc.ssl_target_name_override", self.server_name)]

    def channel(self, endpoint: str, options: Sequence[tuple[str, object]]) -> grpc.aio.Channel:
        return grpc.aio.secure_channel(endpoint, self.credentials(), options=self.options(options))


def _member(m) -> Member:
    return Member(
        id=m.ID,
        name=m.name,
        peer_urls=tuple(m.peerURLs),
        client_urls=tuple(m.clientURLs),
        is_learner=m.isLearner,
    )


def _stub(make: Callable[[grpc.aio.Channel], _Stub]) -> functools.cached_property[_Stub]:
    """A service's stub on the client's channel, made when first used."""
    return functools.cached_property(lambda client: make(client._channel))


class EtcdMemberClient:
    """Talks to exactly one member, at `endpoint` ("host:port")."""

    def __init__(
        self,
        endpoint: str,
        timeout: float = DEFAULT_TIMEOUT,
        guard: WriteGuard | None = None,
        tls: ClientTLS | None = None,
        keepalive: bool = False,
    ):
        """`keepalive`: ping the member every 10 s, so that a long watch notices a member
        that went away (etcd allows pings every 5 s)."""
        self.endpoint = endpoint
        self.timeout = timeout
        self.guard = guard  # None: the process's write guard (leader election)
        options: list[tuple[str, object]] = [
            ("grpc.max_receive_message_length", SNAPSHOT_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
            # The callers pace their own retries. gRPC's reconnect backoff (1 s, growing to
            # 120 s) would keep a member that serves again unreachable until its next try.
            ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        ]
        if keepalive:
            options += [
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
        self._channel = tls.channel(endpoint, options) if tls else grpc.aio.insecure_channel(endpoint, options=options)

    # Each service's stub is made on first use: a steady pass asks two of the six, on a
    # channel that is opened again after each quiet sleep.
    _cluster = _stub(rpc.ClusterStub)
    _maintenance = _stub(rpc.MaintenanceStub)
    _kv = _stub(rpc.KVStub)
    _watch = _stub(rpc.WatchStub)
    _lease = _stub(rpc.LeaseStub)
    _auth = _stub(rpc.AuthStub)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> EtcdMemberClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(
        self,
        name: str,
        method,
        request,
        timeout: float | None = None,
        mutating: bool = False,
        past_deadline: bool = False,
    ):
        """A mutating call is refused (LeadershipLost) when this replica may not act, and its
        gRPC deadline ends with the right to act, so it is never sent later; `past_deadline`
        keeps the call's own timeout for a call that may outlast the lease (Defragment)."""
        timeout = timeout or self.timeout
        if mutating:
            left = permit_write(f"{name} on {self.endpoint}", self.guard)
            timeout = timeout if past_deadline else min(timeout, left)
        try:
            return await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise EtcdError(self.endpoint, name, e.code(), e.details() or str(e.code())) from None

    # --- membership -------------------------------------------------------------------

    async def member_list(self) -> tuple[int, list[Member]]:
        """Returns (cluster_id, members) as this member knows them. Served locally, so it
        answers without quorum too; the leader's answer reflects every committed change."""
        response = await self._call("MemberList", self._cluster.MemberList, rpc.MemberListRequest())
        return response.header.cluster_id, [_member(m) for m in response.members]

    async def add_learner(self, peer_urls: list[str]) -> tuple[Member, list[Member]]:
        response = await self._call(
            "MemberAdd",
            self._cluster.MemberAdd,
            rpc.MemberAddRequest(peerURLs=peer_urls, isLearner=True),
            mutating=True,
        )
        return _member(response.member), [_member(m) for m in response.members]

    async def promote(self, member_id: int) -> list[Member]:
        response = await self._call(
            "MemberPromote",
            self._cluster.MemberPromote,
            rpc.MemberPromoteRequest(ID=member_id),
            mutating=True,
        )
        return [_member(m) for m in response.members]

    async def update_peer_urls(self, member_id: int, peer_urls: Sequence[str]) -> list[Member]:
        response = await self._call(
            "MemberUpdate",
            self._cluster.MemberUpdate,
            rpc.MemberUpdateRequest(ID=member_id, peerURLs=list(peer_urls)),
            mutating=True,
        )
        return [_member(m) for m in response.members]

    async def remove(self, member_id: int) -> list[Member]:
        response = await self._call(
            "MemberRemove",
            self._cluster.MemberRemove,
            rpc.MemberRemoveRequest(ID=member_id),
            mutating=True,
        )
        return [_member(m) for m in response.members]

    async def move_leader(self, target_id: int) -> None:
        """Must be sent to the current leader."""
        await self._call(
            "MoveLeader",
            self._maintenance.MoveLeader,
            rpc.MoveLeaderRequest(targetID=target_id),
            timeout=max(self.timeout, 15.0),
            mutating=True,
        )

    # --- maintenance ------------------------------------------------------------------

    async def status(self) -> MemberStatus:
        r = await self._call("Status", self._maintenance.Status, rpc.StatusRequest())
        return MemberStatus(
            cluster_id=r.header.cluster_id,
            member_id=r.header.member_id,
            leader_id=r.leader,
            version=r.version,
            db_size=r.dbSize,
            db_size_in_use=r.dbSizeInUse,
            revision=r.header.revision,
            raft_index=r.raftIndex,
            raft_applied_index=r.raftAppliedIndex,
            raft_term=r.raftTerm,
            is_learner=r.isLearner,
            errors=tuple(r.errors),
        )

    async def defragment(self, timeout: float = 120.0) -> None:
        await self._call(
            "Defragment",
            self._maintenance.Defragment,
            rpc.DefragmentRequest(),
            timeout,
            mutating=True,
            past_deadline=True,
        )

    async def downgrade(self, action: str, version: str) -> str:
        """etcd's downgrade API (Maintenance.Downgrade, 3.6+): action VALIDATE, ENABLE or
        CANCEL, version the target minor ("3.5"). Returns the cluster version etcd reports."""
        response = await self._call(
            "Downgrade",
            self._maintenance.Downgrade,
            rpc.DowngradeRequest(action=rpc.DowngradeRequest.DowngradeAction.Value(action), version=version),
            mutating=action != "VALIDATE",
        )
        return response.version

    async def alarms(self) -> list[tuple[int, int]]:
        response = await self._call(
            "Alarm",
            self._maintenance.Alarm,
            rpc.AlarmRequest(action=rpc.AlarmRequest.GET, memberID=0, alarm=rpc.NONE),
        )
        return [(a.memberID, a.alarm) for a in response.alarms]

    async def hash_kv(self, revision: int, timeout: float = 60.0) -> tuple[int, int]:
        """(hash, compact revision) of the key-value store up to `revision`: equal on every
        member, and on a member restored from a snapshot at that revision, as long as the
        compact revision is the same."""
        response = await self._call("HashKV", self._maintenance.HashKV, rpc.HashKVRequest(revision=revision), timeout)
        return response.hash, response.compact_revision

    async def compact(self, revision: int, timeout: float = 60.0) -> bool:
        """Compacts the key history up to `revision`, waiting until this member applied it
        (physical). False when etcd had already compacted at or past it."""
        try:
            await self._call(
                "Compact",
                self._kv.Compact,
                rpc.CompactionRequest(revision=revision, physical=True),
                timeout,
                mutating=True,
                past_deadline=True,
            )
        except EtcdError as e:
            if e.already_compacted:
                return False
            raise
        return True

    async def disarm_alarm(self, member_id: int, alarm: int = rpc.NOSPACE) -> None:
        """Deactivates one raised alarm (etcdctl alarm disarm does the same per alarm)."""
        await self._call(
            "Alarm",
            self._maintenance.Alarm,
            rpc.AlarmRequest(action=rpc.AlarmRequest.DEACTIVATE, memberID=member_id, alarm=alarm),
            mutating=True,
        )

    # --- keys (used by health checks and tests) ---------------------------------------

    async def count_keys(self, revision: int = 0) -> int:
        """All keys at `revision` (0: now)."""
        response = await self._call(
            "Range",
            self._kv.Range,
            rpc.RangeRequest(key=b"\0", range_end=b"\0", count_only=True, revision=revision),
        )
        return response.count

    async def linearizable_revision(self) -> int:
        """The cluster's revision, read through the leader (ReadIndex): a member cut off from
        quorum cannot answer, where its serializable status would."""
        response = await self._call("Range", self._kv.Range, rpc.RangeRequest(key=b"\0", count_only=True))
        return response.header.revision

    async def put(self, key: bytes, value: bytes) -> int:
        response = await self._call("Put", self._kv.Put, rpc.PutRequest(key=key, value=value), mutating=True)
        return response.header.revision

    async def get(self, key: bytes, serializable: bool = False) -> bytes | None:
        response = await self._call("Range", self._kv.Range, rpc.RangeRequest(key=key, serializable=serializable))
        return response.kvs[0].value if response.kvs else None

    # --- watch (the continuous backup) ------------------------------------------------

    async def watch_keyspace(self, start_revision: int) -> AsyncIterator[WatchBatch]:
        """Every change to every key from `start_revision` on, in revision order, without
        previous values. Large responses come fragmented (see WatchBatch.fragment); the
        member's progress notifications come as batches without events. Raises
        WatchCompacted when `start_revision` is gone, WatchCanceled when etcd cancels the
        watch otherwise, EtcdError when the stream fails."""
        call = self._watch.Watch()
        create = rpc.WatchCreateRequest(
            key=b"\0", range_end=b"\0", start_revision=start_revision, progress_notify=True, fragment=True
        )
        try:
            await call.write(rpc.WatchRequest(create_request=create))
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    raise EtcdError(self.endpoint, "Watch", None, "the member closed the watch stream")
                if response.compact_revision:
                    raise WatchCompacted(self.endpoint, start_revision, response.compact_revision)
                if response.canceled:
                    raise WatchCanceled(f"Watch on {self.endpoint} canceled: {response.cancel_reason or 'no reason'}")
                header = response.header
                yield WatchBatch(
                    header.cluster_id,
                    header.member_id,
                    header.revision,
                    tuple(_watch_event(e) for e in response.events),
                    response.fragment,
                )
        except grpc.aio.AioRpcError as e:
            raise EtcdError(self.endpoint, "Watch", e.code(), e.details() or str(e.code())) from None
        finally:
            call.cancel()

    async def lease_granted_ttl(self, lease: int) -> int | None:
        """The TTL `lease` was granted with, in seconds; None when it no longer exists."""
        request = rpc.LeaseTimeToLiveRequest(ID=lease)
        response = await self._call("LeaseTimeToLive", self._lease.LeaseTimeToLive, request)
        return response.grantedTTL if response.TTL >= 0 and response.grantedTTL > 0 else None

    # --- authentication (spec.auth; cluster/auth.py plans, execute_auth.py calls) -------
    # Passwords are sent, never logged: EtcdError carries etcd's message, which never holds one.

    async def auth_status(self) -> bool:
        response = await self._call("AuthStatus", self._auth.AuthStatus, rpc.AuthStatusRequest())
        return bool(response.enabled)

    async def auth_revision(self, timeout: float | None = None) -> int:
        """etcd's auth revision: bumped by every change to users, roles, their grants and
        passwords and the auth switch, none of which the KV watch carries. etcd answers
        through raft: it needs a quorum."""
        response = await self._call("AuthStatus", self._auth.AuthStatus, rpc.AuthStatusRequest(), timeout=timeout)
        return int(response.authRevision)

    async def auth_enable(self) -> None:
        await self._call("AuthEnable", self._auth.AuthEnable, rpc.AuthEnableRequest(), mutating=True)

    async def auth_disable(self) -> None:
        await self._call("AuthDisable", self._auth.AuthDisable, rpc.AuthDisableRequest(), mutating=True)

    async def user_list(self) -> list[str]:
        response = await self._call("UserList", self._auth.UserList, rpc.AuthUserListRequest())
        return list(response.users)

    async def user_roles(self, name: str) -> list[str]:
        response = await self._call("UserGet", self._auth.UserGet, rpc.AuthUserGetRequest(name=name))
        return list(response.roles)

    async def user_add(self, name: str, password: str | None) -> None:
        """A user without a password (None) authenticates only by a client certificate whose
        CN is its name (etcd 3.4+)."""
        if password is None:
            request = rpc.AuthUserAddRequest(name=name, options=auth_pb2.UserAddOptions(no_password=True))
        else:
            request = rpc.AuthUserAddRequest(name=name, password=password)
        await self._call("UserAdd", self._auth.UserAdd, request, mutating=True)

    async def user_delete(self, name: str) -> None:
        await self._call("UserDelete", self._auth.UserDelete, rpc.AuthUserDeleteRequest(name=name), mutating=True)

    async def user_change_password(self, name: str, password: str) -> None:
        request = rpc.AuthUserChangePasswordRequest(name=name, password=password)
        await self._call("UserChangePassword", self._auth.UserChangePassword, request, mutating=True)

    async def user_grant_role(self, user: str, role: str) -> None:
        request = rpc.AuthUserGrantRoleRequest(user=user, role=role)
        await self._call("UserGrantRole", self._auth.UserGrantRole, request, mutating=True)

    async def user_revoke_role(self, user: str, role: str) -> None:
        request = rpc.AuthUserRevokeRoleRequest(name=user, role=role)
        await self._call("UserRevokeRole", self._auth.UserRevokeRole, request, mutating=True)

    async def role_list(self) -> list[str]:
        response = await self._call("RoleList", self._auth.RoleList, rpc.AuthRoleListRequest())
        return list(response.roles)

    async def role_permissions(self, name: str) -> list[EtcdPermission]:
        response = await self._call("RoleGet", self._auth.RoleGet, rpc.AuthRoleGetRequest(role=name))
        return [EtcdPermission(p.key, p.range_end, auth_pb2.Permission.Type.Name(p.permType)) for p in response.perm]

    async def role_add(self, name: str) -> None:
        await self._call("RoleAdd", self._auth.RoleAdd, rpc.AuthRoleAddRequest(name=name), mutating=True)

    async def role_delete(self, name: str) -> None:
        await self._call("RoleDelete", self._auth.RoleDelete, rpc.AuthRoleDeleteRequest(role=name), mutating=True)

    async def role_grant_permission(self, role: str, permission: EtcdPermission) -> None:
        perm = auth_pb2.Permission(
            permType=auth_pb2.Permission.Type.Value(permission.perm_type),
            key=permission.key,
            range_end=permission.range_end,
        )
        request = rpc.AuthRoleGrantPermissionRequest(name=role, perm=perm)
        await self._call("RoleGrantPermission", self._auth.RoleGrantPermission, request, mutating=True)

    async def role_revoke_permission(self, role: str, key: bytes, range_end: bytes) -> None:
        request = rpc.AuthRoleRevokePermissionRequest(role=role, key=key, range_end=range_end)
        await self._call("RoleRevokePermission", self._auth.RoleRevokePermission, request, mutating=True)


def _watch_event(event) -> WatchEvent:
    kv = event.kv
    deleted = event.type == rpc.Event.EventType.DELETE
    return WatchEvent(kv.mod_revision, kv.key, None if deleted else kv.value, 0 if deleted else kv.lease)
