"""Runs every benchmark and prints one table.
`python -m bench [cluster|backup|restore|verification|memory|race|sealing|continuous|scrape|rotation]`.
`python -m bench scale` (many small clusters, about 15 minutes) and `python -m bench pitr` (a
point-in-time restore of 250,000 revisions, a few minutes) run only when named: bench/scale.py,
bench/pitr.py."""

from __future__ import annotations

import sys

from bench import continuous, pitr, race, rotation, scenarios, scrape, sealing


def main(argv: list[str]) -> int:
    everything = {
        "cluster",
        "backup",
        "restore",
        "verification",
        "memory",
        "race",
        "sealing",
        "continuous",
        "scrape",
        "rotation",
    }
    wanted = set(argv[1:]) or everything
    if "sealing" in wanted:  # needs no cluster: the testbin's etcd and memory only
        sealing.run()
        wanted.discard("sealing")
        if not wanted:
            return 0
    if "scrape" in wanted:  # needs no cluster: two etcd processes of the testbin
        scrape.run()
        wanted.discard("scrape")
        if not wanted:
            return 0
    if "continuous" in wanted:  # needs no cluster: etcd processes and a MinIO of its own
        continuous.run()
        wanted.discard("continuous")
        if not wanted:
            return 0
    if "scale" in wanted:
        from bench import scale

        scale.run()
        wanted.discard("scale")
        if not wanted:
            return 0
    with scenarios.Bench() as bench:
        if "cluster" in wanted:
            bench.cluster_timings()
        if wanted & {"backup", "restore", "memory"}:
            bench.backup_throughput_and_memory()
        if "restore" in wanted:
            bench.restore_overhead()
        if "verification" in wanted:
            bench.verification_time()
        if "memory" in wanted:
            bench.concurrent_backup_memory()
        if "rotation" in wanted:
            rotation.run(bench)
        if "pitr" in wanted:
            pitr.run(bench)
        if "race" in wanted:
            race.run(bench)  # last: it installs a second EtcdCluster CRD (another group)
        bench.report()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
