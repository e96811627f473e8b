"""The bridge on the real apiserver: objects in, bindings out, with projector, scheduler and sim kubelet.

The bridge runs with the ServiceAccount token of ``deploy/kubernetes/rbac.yaml`` on the
RBAC-enforcing apiserver, so a verb it uses and the ClusterRole lacks fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from api.embedded import create_topics
from api.endpoints import Endpoints
from api.kube_bridge import object_parser
from api.manifests import parse_manifests
from api.settings import TephraSettings
from api.stack import run_services
from api.submit import load_submission, produce_manifests
from events.models import JobSubmitted, JobSubmittedData
from events.signing import EventSigner
from events.topics import Topics
from kube.bridge.door import BRIDGE_SOURCE
from kube.bridge.service import Bridge, run_bridge
from kube.bridge.settings import KubeBridgeSettings
from kube.dev.cluster import DevCluster
from kube.dev.deploy import bridge_kubeconfig
from kube.rest import JsonObject, KubeApiError, KubeClient, json_list, json_object, json_str, resource_path
from kube.sim_kubelet import SimKubelet, parse_node_shape
from projector.connections import DatabaseAccess, KafkaAccess
from projector.migrate import apply_migrations
from tests.service.helpers import stopped

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "kube" / "data"
KUBECTL = shutil.which("kubectl") or "kubectl"


async def eventually(
    read: Callable[[], Awaitable[object]], check: Callable[[object], bool], within: float = 60
) -> object:
    async with asyncio.timeout(within):
        while True:
            value = await read()
            if check(value):
                return value
            await asyncio.sleep(0.1)


@dataclass
class Stack:
    kube: KubeClient
    namespace: str
    nodes: list[str]
    endpoints: Endpoints
    kubeconfig: Path  # the admin's
    bridge_kubeconfig: Path  # the bridge's ServiceAccount

    @property
    def database_url(self) -> str:
        return self.endpoints.database_url

    async def get(self, path: str) -> JsonObject | None:
        """The object, None while it does not exist."""
        try:
            return await self.kube.get(path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def podgroup(self, name: str) -> str:
        return resource_path(
            "scheduling.volcano.sh/v1beta1", "podgroups", namespace=self.namespace, name=name
        )

    async def pods(self) -> list[JsonObject]:
        reply = await self.kube.get(resource_path("v1", "pods", namespace=self.namespace))
        return [p for p in json_list(reply, "items") if isinstance(p, dict)]

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(  # noqa: S603 - kubectl from PATH, fixed arguments
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), "-n", self.namespace, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


async def _clear_nodes(kube: KubeClient) -> None:
    """Nodes are cluster-wide: another test's would take our pods (tests run one at a time)."""
    for node in json_list(await kube.get(resource_path("v1", "nodes")), "items"):
        if isinstance(node, dict):
            with contextlib.suppress(Exception):
                await kube.delete(resource_path("v1", "nodes", name=json_str(node, "metadata", "name")))


@pytest.fixture
async def endpoints(kafka_bootstrap: str, database_url: str, kube_name: str) -> Endpoints:
    """Topics of this test's own, a migrated database."""
    topics = Topics(f"kb-{kube_name}")
    await create_topics(kafka_bootstrap, topics.all(), partitions=1)
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    return Endpoints(kafka_bootstrap, database_url, topics, "default")


@pytest.fixture
def services_settings() -> TephraSettings:
    """What the projector and the scheduler run with (a module overrides it: production trust)."""
    return TephraSettings(schedule_period=0.2)


@pytest.fixture
async def services(endpoints: Endpoints, services_settings: TephraSettings) -> AsyncIterator[Endpoints]:
    """Projector and scheduler on :func:`endpoints`, running."""
    task = asyncio.create_task(run_services(services_settings, endpoints, ("projector", "scheduler")))
    try:
        yield endpoints
    finally:
        task.cancel()
        await stopped(task)


