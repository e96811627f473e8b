"""Pods bound per second on one real kube-apiserver: kube-scheduler v1.20.2, then Tephra.

    python bench/kube_scheduling.py [--shape NODESxPODS]... [--scheduler kube-scheduler|tephra]...
                                    [--backlog]

The side-by-side bench of issue 25 in one run (``bench/kube.py`` in the issue; a bench script
may not shadow the ``kube`` package).  With no options: 100 nodes x 2,000 pods, then 1,000 x
5,000, each with kube-scheduler and then Tephra back to back on the same apiserver, and the
ratio of their rates.

For each shape NxP, one dev cluster (etcd + kube-apiserver v1.20.2, kube/dev/) gets N Ready
nodes (32 cpu, 128Gi, 110 pods; the not-ready taint lifted), then each scheduler in turn: it
starts, P pods (100m cpu, 128Mi; ``schedulerName`` its own) are created as fast as the client
goes (by ``--creators`` processes of their own, 2 by default, so the bench's watch and the
creation do not share one Python thread), and a watch notes when each pod first shows
``spec.nodeName``.  Per scheduler it prints
pods/s (P over first creation to last binding), p50/p99 of creation-to-binding latency, and the
CPU milliseconds per pod each process took meanwhile (the apiserver, etcd, the scheduler's own
processes, the bench), which a loaded host moves much less than the rates.  Between two
schedulers the pods are deleted (grace 0), so each finds the nodes empty.  The client creates
pods at a few hundred per second on a loaded 2-core machine, which can be below a scheduler's
rate: ``--backlog`` creates every pod first, so the scheduler is measured, not the client: the
rate counts from the first binding to the last (neither scheduler's start-up nor its first
listing of the pods, which Tephra's readiness includes and kube-scheduler's /healthz does not),
latency from the moment the scheduler is ready.

kube-scheduler runs as the bench of issue 25 ran it: a kubeconfig, leader election off,
``--kube-api-qps 1000 --kube-api-burst 1000`` (deprecated in 1.20 but effective; the default 50
QPS limits it to ~50 pods/s).  Tephra runs as deployed: an embedded broker and PostgreSQL (not
durable), then ``tephra projector``, ``tephra scheduler`` and ``tephra kube-bridge`` (the
admin's kubeconfig, ``--install-crds``) as processes of their own; each pod (``schedulerName:
tephra``, no PodGroup) is a one-pod gang.  The services' logs are in the bench's temporary log
folder (``--keep-logs DIR`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg

from api.embedded import EmbeddedBroker, EmbeddedPostgres
from bench.host import cpu_loop_seconds, memory_walk_seconds
from kube.dev.accounts import ensure_namespace
from kube.dev.binaries import find_binaries
from kube.dev.cluster import DevCluster, free_port
from kube.rest import KubeClient, json_str, resource_path
from kube.sim_kubelet import NodeShape, create_sim_node, remove_not_ready_taints
from projector.migrate import apply_migrations

ROOT: Final = Path(__file__).resolve().parents[1]
NODE_RESOURCES: Final = {"cpu": "32", "memory": "128Gi", "pods": "110"}
#: Requests in flight creating nodes, and creating pods across every creator process.
CREATE_CONCURRENCY: Final = 64
CREATORS: Final = 2
SHAPES: Final = ((100, 2000), (1000, 5000))
SCHEDULERS: Final = ("kube-scheduler", "tephra")
TEPHRA_SERVICES: Final = ("projector", "scheduler", "kube-bridge")
#: The bridge logs this once it has listed every watched resource and read the projection.
SYNCED: Final = b"synced ("
CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


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


@dataclass
class TephraSide:
    name: str = "tephra"
    scheduler_name: str = "tephra"
    #: A session every 0.1 s at most when nothing wakes the scheduler sooner (its default is 1 s).
    schedule_period: float = 0.1

    @asynccontextmanager
    async def running(self, cluster: DevCluster, logs: Path) -> AsyncIterator[None]:
        logs.chmod(0o711)  # noqa: ASYNC240 - PostgreSQL runs as nobody under root and must enter it
        with (
            EmbeddedPostgres(logs / "postgres", durable=False) as postgres,
            EmbeddedBroker(log_path=logs / "broker.log") as broker,
        ):
            conn = await asyncpg.connect(postgres.dsn)
            try:
                await apply_migrations(conn)  # as `tephra migrate` does before a deployment's services
            finally:
                await conn.close()
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "OTEL_SDK_DISABLED": "true",
                "TEPHRA_DATA_DIR": str(logs / "data"),  # the services' keys: this run's own
                "TEPHRA_KAFKA_BOOTSTRAP": broker.bootstrap,
                "TEPHRA_DATABASE_URL": postgres.dsn,
                "TEPHRA_KUBECONFIG": str(cluster.kubeconfig),
                "TEPHRA_SCHEDULE_PERIOD": str(self.schedule_period),
                # A development deployment, as compose.yaml's: the bridge does not sign its events,
                # the scheduler enrols its own key.
                "TEPHRA_ALLOW_UNSIGNED_INTENTS": "true",
                "TEPHRA_ALLOW_UNSIGNED_OBSERVATIONS": "true",
                "TEPHRA_SCHEDULER_ENROL": "true",
            }
            processes: list[asyncio.subprocess.Process] = []
            try:
                for service in TEPHRA_SERVICES:
                    args = [service, "--install-crds"] if service == "kube-bridge" else [service]
                    with (logs / f"tephra-{service}.log").open("wb") as log:
                        processes.append(
                            await asyncio.create_subprocess_exec(
                                sys.executable,
                                "-c",
                                "from api.cli import main; main()",
                                *args,
                                env=env,
                                stdout=log,
                                stderr=asyncio.subprocess.STDOUT,
                            )
                        )
                await _wait_synced(logs / "tephra-kube-bridge.log", processes)
                yield
            finally:
                for process in processes:
                    if process.returncode is None:
                        process.terminate()
                for process in processes:
                    await process.wait()


async def _wait_synced(log: Path, processes: list[asyncio.subprocess.Process]) -> None:
    async with asyncio.timeout(120):
        while SYNCED not in await asyncio.to_thread(log.read_bytes):
            for process in processes:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"a Tephra service exited with status {process.returncode}; see {log.parent}"
                    )
            await asyncio.sleep(0.2)


def _side(name: str) -> Side:
    if name == "kube-scheduler":
        return KubeSchedulerSide()
    if name == "tephra":
        return TephraSide()
    raise SystemExit(f"--scheduler: expected kube-scheduler or tephra, got {name!r}")


# ---------------------------------------------------------------- CPU by process


def _processes() -> Iterator[tuple[int, int, str, float]]:
    """(pid, parent pid, name, CPU seconds) of every process /proc shows."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        name, _, rest = stat.rpartition(")")
        fields = rest.split()
        comm = name.partition("(")[2]
        # A Tephra service is a python process whose last argument names it.
        words = [w.decode(errors="replace") for w in command if w]
        service = next((w for w in reversed(words) if w in TEPHRA_SERVICES), None)
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
        if service:
            comm = f"tephra {service}"
        elif any("multiprocessing" in w for w in words):
            comm = "bench"  # the pod creators
        yield int(entry.name), int(fields[1]), comm, cpu


