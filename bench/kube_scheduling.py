"""Pods bound per second on a real kube-apiserver: kube-scheduler v1.20.2, and Tephra beside it.

    python bench/kube_scheduling.py [--shape 100x2000] [--shape 1000x5000] [--scheduler kube-scheduler]
                                    [--scheduler tephra] [--backlog]

For each shape NxP, one dev cluster (etcd + kube-apiserver v1.20.2, kube/dev/) gets N Ready
nodes (32 cpu, 128Gi, 110 pods; the not-ready taint lifted), then each scheduler in turn: it
starts, P pods (100m cpu, 128Mi; ``schedulerName`` its own) are created as fast as the client
goes, and a watch notes when each pod first shows ``spec.nodeName``.  Per scheduler it prints
pods/s (P over first creation to last binding) and p50/p99 of creation-to-binding latency;
with two schedulers, the ratio.  Between two schedulers the pods are deleted (grace 0), so each
finds the nodes empty.  The client creates pods at a few hundred per second on a loaded 2-core
machine, which can be below a scheduler's rate: ``--backlog`` creates every pod first and counts
from the scheduler's start (rate and latency), so the scheduler is measured, not the client.
(Named kube_scheduling, not kube: a bench script may not shadow a Tephra package.)

kube-scheduler runs as the bench of issue 25 ran it: a kubeconfig, leader election off,
``--kube-api-qps 1000 --kube-api-burst 1000`` (deprecated in 1.20 but effective; the default 50
QPS limits it to ~50 pods/s).  ``--scheduler tephra`` runs bench/kube_tephra.py's side (bridge,
projector and scheduler), when that file is in the tree.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import math
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

from bench.host import cpu_loop_seconds, memory_walk_seconds
from kube.dev.accounts import ensure_namespace
from kube.dev.binaries import find_binaries
from kube.dev.cluster import DevCluster, free_port
from kube.rest import KubeClient, json_str, resource_path
from kube.sim_kubelet import NodeShape, create_sim_node, remove_not_ready_taints

NODE_RESOURCES = {"cpu": "32", "memory": "128Gi", "pods": "110"}
CREATE_CONCURRENCY = 64


class Side(Protocol):
    """One scheduler under test: the ``schedulerName`` its pods carry, and running it."""

    name: str
    scheduler_name: str

    def running(self, cluster: DevCluster, logs: Path) -> AbstractAsyncContextManager[None]:
        """Started and ready to bind when entered; stopped on exit."""
        ...


@dataclass
class KubeSchedulerSide:
    name: str = "kube-scheduler"
    scheduler_name: str = "default-scheduler"

    @asynccontextmanager
    async def running(self, cluster: DevCluster, logs: Path) -> AsyncIterator[None]:
        port = free_port()
        with (logs / "kube-scheduler.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                str(find_binaries().kube_scheduler),
                f"--kubeconfig={cluster.kubeconfig}",
                "--leader-elect=false",
                "--kube-api-qps=1000",
                "--kube-api-burst=1000",
                "--address=127.0.0.1",
                f"--port={port}",
                "--secure-port=0",
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                await _wait_healthy(f"http://127.0.0.1:{port}/healthz", process)
                yield
            finally:
                process.terminate()
                await process.wait()


async def _wait_healthy(url: str, process: asyncio.subprocess.Process) -> None:
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:  # noqa: S310 - http on loopback
                return bool(reply.status == 200)
        except OSError:
            return False

    async with asyncio.timeout(60):
        while not await asyncio.to_thread(healthy):
            if process.returncode is not None:
                raise RuntimeError(f"the scheduler exited with status {process.returncode}")
            await asyncio.sleep(0.2)


def _side(name: str) -> Side:
    if name == "kube-scheduler":
        return KubeSchedulerSide()
    if name == "tephra":
        try:
            module = importlib.import_module("bench.kube_tephra")
        except ModuleNotFoundError:
            raise SystemExit("--scheduler tephra needs bench/kube_tephra.py (the bridge's side)") from None
        side: Side = module.TephraSide()
        return side
    raise SystemExit(f"--scheduler: expected kube-scheduler or tephra, got {name!r}")


@dataclass
class Result:
    side: str
    pods: int
    seconds: float
    latencies: list[float]
    creating: float  # first creation to the last one's reply: the client's own limit

    @property
    def rate(self) -> float:
        return self.pods / self.seconds

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _pod(name: str, scheduler_name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [
                {
                    "name": "main",
                    "image": "bench",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


async def _nodes(client: KubeClient, count: int) -> None:
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(index: int) -> None:
        async with limit:
            node = await create_sim_node(client, NodeShape(f"bench-node-{index:05d}", NODE_RESOURCES))
            await remove_not_ready_taints(client, node)

    await asyncio.gather(*(one(i) for i in range(count)))


async def _measure(
    client: KubeClient, side: Side, cluster: DevCluster, logs: Path, pods: int, *, backlog: bool
) -> Result:
    namespace = f"bench-{side.name}"
    await ensure_namespace(client, namespace)
    collection = resource_path("v1", "pods", namespace=namespace)
    version = json_str(await client.get(collection), "metadata", "resourceVersion") or "0"
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    all_bound = asyncio.Event()

    async def watch() -> None:
        while not all_bound.is_set():  # a watch the server ends is opened again
            async for event in client.watch(collection, resource_version=version):
                name = json_str(event.object, "metadata", "name") or ""
                if json_str(event.object, "spec", "nodeName") and name not in bound:
                    bound[name] = time.perf_counter()
                    if len(bound) == pods:
                        all_bound.set()
                        return

    limit = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def create(index: int) -> None:
        name = f"pod-{index:06d}"
        async with limit:
            created[name] = time.perf_counter()
            await client.create(collection, _pod(name, side.scheduler_name))

    async def create_all() -> float:
        await asyncio.gather(*(create(i) for i in range(pods)))
        return time.perf_counter() - min(created.values())

    watcher = asyncio.create_task(watch())
    if backlog:  # every pod waits before the scheduler starts: its rate, not the client's
        creating = await create_all()
        async with side.running(cluster, logs):
            began = time.perf_counter()
            created = dict.fromkeys(created, began)
            await asyncio.wait_for(all_bound.wait(), timeout=max(300.0, pods / 5))
    else:
        async with side.running(cluster, logs):
            creating = await create_all()
            began = min(created.values())
            await asyncio.wait_for(all_bound.wait(), timeout=max(300.0, pods / 5))
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    latencies = [bound[name] - created[name] for name in created]
    # Bound pods go only with grace 0 (no kubelet); the next scheduler finds empty nodes.
    await client.request("DELETE", collection, body={"gracePeriodSeconds": 0})
    return Result(side.name, pods, max(bound.values()) - began, latencies, creating)


async def _shape(nodes: int, pods: int, sides: list[Side], *, backlog: bool) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="tephra-bench-kube-") as directory:
        logs = Path(directory)
        async with (
            DevCluster(logs / "cluster") as cluster,
            await KubeClient.connect(cluster.kubeconfig) as client,
        ):
            await _nodes(client, nodes)
            for side in sides:
                result = await _measure(client, side, cluster, logs, pods, backlog=backlog)
                results.append(result)
                print(
                    f"{nodes} nodes x {pods} pods{' (backlog)' if backlog else ''}, {side.name}: "
                    f"{result.rate:,.0f} pods/s ({result.seconds:.2f} s), "
                    f"latency p50 {result.percentile(0.5) * 1000:,.0f} ms "
                    f"p99 {result.percentile(0.99) * 1000:,.0f} ms; "
                    f"created at {pods / result.creating:,.0f} pods/s",
                    flush=True,
                )
    if len(results) == 2:
        ratio = results[1].rate / results[0].rate
        print(f"{nodes} nodes x {pods} pods: {results[1].side} / {results[0].side} = {ratio:.2f}x")
    return results


def _parse_shape(text: str) -> tuple[int, int]:
    nodes, _, pods = text.partition("x")
    return int(nodes), int(pods)


async def main(opts: argparse.Namespace) -> None:
    sides = [_side(name) for name in opts.scheduler or ["kube-scheduler"]]
    print(
        f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s"
        f" (bench/host.py; not measured), load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for nodes, pods in opts.shape or [(100, 2000)]:
        await _shape(nodes, pods, sides, backlog=opts.backlog)


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", type=_parse_shape, action="append", help="NODESxPODS (repeat); default 100x2000"
    )
    parser.add_argument(
        "--scheduler",
        action="append",
        help="kube-scheduler and/or tephra, in the order run (repeat); default kube-scheduler",
    )
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="create every pod before the scheduler starts; rate and latency count from its start",
    )
    return parser.parse_args()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_options()))