@pytest.fixture
async def cluster(
    kube_cluster: DevCluster,
    volcano_crds: KubeClient,
    kube_namespace: str,
    services: Endpoints,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    """Two 1-GPU nodes (sim kubelet), projector and scheduler; the bridge's kubeconfig, no bridge."""
    kube = volcano_crds
    await _clear_nodes(kube)
    nodes = [f"{kube_namespace}-gpu-{i}" for i in range(2)]
    shapes = [parse_node_shape(f"{n}:nvidia.com/gpu=1,pods=300") for n in nodes]
    kubelet_task = asyncio.create_task(SimKubelet(kube, shapes, heartbeat=1).run())
    kubeconfig = await bridge_kubeconfig(kube, kube_cluster, tmp_path / "bridge.kubeconfig")
    try:
        yield Stack(kube, kube_namespace, nodes, services, kube_cluster.kubeconfig, kubeconfig)
    finally:
        kubelet_task.cancel()
        await stopped(kubelet_task)
        await _clear_nodes(kube)


@pytest.fixture
def bridge_signer() -> EventSigner | None:
    """Who the bridge signs as (a module overrides it: a key in the keyring); None: unsigned."""
    return None


@contextlib.asynccontextmanager
async def running_bridge(cluster: Stack, signer: EventSigner | None = None) -> AsyncIterator[Stack]:
    """The bridge running in this process on ``cluster`` until the block ends."""
    bridge_task = asyncio.create_task(
        run_bridge(
            KubeBridgeSettings(kubeconfig=cluster.bridge_kubeconfig),
            object_parser("default"),
            kafka=KafkaAccess(cluster.endpoints.kafka_bootstrap),
            database=DatabaseAccess(cluster.database_url),
            topics=cluster.endpoints.topics,
            cluster="default",
            signer=signer,
        )
    )
    try:
        yield cluster
    finally:
        bridge_task.cancel()
        await stopped(bridge_task)


@pytest.fixture
async def stack(cluster: Stack, bridge_signer: EventSigner | None) -> AsyncIterator[Stack]:
    """:func:`cluster` with the bridge running in this process."""
    async with running_bridge(cluster, bridge_signer) as running:
        yield running


def _phase(pod: JsonObject) -> str | None:
    return json_str(pod, "status", "phase")


async def create_lone_pod(stack: Stack, name: str) -> str:
    """A pod of ours in no group (no requests: any node takes it); its path."""
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": stack.namespace},
        "spec": {"schedulerName": "tephra", "containers": [{"name": "main", "image": "demo/x"}]},
    }
    await stack.kube.create(resource_path("v1", "pods", namespace=stack.namespace), body)
    return resource_path("v1", "pods", namespace=stack.namespace, name=name)