def descendant_cpu() -> dict[str, float]:
    """CPU seconds of this process and its descendants, summed by name (processes that exited
    meanwhile are missing: a difference of two readings counts the living ones)."""
    table = list(_processes())
    children: dict[int, list[int]] = {}
    for pid, parent, _, _ in table:
        children.setdefault(parent, []).append(pid)
    ours = {os.getpid()}
    stack = [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            ours.add(child)
            stack.append(child)
    totals: dict[str, float] = {}
    for pid, _, name, cpu in table:
        if pid in ours:
            key = "bench" if pid == os.getpid() else name
            totals[key] = totals.get(key, 0.0) + cpu
    return totals


def _cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {
        name: after[name] - before.get(name, 0.0)
        for name in sorted(after)
        if after[name] > before.get(name, 0.0)
    }


# ---------------------------------------------------------------- measuring


@dataclass
class Result:
    side: str
    pods: int
    seconds: float
    latencies: list[float]
    creating: float  # first creation to the last one's reply: the client's own limit
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process name

    @property
    def rate(self) -> float:
        return self.pods / self.seconds

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]

    def cpu_text(self) -> str:
        parts = [f"{name} {seconds * 1000 / self.pods:.1f}" for name, seconds in self.cpu.items()]
        total = sum(self.cpu.values()) * 1000 / self.pods
        return f"CPU ms/pod {total:.1f} ({', '.join(parts)})"


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


def _create_share(
    kubeconfig: Path, namespace: str, scheduler_name: str, indices: range, in_flight: int
) -> dict[str, float]:
    """In a creator process: create the pods ``indices``; when each creation began (perf_counter,
    the system's monotonic clock: comparable between processes)."""

    async def run() -> dict[str, float]:
        created: dict[str, float] = {}
        collection = resource_path("v1", "pods", namespace=namespace)
        limit = asyncio.Semaphore(in_flight)
        async with await KubeClient.connect(kubeconfig) as client:

            async def create(index: int) -> None:
                name = f"pod-{index:06d}"
                async with limit:
                    created[name] = time.perf_counter()
                    await client.create(collection, _pod(name, scheduler_name))

            await asyncio.gather(*(create(i) for i in indices))
        return created

    return asyncio.run(run())


def _ready() -> None:
    """A creator process's first task: its imports done before anything is timed."""


@dataclass
class Creators:
    """The processes creating pods, started (and their imports done) before any measurement."""

    pool: ProcessPoolExecutor
    count: int


