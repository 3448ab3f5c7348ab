"""The continuous backup's writer: one long-lived task per continuous EtcdBackup, writing one
chain. It watches the whole keyspace of one member from the revision after the chain's last
segment in the store (after its base snapshot, for a new chain), groups events into whole
revisions (core/backup/segment_cutting.py), cuts a segment every `segmentSeconds` or
`segmentBytes`, seals it like the backup's snapshots (core/backup/segment_sealing.py: the
backup's compression and key, read once when the writer starts) and uploads it
(segment_store.upload_segment), one at a time, in order.

Memory: it holds `2 × segmentBytes` of the operator-wide budget while it runs: the segment
being filled and the one uploading. When a segment is due while the previous upload has not
finished (the store is slow or down; uploads are retried), it stops reading the watch
(etcd then holds the events, gRPC's flow control pushing back) rather than buffer more.

While its cluster goes to sleep with fewer members left than a quorum (writes fenced,
core/hibernation.writes_fenced), no member knows a leader for long and no linearizable read
can be answered, yet the members left hold every revision the cluster acknowledged: the
writer then watches the one with the highest revision and reads that member's own revision
in place of the cluster's, so its chain reaches the last acknowledged revision before the
cluster planner stops them.

It stops on its own only when its chain cannot go on (ChainBreak: the revision it needs was
compacted, the cluster ID changed, a revision is missing or the cluster's revision, read
linearizably, went back; a member behind the chain while the cluster is not is catching up,
and is waited for or replaced); the controller then records the break and takes a full
snapshot. A member that stops answering is replaced by another of the same cluster, resuming
after the last revision grouped. Uploads are S3 writes, which a replica that lost its
leadership may not send (leadership_fence, asked again before each attempt goes on the wire):
the writer then stops without a break. Each segment and manifest is created only where nothing
is stored yet (If-None-Match: *); a name another writer took stops this one without a break,
and the writer started next resumes after whatever the store holds. A stopped writer closes its
storage first, so an upload still in a worker thread is never sent after it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from etcd_operator.clients.etcd.client import (
    EtcdError,
    EtcdMemberClient,
    WatchBatch,
    WatchCanceled,
    WatchCompacted,
)
from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.s3 import S3Storage, StorageClosed, StorageError
from etcd_operator.controllers.backup import segment_store
from etcd_operator.controllers.backup.encoding import backup_encoding, backup_keys
from etcd_operator.controllers.backup.source_candidates import (
    SourceUnavailable,
    ask_candidates,
    chosen,
    find_candidates_counted,
)
from etcd_operator.controllers.cluster.tls_observer import operator_credentials
from etcd_operator.core import hibernation
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import sealed, segment_sealing
from etcd_operator.core.backup.manifest import Identity, Ignored
from etcd_operator.core.backup.segment_cutting import (
    Cut,
    RevisionGap,
    RevisionGrouper,
    SeenClock,
    SegmentCutter,
    WatchProgress,
)
from etcd_operator.core.backup.segments import KeyChange, SegmentManifest, segment_key, segments_prefix
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.buffer_budget import MemoryBudget, process_budget
from etcd_operator.core.leadership_fence import LeadershipLost
from etcd_operator.core.shard import Shard
from etcd_operator.core.timefmt import now_text

logger = logging.getLogger(__name__)

WATCH_QUEUE = 2  # watch responses read ahead of the grouping, at most
RETRY_FIRST, RETRY_MOST = 0.5, 10.0  # seconds between attempts (reconnects, uploads), doubling
LEASES_REMEMBERED = 65_536  # granted TTLs learnt; past this they are learnt again
LEASE_ATTEMPTS = 3  # asks for one lease's TTL before the chain breaks for it
# A watch on a member cut off from quorum stays open and silent. Every HEARTBEAT_SECONDS the
# writer reads the cluster's revision through that member, linearizably; a member that cannot
# answer, or whose watch has not delivered a revision the cluster holds within STALL_SECONDS,
# is left for another.
HEARTBEAT_SECONDS = 2.0
STALL_SECONDS = 10.0
AUTH_READ_SECONDS = 2.0  # the auth revision read at each cut: a segment waits at most this for it
# While caught up, the heartbeat reads the auth revision too when the last read is this old: an
# auth change on a cluster that writes nothing is seen (and a restore to a time after the last
# cut can tell the auth state), at one raft entry per this many seconds.
AUTH_HEARTBEAT_SECONDS = 10.0
CLOCK_BEHIND_REPORTED = 1.0  # seconds behind the chain's last stamp that are logged (once per writer)


class WatchStalled(Exception):
    pass


class MemberBehind(Exception):
    """The member watched is behind the chain's last revision while the cluster is not: it is
    catching up (after a restart). Another member is watched, or this one once caught up."""


class ChainBroken(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def _backoff(delay: float) -> float:
    return min(delay * 2, RETRY_MOST)


class SegmentWriter:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        identity: Identity,
        spec: BackupSpec,
        continuous: cb.ContinuousSpec,
        start: cb.ChainStart,
        shard: Shard = Shard(),
        budget: MemoryBudget | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.kube = kube_client
        self.identity = identity
        self.spec = spec
        self.continuous = continuous
        self.start_point = start
        self.shard = shard
        self.budget = budget
        self.clock = clock  # seen_at and upload times: the operator's wall clock
        self._clock_behind_reported = False
        self._seen = SeenClock()  # seen_at never before the chain's last stamp, whichever writer made it
        self.monotonic = monotonic  # when to cut
        self.chain = start.chain
        self.last_revision = start.base_revision  # the last revision uploaded
        self.cluster_revision: int | None = None
        self.last_segment_at: float | None = None
        self.caught_up: tuple[int, float] | None = None  # StreamView.caught_up
        self.store_error: str | None = None
        self.waiting: str | None = "starting"
        self.broken: cb.ChainBreak | None = None
        self.auth_revision: int | None = None  # the newest auth revision read for the chain
        self.auth_read_at: float | None = None  # when the read that last gave it was sent (self.clock)
        self.stopped_because: str | None = None  # it ended without a break
        self._sequence = 1
        self._cut_next = start.base_revision + 1  # the first revision of the next segment
        self._written: list[SegmentManifest] = []
        self._known_leases: dict[int, int | None] = {}  # ID: granted TTL, None when gone
        self._reported_leases: set[int] = set()
        self._upload: asyncio.Task | None = None
        self._task: asyncio.Task | None = None
        self._storage: S3Storage | None = None
        self._encoding = sealed.PLAIN  # the backup's, read when the task starts
        self._keys: dict[str, bytes] = {}  # every key of the backup's Secret: a manifest resumed from authenticates
        self.ignored: list[Ignored] = []  # manifests of the chain passed over on resuming: they did not authenticate
        self.fenced = False  # the cluster goes to sleep and no quorum is left (as of the last member chosen)

    # --- what the controller sees -------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"segments-{self.identity.namespace}/{self.identity.backup}")

    @property
    def ended(self) -> bool:
        return self._task is not None and self._task.done()

    def view(self) -> cb.StreamView:
        return cb.StreamView(
            chain=self.chain,
            last_revision=self.last_revision,
            broken=self.broken,
            store_error=self.store_error,
            cluster_revision=self.cluster_revision,
            last_segment_at=self.last_segment_at,
            waiting=self.waiting,
            caught_up=self.caught_up,
            ignored=tuple(i.key for i in self.ignored),
            auth_revision=self.auth_revision,
            auth_read_at=self.auth_read_at,
            cluster_id=self.start_point.cluster_id,
        )

    def drain(self) -> list[SegmentManifest]:
        """The segments uploaded since the last call."""
        written, self._written = self._written, []
        return written

    async def stop(self) -> None:
        if self._storage is not None:
            self._storage.refuse_writes()  # before anything else: a thread's upload is not sent after this
        for task in (self._task, self._upload):
            if task is not None and not task.done():
                task.cancel()
        await asyncio.gather(*(t for t in (self._task, self._upload) if t is not None), return_exceptions=True)

    # --- the task ----------------------------------------------------------------------

    async def _run(self) -> None:
        budget = self.budget or process_budget()
        await budget.acquire(self.continuous.budget_bytes)
        sealing = 0  # what sealing a segment holds, once the encoding is known
        try:
            self._encoding = await backup_encoding(self.kube, self.identity.namespace, self.spec)
            self._keys = await backup_keys(self.kube, self.identity.namespace, self.spec)
            await budget.acquire(self._encoding.working_bytes)
            sealing = self._encoding.working_bytes
            location = await s3_location(self.kube, self.identity.namespace, self.spec.s3)
            storage = self._storage = await asyncio.to_thread(S3Storage, location, 4)
            try:
                await self._resume(storage)
                await self._stream(storage)
            finally:
                await asyncio.to_thread(storage.close)
        except ChainBroken as e:
            logger.warning("continuous backup %s: chain %s broke: %s", self._name, self.chain, e.message)
            self.broken = cb.ChainBreak(self.chain, e.reason, e.message, self.last_revision)
        except LeadershipLost as e:
            self.stopped_because = str(e)
        except segment_store.SegmentTaken as e:  # the controller starts a writer that resumes from the store
            logger.warning("continuous backup %s: chain %s: %s; the writer stops", self._name, self.chain, e)
            self.stopped_because = str(e)
        except Exception as e:  # the controller starts a new writer on the same chain
            logger.exception("continuous backup %s: the writer of chain %s failed", self._name, self.chain)
            self.stopped_because = f"{type(e).__name__}: {e}"
        finally:
            budget.release(self.continuous.budget_bytes + sealing)

    @property
    def _name(self) -> str:
        return f"{self.identity.namespace}/{self.identity.backup}"

    def _segments_prefix(self) -> str:
        return segments_prefix(self.spec.prefix, self.identity.namespace, self.identity.backup)

    async def _resume(self, storage: S3Storage) -> None:
        """After the chain's last finished segment in the store, or after its base."""
        delay = RETRY_FIRST
        while True:
            try:
                prefix = self._segments_prefix()
                self.ignored = []
                last = await segment_store.last_segment(
                    storage, f"{prefix}{self.chain}/", prefix, self.chain, self._keys, self.ignored
                )
                break
            except StorageError as e:
                self.store_error = str(e)
                await asyncio.sleep(delay)
                delay = _backoff(delay)
        self.store_error = None
        if last is not None:
            self._sequence = last.sequence + 1
            self._cut_next = last.last_revision + 1
            self.last_revision = last.last_revision
            self._seen = SeenClock(last.last_seen_at)
            if last.auth_revision is not None:  # the writer before read it at that cut
                self.auth_revision = max(self.auth_revision or 0, last.auth_revision)
        logger.info("continuous backup %s: chain %s from revision %d", self._name, self.chain, self._cut_next)

    async def _stream(self, storage: S3Storage) -> None:
        grouper = RevisionGrouper(self._cut_next)
        cutter = SegmentCutter(self.continuous.segment_seconds, self.continuous.segment_bytes)
        delay = RETRY_FIRST
        while True:
            try:
                endpoint, tls = await self._member()
                async with EtcdMemberClient(endpoint, timeout=10, tls=tls, keepalive=True) as client:
                    await self._check_member(client, grouper.next_revision)
                    self.waiting = None
                    delay = RETRY_FIRST
                    await self._follow(client, storage, grouper, cutter)
            except WatchCompacted as e:
                raise ChainBroken(cb.COMPACTED, str(e)) from None
            except RevisionGap as e:
                raise ChainBroken(cb.REVISION_GAP, str(e)) from None
            except (SourceUnavailable, EtcdError, WatchCanceled, WatchStalled, MemberBehind, TimeoutError) as e:
                self.waiting = f"no member to watch: {e}"
                grouper.drop_open()  # its events are watched again
                await asyncio.sleep(delay)
                delay = _backoff(delay)

    async def _member(self):
        candidates, body, pods = await find_candidates_counted(
            self.kube, self.identity.namespace, self.spec.cluster, self.shard
        )
        record = hibernation.HibernationRecord.from_dict((body.get("status") or {}).get("hibernation"))
        self.fenced = hibernation.writes_fenced(record, pods)
        tls = await operator_credentials(self.kube, body)
        member = chosen(candidates, await ask_candidates(candidates, tls), body, fenced=self.fenced)
        return member.endpoint, tls

    async def _cluster_revision(self, client: EtcdMemberClient) -> int:
        """The cluster's revision, read linearizably; while writes are fenced, the member's
        own: no quorum is left to commit anything after it."""
        if self.fenced:
            return (await client.status()).revision
        return await client.linearizable_revision()

    async def _check_member(self, client: EtcdMemberClient, next_revision: int) -> None:
        status = await client.status()
        cluster_id = f"{status.cluster_id:x}"
        if cluster_id != self.start_point.cluster_id:
            raise ChainBroken(
                cb.CLUSTER_ID_CHANGED,
                f"the cluster's ID is now {cluster_id}, the chain's is {self.start_point.cluster_id} (a restore?)",
            )
        if status.revision < next_revision - 1:
            if self.fenced:  # no linearizable read is answered: another member may hold more
                raise MemberBehind(
                    f"the member is at revision {status.revision} and no quorum is left; the chain holds revisions "
                    f"up to {next_revision - 1}"
                )
            # The member's own revision: a follower catching up after a restart is behind the
            # cluster. Only the cluster's, read linearizably, going back breaks the chain.
            cluster_revision = await client.linearizable_revision()
            if cluster_revision < next_revision - 1:
                raise ChainBroken(
                    cb.REVISION_WENT_BACK,
                    f"the cluster is at revision {cluster_revision}, behind the chain's {next_revision - 1}",
                )
            raise MemberBehind(
                f"the member is at revision {status.revision}, catching up to the cluster's {cluster_revision}; "
                f"the chain holds revisions up to {next_revision - 1}"
            )
        self.cluster_revision = status.revision

    async def _follow(
        self, client: EtcdMemberClient, storage: S3Storage, grouper: RevisionGrouper, cutter: SegmentCutter
    ) -> None:
        queue: asyncio.Queue[WatchBatch | BaseException] = asyncio.Queue(WATCH_QUEUE)

        async def read() -> None:
            try:
                async for batch in client.watch_keyspace(grouper.next_revision):
                    await queue.put(batch)
            except Exception as e:
                await queue.put(e)

        async def heartbeat() -> None:
            progress = WatchProgress(STALL_SECONDS)
            try:
                while True:
                    await asyncio.sleep(HEARTBEAT_SECONDS)
                    sent = self.clock()  # every revision committed before it is in the answer
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel
                    # that meets the answer, and the writer's stop would then wait on this loop for good.
                    async with asyncio.timeout(HEARTBEAT_SECONDS * 2):
                        revision = await self._cluster_revision(client)
                    self.cluster_revision = max(self.cluster_revision or 0, revision)
                    if revision == self.last_revision:
                        self.caught_up = (revision, sent)
                        if self.auth_read_at is None or sent - self.auth_read_at >= AUTH_HEARTBEAT_SECONDS:
                            await self._read_auth_revision(client)
                    holding_back = self._upload is not None and not self._upload.done()
                    stalled = progress.observe(revision, grouper.next_revision - 1, self.monotonic(), holding_back)
                    if stalled:
                        raise WatchStalled(stalled)
            except Exception as e:
                await queue.put(e)

        reader = asyncio.create_task(read())
        watchdog = asyncio.create_task(heartbeat())
        try:
            while True:
                left = cutter.seconds_left(self.monotonic())
                try:
                    async with asyncio.timeout(None if left == float("inf") else max(left, 0.0)):
                        item = await queue.get()
                except TimeoutError:
                    item = None
                if isinstance(item, BaseException):
                    raise item
                if item is not None:
                    await self._take(item, client, storage, grouper, cutter)
                if cutter.due(self.monotonic()):
                    await self._cut(client, storage, cutter)
                upload = self._upload
                if upload is not None and upload.done() and not upload.cancelled() and upload.exception():
                    await upload  # its error ends the writer now, not at the next cut
        finally:
            reader.cancel()
            watchdog.cancel()
            await asyncio.gather(reader, watchdog, return_exceptions=True)

    async def _take(
        self,
        batch: WatchBatch,
        client: EtcdMemberClient,
        storage: S3Storage,
        grouper: RevisionGrouper,
        cutter: SegmentCutter,
    ) -> None:
        if f"{batch.cluster_id:x}" != self.start_point.cluster_id:
            raise ChainBroken(cb.CLUSTER_ID_CHANGED, f"the watch answers for cluster {batch.cluster_id:x}")
        self.cluster_revision = max(self.cluster_revision or 0, batch.header_revision)
        events = ((e.revision, KeyChange(e.key, e.value, e.lease)) for e in batch.events)
        seen_at = self._seen.stamp(self.clock())
        if self._seen.behind > CLOCK_BEHIND_REPORTED and not self._clock_behind_reported:
            self._clock_behind_reported = True
            logger.warning(
                "continuous backup %s: this operator's clock is %.1fs behind chain %s's last stamp; revisions are "
                "stamped with that stamp until it catches up",
                self._name,
                self._seen.behind,
                self.chain,
            )
        for record in grouper.feed(events, complete=not batch.fragment, seen_at=seen_at):
            cutter.add(record, self.monotonic())
            if cutter.full():
                await self._cut(client, storage, cutter)

    async def _cut(self, client: EtcdMemberClient, storage: S3Storage, cutter: SegmentCutter) -> None:
        await self._learn_leases(client, cutter.leases_used())
        auth_revision = await self._read_auth_revision(client)
        cut = cutter.take(self._known_leases, self._reported_leases)
        first, last = cut.body.revisions[0].revision, cut.body.revisions[-1].revision
        if first != self._cut_next:  # the grouper checks this too: a chain is never written with a gap
            raise ChainBroken(cb.REVISION_GAP, f"a segment would start at {first}, not {self._cut_next}")
        self._cut_next = last + 1
        if self._upload is not None:
            await self._upload  # one upload at a time, in order: while it waits, the watch is not read
        sequence, self._sequence = self._sequence, self._sequence + 1
        self._upload = asyncio.create_task(self._upload_segment(storage, sequence, cut, auth_revision))

    async def _read_auth_revision(self, client: EtcdMemberClient) -> int | None:
        """The member's auth revision, read at a cut after the watch gave it every revision of
        the segment (at or after the auth state of each), or by the heartbeat while caught up;
        kept with the moment the read was sent. None (recorded as unknown) when it does not
        answer soon, or no quorum is left (etcd answers it through raft); the segment is not
        held back for it."""
        if self.fenced:
            return None
        sent = self.clock()  # the answer is the auth state at or after this moment
        try:
            revision = await client.auth_revision(timeout=AUTH_READ_SECONDS)
        except EtcdError as e:
            logger.warning("continuous backup %s: auth revision not read: %s", self._name, e.detail)
            return None
        if self.auth_revision is None or revision >= self.auth_revision:
            self.auth_revision, self.auth_read_at = revision, sent
        return revision

    async def _learn_leases(self, client: EtcdMemberClient, used: set[int]) -> None:
        """The granted TTL of each lease not met before, asked once (a restore grants it
        again). A lease already gone (revoked or expired: its keys' deletions follow in the
        watch) is recorded as gone. A lease the member cannot answer for, after a few tries,
        breaks the chain: a segment without it would not replay past its first put."""
        if len(self._known_leases) > LEASES_REMEMBERED:
            self._known_leases.clear()
            self._reported_leases.clear()
        for lease in sorted(used - self._known_leases.keys()):
            delay, tried = RETRY_FIRST, 1
            while True:
                try:
                    self._known_leases[lease] = await client.lease_granted_ttl(lease)
                    break
                except EtcdError as e:
                    if tried >= LEASE_ATTEMPTS:
                        if self._upload is not None:
                            await self._upload  # the chain keeps every segment cut before
                        raise ChainBroken(
                            cb.LEASE_UNKNOWN,
                            f"lease {lease:x}, which a put after revision {self._cut_next - 1} uses, could not be "
                            f"learnt ({e.detail}); a segment without it would not replay",
                        ) from None
                    await asyncio.sleep(delay)
                    delay, tried = _backoff(delay), tried + 1

    async def _upload_segment(
        self, storage: S3Storage, sequence: int, cut: Cut, auth_revision: int | None = None
    ) -> None:
        records = cut.body.revisions
        first, last = records[0].revision, records[-1].revision
        # Sealing a 2 MiB segment takes 20-30 ms of CPU (zstd, AES-GCM): never on the event loop.
        data, digest = await asyncio.to_thread(segment_sealing.stored_form, cut.body, self._encoding)
        sealing = segment_sealing.recorded(self._encoding)
        manifest = SegmentManifest(
            segment_key=segment_key(
                self.spec.prefix, self.identity.namespace, self.identity.backup, self.chain, sequence, first, last
            ),
            backup=self.identity.backup,
            namespace=self.identity.namespace,
            backup_uid=self.identity.uid,
            cluster_id=self.start_point.cluster_id,
            chain=self.chain,
            base_revision=self.start_point.base_revision,
            base_key=self.start_point.base_key,
            sequence=sequence,
            first_revision=first,
            last_revision=last,
            revisions=len(records),
            events=cut.body.events,
            first_seen_at=records[0].seen_at,
            last_seen_at=records[-1].seen_at,
            size=len(data),
            sha256=digest,
            created_at=now_text(),
            compression=sealing["compression"],
            encryption=sealing["encryption"],
            key_id=sealing["key_id"],
            auth_revision=auth_revision,
        )
        delay = RETRY_FIRST
        while True:
            try:
                await segment_store.upload_segment(storage, manifest, data, self._encoding.signing_key)
                break
            except StorageClosed:
                return  # the writer is being stopped: nothing more of it is sent
            except StorageError as e:
                self.store_error = str(e)
                logger.warning("continuous backup %s: segment %d not uploaded, retrying: %s", self._name, sequence, e)
                await asyncio.sleep(delay)
                delay = _backoff(delay)
        self.store_error = None
        self.last_revision = last
        self.last_segment_at = self.clock()
        self._written.append(manifest)