async def test_the_seed_articles_vcjob_runs_one_worker_on_each_gpu_node(stack: Stack) -> None:
    stack.kubectl("apply", "-f", str(DATA / "seed-vcjob.yaml"))

    def running(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return len(pods) == 2 and all(_phase(p) == "Running" for p in pods)

    pods = await eventually(stack.pods, running)
    assert isinstance(pods, list)
    assert sorted(json_str(p, "metadata", "name") or "" for p in pods) == [
        "demo-training-worker-0",
        "demo-training-worker-1",
    ]
    assert sorted(json_str(p, "spec", "nodeName") or "" for p in pods) == stack.nodes
    podgroup = await stack.kube.get(
        resource_path(
            "scheduling.volcano.sh/v1beta1", "podgroups", namespace=stack.namespace, name="demo-training"
        )
    )
    assert json_object(podgroup, "spec")["minMember"] == 2
    conn = await asyncpg.connect(stack.database_url)
    try:
        statuses = await eventually(
            lambda: conn.fetch(
                "SELECT status FROM tasks WHERE job_id = $1", f"{stack.namespace}/demo-training"
            ),
            lambda rows: isinstance(rows, list) and [r["status"] for r in rows] == ["Running", "Running"],
        )
        assert statuses
    finally:
        await conn.close()


async def test_a_lone_pod_of_ours_is_bound_and_runs(stack: Stack) -> None:
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lonely", "namespace": stack.namespace},
        "spec": {
            "schedulerName": "tephra",
            "containers": [
                {"name": "main", "image": "demo/x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }
    await stack.kube.create(resource_path("v1", "pods", namespace=stack.namespace), body)
    path = resource_path("v1", "pods", namespace=stack.namespace, name="lonely")
    pod = await eventually(
        lambda: stack.kube.get(path), lambda p: isinstance(p, dict) and _phase(p) == "Running"
    )
    assert isinstance(pod, dict)
    assert json_str(pod, "spec", "nodeName") in stack.nodes
    scheduled = await eventually(
        lambda: _events(stack, "Scheduled"), lambda e: isinstance(e, list) and bool(e)
    )
    assert isinstance(scheduled, list)
    assert json_str(scheduled[0], "message") == (
        f"Successfully assigned {stack.namespace}/lonely to {json_str(pod, 'spec', 'nodeName')}"
    )


def _vcjob(
    name: str,
    replicas: int,
    *,
    priority_class: str | None = None,
    min_available: int | None = None,
    queue: str = "default",
) -> str:
    priority = f"\n  priorityClassName: {priority_class}" if priority_class else ""
    return f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
spec:
  minAvailable: {replicas if min_available is None else min_available}
  schedulerName: tephra{priority}
  queue: {queue}
  tasks:
    - replicas: {replicas}
      name: worker
      template:
        spec:
          containers:
            - name: main
              image: demo/trainer:latest
              resources:
                limits:
                  nvidia.com/gpu: 1
"""


async def _events(stack: Stack, reason: str) -> list[JsonObject]:
    reply = await stack.kube.get(resource_path("v1", "events", namespace=stack.namespace))
    return [e for e in json_list(reply, "items") if isinstance(e, dict) and json_str(e, "reason") == reason]


def _replay(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        [
            sys.executable,
            "-c",
            "from replay.cli import main; main()",
            *args,
            "--database-url",
            stack.database_url,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def test_a_gang_that_cannot_fit_stays_pending_and_says_why_as_replay_explains(
    stack: Stack, tmp_path: Path
) -> None:
    manifest = tmp_path / "big.yaml"
    manifest.write_text(_vcjob("big", 3))
    stack.kubectl("apply", "-f", str(manifest))
    podgroup = await eventually(
        lambda: stack.get(stack.podgroup("big")),
        lambda pg: isinstance(pg, dict) and bool(json_list(pg, "status", "conditions")),
    )
    assert isinstance(podgroup, dict)
    assert json_str(podgroup, "status", "phase") == "Pending"
    (condition,) = json_list(podgroup, "status", "conditions")
    assert isinstance(condition, dict)
    assert condition["type"] == "Unschedulable"
    job_id = f"{stack.namespace}/big"
    failed = await eventually(
        lambda: _events(stack, "FailedScheduling"), lambda e: isinstance(e, list) and len(e) >= 3
    )
    assert isinstance(failed, list)
    message = json_str(failed[0], "message") or ""
    assert f"replay explain {job_id}" in message
    assert message == condition["message"]
    assert all(not json_str(p, "spec", "nodeName") for p in await stack.pods())
    explained = _replay(stack, "explain", job_id, "-o", "json", "--no-counterfactual")
    assert explained.returncode == 0, explained.stderr
    reasons = json.loads(explained.stdout)["recordedReasons"]
    assert reasons
    for reason in reasons:
        assert f"{reason['code']}: {reason['message']}" in message


PREEMPTION = """\
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: NS-high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: NS-low}
value: 100
"""

PREEMPT_CONFIG = """\
apiVersion: tephra.dev/v1alpha1
kind: SchedulerConfiguration
metadata: {name: preempt}
spec:
  actions: "enqueue, allocate, preempt, backfill"
  tiers:
    - plugins:
        - name: priority
        - name: gang
          enablePreemptable: false
        - name: conformance
    - plugins:
        - name: drf
          enablePreemptable: false
        - name: predicates
        - name: proportion
        - name: nodeorder
"""


async def test_a_high_priority_job_preempts_and_the_victims_event_names_it(
    stack: Stack, endpoints: Endpoints, tmp_path: Path
) -> None:
    # The scheduler configuration comes through tephra submit (it is no Kubernetes object).
    config = tmp_path / "config.yaml"
    config.write_text(PREEMPT_CONFIG)
    await produce_manifests(load_submission([config], cluster="default"), endpoints)
    classes = tmp_path / "classes.yaml"
    classes.write_text(PREEMPTION.replace("NS", stack.namespace))
    stack.kubectl("apply", "-f", str(classes))
    low = tmp_path / "low.yaml"
    low.write_text(_vcjob("low", 2, priority_class=f"{stack.namespace}-low", min_available=1))
    stack.kubectl("apply", "-f", str(low))

    def running(count: int) -> Callable[[object], bool]:
        def check(value: object) -> bool:
            pods = value if isinstance(value, list) else []
            return sum(_phase(p) == "Running" for p in pods) == count

        return check

    await eventually(stack.pods, running(2))
    high = tmp_path / "high.yaml"
    high.write_text(_vcjob("high", 1, priority_class=f"{stack.namespace}-high"))
    stack.kubectl("apply", "-f", str(high))
    path = resource_path("v1", "pods", namespace=stack.namespace, name="high-worker-0")
    pod = await eventually(lambda: stack.get(path), lambda p: isinstance(p, dict) and _phase(p) == "Running")
    assert isinstance(pod, dict)
    preempted = await eventually(
        lambda: _events(stack, "Preempted"), lambda e: isinstance(e, list) and len(e) == 1
    )
    assert isinstance(preempted, list)
    (event,) = preempted
    assert json_str(event, "involvedObject", "name") in ("low-worker-0", "low-worker-1")
    assert json_str(event, "message") == f"Preempted by job {stack.namespace}/high"
    # The victim was evicted; as Volcano's job controller, the bridge made its pod again, which waits.
    pods = {json_str(p, "metadata", "name") or "": p for p in await stack.pods()}
    assert sorted(pods) == ["high-worker-0", "low-worker-0", "low-worker-1"]
    verified = _replay(stack, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _start_bridge(stack: Stack, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TEPHRA_KAFKA_BOOTSTRAP": stack.endpoints.kafka_bootstrap,
        "TEPHRA_DATABASE_URL": stack.database_url,
        "TEPHRA_TOPICS_PREFIX": stack.endpoints.topics.prefix,
        "TEPHRA_KUBECONFIG": str(stack.bridge_kubeconfig),
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", "from api.cli import main; main()", "kube-bridge", "--install-crds"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def test_a_sigkilled_bridge_restarted_binds_every_pod_of_a_stream_exactly_once(
    cluster: Stack, tmp_path: Path
) -> None:
    count = 500
    log = tmp_path / "bridge.log"
    bridge = _start_bridge(cluster, log)
    pods_path = resource_path("v1", "pods", namespace=cluster.namespace)
    slots = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i:03d}", "namespace": cluster.namespace},
            "spec": {"schedulerName": "tephra", "containers": [{"name": "main", "image": "demo/x"}]},
        }
        async with slots:
            await cluster.kube.create(pods_path, body)

    def bound(at_least: int) -> Callable[[object], bool]:
        def check(value: object) -> bool:
            pods = value if isinstance(value, list) else []
            return sum(bool(json_str(p, "spec", "nodeName")) for p in pods) >= at_least

        return check

    creating: asyncio.Future[list[None]] = asyncio.gather(*(create(i) for i in range(count)))
    try:
        await eventually(cluster.pods, bound(count // 5), within=120)
        bridge.kill()  # SIGKILL in the middle of the stream: nothing to clean up, nothing flushed
        bridge.wait(timeout=30)
        await creating
        bridge = _start_bridge(cluster, log)
        await eventually(cluster.pods, bound(count), within=300)
    finally:
        bridge.kill()
        bridge.wait(timeout=30)
    nodes = {json_str(p, "metadata", "name"): json_str(p, "spec", "nodeName") for p in await cluster.pods()}
    conn = await asyncpg.connect(cluster.database_url)
    try:
        rows = await conn.fetch("SELECT task_id, node FROM bindings")
        rejected = await conn.fetch("SELECT error, detail FROM rejected_events")
    finally:
        await conn.close()
    decided: dict[str, list[str]] = {}
    for row in rows:
        decided.setdefault(row["task_id"], []).append(row["node"])
    # One accepted binding decision per pod, and each pod on that very node.
    assert len(decided) == count
    assert all(len(bindings) == 1 for bindings in decided.values())
    for name, node in nodes.items():
        assert decided[f"{cluster.namespace}/{name}"] == [node]
    assert [(r["error"], r["detail"]) for r in rejected] == []


async def test_plain_pods_of_a_podgroup_are_bound_as_one_gang(stack: Stack) -> None:
    group: JsonObject = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pair", "namespace": stack.namespace},
        "spec": {"minMember": 2},
    }
    await stack.kube.create(
        resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace=stack.namespace), group
    )
    for name in ("left", "right"):
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": stack.namespace,
                "annotations": {"scheduling.k8s.io/group-name": "pair"},
            },
            "spec": {
                "schedulerName": "volcano",
                "containers": [
                    {"name": "main", "image": "demo/x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        }
        await stack.kube.create(resource_path("v1", "pods", namespace=stack.namespace), body)

    def running(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return len(pods) == 2 and all(_phase(p) == "Running" for p in pods)

    pods = await eventually(stack.pods, running)
    assert isinstance(pods, list)
    assert sorted(json_str(p, "spec", "nodeName") or "" for p in pods) == stack.nodes
    conn = await asyncpg.connect(stack.database_url)
    try:
        tasks = await conn.fetch(
            "SELECT id FROM tasks WHERE job_id = $1 ORDER BY id", f"{stack.namespace}/pair"
        )
    finally:
        await conn.close()
    assert [r["id"] for r in tasks] == [f"{stack.namespace}/left", f"{stack.namespace}/right"]


PODGROUP_AND_PODS = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: mixed, namespace: NS}
spec:
  minMember: 2
  minTaskMember: {ps: 1, worker: 1}
  minResources: {nvidia.com/gpu: "2"}
---
apiVersion: v1
kind: Pod
metadata:
  name: ps-0
  namespace: NS
  annotations: {scheduling.k8s.io/group-name: mixed}
  labels: {volcano.sh/task-spec: ps, volcano.sh/preemptable: "false"}
spec:
  schedulerName: volcano
  containers: [{name: main, image: demo/x, resources: {limits: {nvidia.com/gpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: worker.0
  namespace: NS
  annotations: {scheduling.k8s.io/group-name: mixed}
  labels: {volcano.sh/task-spec: worker}
spec:
  schedulerName: volcano
  tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
  containers: [{name: main, image: demo/x, resources: {requests: {cpu: 100m}, limits: {nvidia.com/gpu: "1"}}}]
"""


async def test_a_podgroup_through_the_bridge_is_the_job_tephra_submit_makes_of_it(
    stack: Stack, tmp_path: Path
) -> None:
    text = PODGROUP_AND_PODS.replace("NS", stack.namespace)
    manifest = tmp_path / "mixed.yaml"
    manifest.write_text(text)
    stack.kubectl("apply", "-f", str(manifest))

    def running(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return len(pods) == 2 and all(_phase(p) == "Running" for p in pods)

    pods = await eventually(stack.pods, running)
    assert isinstance(pods, list)
    job_id = f"{stack.namespace}/mixed"
    conn = await asyncpg.connect(stack.database_url)
    try:
        row = await conn.fetchrow(
            "SELECT source, data FROM event_log WHERE type = 'tephra.job.submitted.v1' AND subject = $1",
            f"job/{job_id}",
        )
        tasks = await conn.fetch("SELECT id, node FROM tasks WHERE job_id = $1 ORDER BY id", job_id)
        rejected = await conn.fetch("SELECT error, detail FROM rejected_events")
    finally:
        await conn.close()
    assert row is not None
    assert row["source"] == BRIDGE_SOURCE
    bridged = JobSubmittedData.model_validate(json.loads(row["data"]))
    [submitted] = parse_manifests([(manifest.name, text)], now=datetime.now(UTC)).events
    assert isinstance(submitted, JobSubmitted)
    # The same job, tasks and gang whichever door; only the provenance annotation differs.
    assert bridged.annotations == {"tephra.dev/kube-source": "podgroup"}
    assert bridged.model_copy(update={"annotations": {}}) == submitted.data
    assert bridged.min_task_member == {"ps": 1, "worker": 1}
    assert [(t.pod_names, t.role) for t in bridged.tasks] == [(["ps-0"], "ps"), (["worker.0"], "worker")]
    # Each task is its pod, bound by name to the node the projection holds.
    on = {json_str(p, "metadata", "name"): json_str(p, "spec", "nodeName") for p in pods}
    assert [(r["id"], r["node"]) for r in tasks] == [
        (f"{stack.namespace}/ps-0", on["ps-0"]),
        (f"{stack.namespace}/worker.0", on["worker.0"]),
    ]
    assert [(r["error"], r["detail"]) for r in rejected] == []


def _hypernode(name: str, tier: int, *members: JsonObject) -> JsonObject:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": list(members)},
    }


async def _hypernodes(stack: Stack) -> dict[str, JsonObject]:
    conn = await asyncpg.connect(stack.database_url)
    try:
        rows = await conn.fetch("SELECT name, doc FROM hypernodes")
    finally:
        await conn.close()
    return {r["name"]: json.loads(r["doc"]) for r in rows}


async def test_hypernodes_come_in_changed_and_go_as_the_cluster_holds_them(stack: Stack) -> None:
    path = resource_path("topology.volcano.sh/v1alpha1", "hypernodes")
    leaf, spine = f"{stack.namespace}-leaf", f"{stack.namespace}-spine"
    nodes = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in stack.nodes]
    await stack.kube.create(path, _hypernode(leaf, 1, *nodes))
    await stack.kube.create(
        path, _hypernode(spine, 2, {"type": "HyperNode", "selector": {"exactMatch": {"name": leaf}}})
    )
    held = await eventually(lambda: _hypernodes(stack), lambda h: isinstance(h, dict) and spine in h)
    assert isinstance(held, dict)
    assert held[leaf]["tier"] == 1
    assert [m["exact_match"] for m in held[leaf]["members"]] == stack.nodes
    # A change the model reads (the tier name) comes in; a deletion goes out.
    current = await stack.kube.get(resource_path("topology.volcano.sh/v1alpha1", "hypernodes", name=leaf))
    changed = {**current, "spec": {**json_object(current, "spec"), "tierName": "leaf"}}
    await stack.kube.request(
        "PUT", resource_path("topology.volcano.sh/v1alpha1", "hypernodes", name=leaf), body=changed
    )
    await stack.kube.delete(resource_path("topology.volcano.sh/v1alpha1", "hypernodes", name=spine))

    def settled(value: object) -> bool:
        return (
            isinstance(value, dict) and spine not in value and value.get(leaf, {}).get("tier_name") == "leaf"
        )

    await eventually(lambda: _hypernodes(stack), settled)
    await stack.kube.delete(resource_path("topology.volcano.sh/v1alpha1", "hypernodes", name=leaf))
    await eventually(lambda: _hypernodes(stack), lambda h: isinstance(h, dict) and leaf not in h)


# A PodGroup's job as the bridge submitted it before its tasks were named after their pods: a
# Volcano Job document of one task per pod (``<group>-<pod>-0``), marked as the bridge's.
LEGACY_GROUP_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: old
  namespace: NS
  annotations: {tephra.dev/kube-source: podgroup}
spec:
  minAvailable: 2
  tasks:
    - {name: a, replicas: 1, minAvailable: 0, template: {spec: {containers: [{name: main, image: demo/x}]}}}
    - {name: b, replicas: 1, minAvailable: 0, template: {spec: {containers: [{name: main, image: demo/x}]}}}
"""


async def test_an_upgraded_bridge_runs_the_podgroup_jobs_an_earlier_one_submitted(
    cluster: Stack, tmp_path: Path
) -> None:
    ns = cluster.namespace
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(LEGACY_GROUP_JOB.replace("NS", ns))
    await produce_manifests(load_submission([legacy], cluster="default"), cluster.endpoints)
    conn = await asyncpg.connect(cluster.database_url)
    try:
        await eventually(
            lambda: conn.fetch("SELECT id FROM tasks WHERE job_id = $1", f"{ns}/old"),
            lambda rows: isinstance(rows, list) and len(rows) == 2,
        )
    finally:
        await conn.close()
    await cluster.kube.create(
        resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace=ns),
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "old"}},
    )
    for name in ("a", "b"):
        member: JsonObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": {"scheduling.k8s.io/group-name": "old"}},
            "spec": {"schedulerName": "volcano", "containers": [{"name": "main", "image": "demo/x"}]},
        }
        await cluster.kube.create(resource_path("v1", "pods", namespace=ns), member)

    def running(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return len(pods) == 2 and all(_phase(p) == "Running" for p in pods)

    async with running_bridge(cluster) as stack:
        await eventually(stack.pods, running)
        conn = await asyncpg.connect(stack.database_url)
        try:
            rows = await eventually(
                lambda: conn.fetch("SELECT id, status FROM tasks WHERE job_id = $1 ORDER BY id", f"{ns}/old"),
                lambda rows: isinstance(rows, list) and all(r["status"] == "Running" for r in rows),
            )
            types = await conn.fetch("SELECT type FROM event_log WHERE subject = $1", f"job/{ns}/old")
            rejected = await conn.fetch("SELECT error, detail FROM rejected_events")
        finally:
            await conn.close()
    # The earlier bridge's task ids, each bound to its pod; not submitted again, not cancelled.
    assert isinstance(rows, list)
    assert [r["id"] for r in rows] == [f"{ns}/old-a-0", f"{ns}/old-b-0"]
    assert [r["type"] for r in types] == ["tephra.job.submitted.v1"]
    assert [(r["error"], r["detail"]) for r in rejected] == []


async def test_the_bridge_hears_the_projection_move_instead_of_polling_it(cluster: Stack) -> None:
    # The projector NOTIFYs its seq at each commit; the bridge listens, so the decisions it
    # executes reach it as they are projected, not at its next poll (an hour here).
    ready: list[Bridge] = []
    bridge_task = asyncio.create_task(
        run_bridge(
            KubeBridgeSettings(kubeconfig=cluster.bridge_kubeconfig, kube_poll_interval=3600),
            object_parser("default"),
            kafka=KafkaAccess(cluster.endpoints.kafka_bootstrap),
            database=DatabaseAccess(cluster.database_url),
            topics=cluster.endpoints.topics,
            cluster="default",
            on_ready=ready.append,
        )
    )
    try:
        path = await create_lone_pod(cluster, "heard")
        pod = await eventually(
            lambda: cluster.kube.get(path),
            lambda p: isinstance(p, dict) and bool(json_str(p, "spec", "nodeName")),
        )
        assert isinstance(pod, dict)
        assert json_str(pod, "spec", "nodeName") in cluster.nodes
        [bridge] = ready
        assert bridge.announcements > 0  # heard, not only read from the database
        assert bridge.announced_seq is not None
    finally:
        bridge_task.cancel()
        await stopped(bridge_task)