async def _measure(
    client: KubeClient,
    side: Side,
    cluster: DevCluster,
    logs: Path,
    pods: int,
    *,
    creators: Creators,
    backlog: bool,
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

    async def create_all() -> float:
        workers = creators.count
        loop = asyncio.get_running_loop()
        shares = await asyncio.gather(
            *(
                loop.run_in_executor(
                    creators.pool,
                    _create_share,
                    cluster.kubeconfig,
                    namespace,
                    side.scheduler_name,
                    range(first, pods, workers),
                    max(1, CREATE_CONCURRENCY // workers),
                )
                for first in range(workers)
            )
        )
        for share in shares:
            created.update(share)
        return time.perf_counter() - min(created.values())

    watcher = asyncio.create_task(watch())
    if backlog:  # every pod waits before the scheduler starts: its rate, not the client's
        creating = await create_all()
        async with side.running(cluster, logs):
            began, cpu_before = time.perf_counter(), descendant_cpu()
            created = dict.fromkeys(created, began)
            await asyncio.wait_for(all_bound.wait(), timeout=max(300.0, pods / 5))
            cpu = _cpu_spent(cpu_before, descendant_cpu())
    else:
        async with side.running(cluster, logs):
            cpu_before = descendant_cpu()
            creating = await create_all()
            began = min(created.values())
            await asyncio.wait_for(all_bound.wait(), timeout=max(300.0, pods / 5))
            cpu = _cpu_spent(cpu_before, descendant_cpu())
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    latencies = [bound[name] - created[name] for name in created]
    # Bound pods go only with grace 0 (no kubelet); the next scheduler finds empty nodes.
    await client.request("DELETE", collection, body={"gracePeriodSeconds": 0})
    # A backlog's rate once binding goes: the two schedulers' readiness differs (see the top).
    first = min(bound.values()) if backlog else began
    return Result(side.name, pods, max(bound.values()) - first, latencies, creating, cpu)


async def _shape(
    nodes: int, pods: int, sides: list[Side], logs: Path, *, backlog: bool, creators: int
) -> list[Result]:
    with ProcessPoolExecutor(creators, mp_context=multiprocessing.get_context("spawn")) as pool:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(pool, _ready) for _ in range(creators)))
        return await _shape_with(nodes, pods, sides, logs, Creators(pool, creators), backlog=backlog)


async def _shape_with(
    nodes: int, pods: int, sides: list[Side], logs: Path, creators: Creators, *, backlog: bool
) -> list[Result]:
    results = []
    async with (
        DevCluster(logs / "cluster") as cluster,
        await KubeClient.connect(cluster.kubeconfig) as client,
    ):
        await _nodes(client, nodes)
        for side in sides:
            result = await _measure(client, side, cluster, logs, pods, creators=creators, backlog=backlog)
            results.append(result)
            print(
                f"{nodes} nodes x {pods} pods{' (backlog)' if backlog else ''}, {side.name}: "
                f"{result.rate:,.0f} pods/s ({result.seconds:.2f} s), "
                f"latency p50 {result.percentile(0.5) * 1000:,.0f} ms "
                f"p99 {result.percentile(0.99) * 1000:,.0f} ms; "
                f"created at {pods / result.creating:,.0f} pods/s; load {os.getloadavg()[0]:.1f}; "
                f"{result.cpu_text()}",
                flush=True,
            )
    if len(results) == 2:
        ratio = results[1].rate / results[0].rate
        print(
            f"{nodes} nodes x {pods} pods: {results[1].side} / {results[0].side} = {ratio:.2f}x", flush=True
        )
    return results


def _parse_shape(text: str) -> tuple[int, int]:
    nodes, _, pods = text.partition("x")
    return int(nodes), int(pods)


async def main(opts: argparse.Namespace) -> None:
    sides = [_side(name) for name in opts.scheduler or SCHEDULERS]
    print(
        f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s"
        f" (bench/host.py; not measured), load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for nodes, pods in opts.shape or SHAPES:
        with contextlib.ExitStack() as stack:
            if opts.keep_logs is None:
                logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tephra-bench-kube-")))
            else:
                logs = opts.keep_logs / f"{nodes}x{pods}"
                logs.mkdir(parents=True, exist_ok=True)
            await _shape(nodes, pods, sides, logs, backlog=opts.backlog, creators=opts.creators)


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape",
        type=_parse_shape,
        action="append",
        help="NODESxPODS (repeat); default 100x2000 then 1000x5000",
    )
    parser.add_argument(
        "--scheduler",
        action="append",
        help="kube-scheduler and/or tephra, in the order run (repeat); default kube-scheduler then tephra",
    )
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="create every pod before the scheduler starts; rate from its first binding to its last,"
        " latency from its start",
    )
    parser.add_argument(
        "--creators",
        type=int,
        default=CREATORS,
        help=f"processes creating the pods, {CREATE_CONCURRENCY} requests in flight among them"
        f" (default {CREATORS})",
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="keep the servers' and services' logs in this folder (one per shape)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_options()))
