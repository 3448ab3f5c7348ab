"""Wires the agent together: informers, nodes, scheduler, provisioner, pod workers,
the hosts file and the HTTP port; adopts what an earlier agent left running, and stops
every pod process on SIGTERM."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import signal
import sys
from collections import OrderedDict

import aiohttp

from nodeagent import names, server
from nodeagent import settings as settings_module
from nodeagent.events import Recorder
from nodeagent.hostsfile import HostsFile
from nodeagent.informer import Informer
from nodeagent.injector import FaultInjector
from nodeagent.ipam import IpPool
from nodeagent.kube import Kube
from nodeagent.launcher import Launcher
from nodeagent.nodes import NodeSet
from nodeagent.pod import PodWorker
from nodeagent.provisioner import Provisioner
from nodeagent.scheduler import Scheduler
from nodeagent.settings import Settings

log = logging.getLogger("nodeagent")

SHUTDOWN_GRACE = 5.0  # `localkube down` sends SIGKILL after 10 s
NAMES_DEBOUNCE = 0.2
FINISHED_MEMORY = 2000


class Agent:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.paths = settings.paths
        self.ipam = IpPool(self.paths.ipam_file, settings.layout.pod_subnet_octet)
        self.launcher = Launcher(self.paths.records_dir)
        self.hosts = HostsFile(settings.hosts_file, settings.layout.checkout_id)
        self.workers: dict[str, PodWorker] = {}
        self.finished: OrderedDict[str, None] = OrderedDict()
        self.scheduler = Scheduler(self)
        self.provisioner = Provisioner(self)
        self.injector = FaultInjector(self)
        self.ready = False
        self._names_wake = asyncio.Event()
        self._stop = asyncio.Event()

    # --- running ----------------------------------------------------------------------

    def _take_lock(self) -> None:
        """One agent per checkout: two would run every container twice."""
        path = self.paths.root / "agent.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(path, "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another node agent holds {path}; not starting a second one") from None

    async def run(self) -> None:
        self._take_lock()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        self.kube = await Kube.from_kubeconfig(self.settings.kubeconfig)
        self.session = aiohttp.ClientSession(trust_env=False)
        self.events = Recorder(self.kube)
        self.nodes = NodeSet(
            self.kube, self.settings.node_count, self.settings.layout.pod_subnet_octet, self.settings.agent_port
        )
        web = await server.start(self, self.settings.agent_port)
        tasks: list[asyncio.Task] = []
        try:
            await self.nodes.register()
            await self.provisioner.ensure_storage_class()
            self.pods = Informer(self.kube, "/api/v1/pods", self._on_pod)
            self.services = Informer(self.kube, "/api/v1/services", self._on_names)
            self.slices = Informer(self.kube, "/apis/discovery.k8s.io/v1/endpointslices", self._on_names)
            self.pvcs = Informer(self.kube, "/api/v1/persistentvolumeclaims", self._on_storage)
            self.pvs = Informer(self.kube, "/api/v1/persistentvolumes", self._on_storage)
            self.node_objects = Informer(self.kube, "/api/v1/nodes", lambda old, new: self.scheduler.notify())
            informers = [self.pods, self.services, self.slices, self.pvcs, self.pvs, self.node_objects]
            tasks = [asyncio.ensure_future(i.run()) for i in informers]
            await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in informers)), 60)
            self.launcher.kill_unadopted()
            self.ipam.retain(set(self.workers))
            self._write_names()
            tasks += [
                asyncio.ensure_future(c)
                for c in (self.nodes.run(), self.scheduler.run(), self.provisioner.run(), self._names_loop())
            ]
            self.ready = True
            log.info(
                "node agent ready: nodes %s, pods in %s, port %d",
                ", ".join(self.nodes.nodes),
                self.settings.layout.pod_cidr,
                self.settings.agent_port,
            )
            await self._stop.wait()
        finally:
            self.ready = False
            log.info("node agent stopping")
            for task in tasks:
                task.cancel()
            await self.shutdown()
            await web.cleanup()
            await self.session.close()
            await self.kube.close()

    async def shutdown(self) -> None:
        for worker in list(self.workers.values()):
            await worker.shutdown()
        await self.launcher.stop_all(SHUTDOWN_GRACE)
        try:
            self.hosts.remove()
        except OSError as e:
            log.warning("could not clean %s: %s", self.settings.hosts_file, e)

    # --- informer callbacks -----------------------------------------------------------

    def _on_pod(self, old: dict | None, new: dict | None) -> None:
        if new is None:
            worker = self.workers.get(old["metadata"]["uid"])
            if worker is not None:
                worker.removed()
        else:
            uid = new["metadata"]["uid"]
            if new["spec"].get("nodeName") in self.nodes and uid not in self.finished:
                worker = self.workers.get(uid)
                if worker is None:
                    worker = self.workers[uid] = PodWorker(self, new)
                    worker.start()
                worker.update(new)
            if not new["spec"].get("nodeName"):
                self.scheduler.notify()
        if (
            old is None
            or new is None
            or old["spec"].get("nodeName") != new["spec"].get("nodeName")
            or (old.get("status") or {}).get("phase") != (new.get("status") or {}).get("phase")
        ):
            self.scheduler.notify()
        self.names_changed()

    def _on_names(self, old: dict | None, new: dict | None) -> None:
        self.names_changed()

    def _on_storage(self, old: dict | None, new: dict | None) -> None:
        self.provisioner.notify()

    # --- used by pod workers ----------------------------------------------------------

    def pod_finished(self, worker: PodWorker) -> None:
        self.workers.pop(worker.uid, None)
        self.finished[worker.uid] = None
        while len(self.finished) > FINISHED_MEMORY:
            self.finished.popitem(last=False)
        self.ipam.release(worker.uid)
        self.names_changed()

    def service_env(self) -> dict[str, str]:
        port = str(self.settings.apiserver_port)
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
        }

    def schedulable_nodes(self) -> dict[str, dict]:
        return {
            node.name: obj
            for node in self.nodes.available()
            if (obj := self.node_objects.get("", node.name)) is not None
        }

    # --- names ------------------------------------------------------------------------

    def names_changed(self, now: bool = False) -> None:
        if now:
            self._write_names()
        else:
            self._names_wake.set()

    async def _names_loop(self) -> None:
        while True:
            await self._names_wake.wait()
            await asyncio.sleep(NAMES_DEBOUNCE)
            self._names_wake.clear()
            self._write_names()

    def _write_names(self) -> None:
        ips = {uid: w.ip for uid, w in self.workers.items() if w.ip and not w.terminating}
        live = [p for p in self.pods.items() if self._resolvable(p["metadata"]["uid"])]
        try:
            if self.hosts.write(names.records(live, self.services.items(), self.slices.items(), ips)):
                log.debug("hosts file updated")
        except OSError as e:
            log.warning("could not update %s: %s", self.settings.hosts_file, e)

    def _resolvable(self, uid: str) -> bool:
        worker = self.workers.get(uid)
        return uid not in self.finished and (worker is None or not worker.terminating)

    # --- faults and introspection -----------------------------------------------------

    def worker_for(self, namespace: str, name: str) -> PodWorker | None:
        return next(
            (w for w in self.workers.values() if w.namespace == namespace and w.name == name and not w.terminating),
            None,
        )

    def workers_on(self, node: str) -> list[PodWorker]:
        return [w for w in self.workers.values() if w.node.name == node]

    async def inject_fault(self, action: str, body: dict) -> dict:
        return await self.injector.inject(action, body)

    def pod_info(self, namespace: str, name: str) -> dict | None:
        worker = self.worker_for(namespace, name)
        if worker is None:
            return None
        return {
            "uid": worker.uid,
            "node": worker.node.name,
            "ip": worker.ip,
            "containers": {
                r.name: {
                    "pid": r.process.pid if r.process is not None and r.process.running() else None,
                    "restartCount": r.restart_count,
                    "init": r.init,
                }
                for r in worker.all_runners()
            },
        }


def main() -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    settings = settings_module.from_environment()
    asyncio.run(Agent(settings).run())
