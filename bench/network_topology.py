"""What network-topology-aware scheduling costs a session: the same jobs without a topology,
in hard mode up to tier 1 and tier 2, and in soft mode.

Nodes (64 cpu, 8 GPU) sit in racks of 16 (tier-1 hyperNodes), racks in spines of 8 (tier 2);
jobs are gangs of 8 or 16 eight-GPU workers (one per node), so a gang fits one rack.
Config: gang, predicates, proportion, nodeorder, binpack and network-topology-aware. Prints
the session's CPU seconds (``time.process_time``, comparable on a loaded host) per case, the
ratio to the case without a topology, the bindings and how many gangs stayed inside one rack.

Run:  python bench/network_topology.py [--nodes 512] [--jobs 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

from scheduler.core.config import parse_scheduler_config
from scheduler.core.decisions import Bind
from scheduler.core.session import run_session
from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    HyperNodeMember,
    Job,
    NetworkTopology,
    Node,
    PodGroupPhase,
    Queue,
    Task,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RACK = 16
SPINE = 8
CONFIG = parse_scheduler_config(
    {
        "actions": "enqueue, allocate",
        "tiers": [
            {"plugins": [{"name": "gang"}, {"name": "predicates"}, {"name": "proportion"}]},
            {"plugins": [{"name": "nodeorder"}, {"name": "binpack"}, {"name": "network-topology-aware"}]},
        ],
    }
)


def cluster(nodes: int, jobs: int, seed: int = 11) -> ClusterSnapshot:
    rng = random.Random(seed)
    node_list = tuple(
        Node(f"n{i:05d}", {"cpu": 64000, "memory": 2**39, "nvidia.com/gpu": 8, "pods": 110})
        for i in range(nodes)
    )
    racks = [
        HyperNode(
            f"rack{r:03d}",
            1,
            tuple(HyperNodeMember("Node", exact=n.name) for n in node_list[r * RACK : (r + 1) * RACK]),
        )
        for r in range((nodes + RACK - 1) // RACK)
    ]
    spines = [
        HyperNode(
            f"spine{s:02d}",
            2,
            tuple(HyperNodeMember("HyperNode", exact=h.name) for h in racks[s * SPINE : (s + 1) * SPINE]),
        )
        for s in range((len(racks) + SPINE - 1) // SPINE)
    ]
    job_list = []
    for j in range(jobs):
        size = rng.choice((8, 16))
        tasks = tuple(
            Task("ml", f"train{j:04d}-w-{i}", {"cpu": 8000, "memory": 2**35, "nvidia.com/gpu": 8})
            for i in range(size)
        )
        job_list.append(
            Job("ml", f"train{j:04d}", "q", min_member=size, phase=PodGroupPhase.INQUEUE, tasks=tasks,
                min_resources={"cpu": 8000 * size, "nvidia.com/gpu": 8 * size})
        )  # fmt: skip
    return ClusterSnapshot(
        nodes=node_list, queues=(Queue("q"),), jobs=tuple(job_list), hypernodes=(*racks, *spines)
    )


def with_topology(snapshot: ClusterSnapshot, topology: NetworkTopology | None) -> ClusterSnapshot:
    return dataclasses.replace(
        snapshot, jobs=tuple(dataclasses.replace(j, network_topology=topology) for j in snapshot.jobs)
    )


def run(snapshot: ClusterSnapshot) -> tuple[float, int, int]:
    """(CPU seconds, bindings, gangs placed inside one rack)."""
    start = time.process_time()
    result = run_session(snapshot, CONFIG, NOW)
    cpu = time.process_time() - start
    by_job: dict[str, set[int]] = {}
    for d in result.decisions:
        if isinstance(d, Bind):
            by_job.setdefault(d.job, set()).add(int(d.node[1:]) // RACK)
    binds = sum(1 for d in result.decisions if isinstance(d, Bind))
    return cpu, binds, sum(1 for racks in by_job.values() if len(racks) == 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    base = cluster(args.nodes, args.jobs)
    cases = (
        ("no topology", None),
        ("hard, tier <= 1", NetworkTopology("hard", 1)),
        ("hard, tier <= 2", NetworkTopology("hard", 2)),
        ("soft", NetworkTopology("soft")),
    )
    print(f"{args.nodes} nodes ({len(base.hypernodes)} hyperNodes), {args.jobs} gangs of 8 or 16 GPU workers")
    print(f"{'case':<18} {'cpu s':>8} {'ratio':>7} {'binds':>7} {'gangs in one rack':>18}")
    reference = None
    for label, topology in cases:
        cpu, binds, packed = run(with_topology(base, topology))
        reference = reference or cpu
        print(f"{label:<18} {cpu:8.2f} {cpu / reference:7.2f} {binds:7d} {packed:18d}")


if __name__ == "__main__":
    main()
