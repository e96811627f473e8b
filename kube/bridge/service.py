"""``tephra kube-bridge``: one process between a Kubernetes cluster and Tephra's event log.

One loop reconciles, level-triggered, whenever a watched object moved or the
poll interval passed:

1. **In** (:mod:`kube.bridge.door`): the changed Nodes, PriorityClasses,
   Queues and HyperNodes, the Volcano Jobs, PodGroups and pods of our schedulers -> events,
   produced and acknowledged before anything depends on them.  For a newly
   submitted Volcano Job the bridge then creates its PodGroup and pods, as
   Volcano's job controller does.
2. **Out** (:mod:`kube.bridge.plan`): the projection's tasks of the bridge's
   jobs in transition (and those whose pods changed) against the pods ->
   bindings, evictions, recreated pods, and the observations (TaskStarted,
   TaskFinished, JobCancelled) the pods show.  Calls run in the background,
   at most ``TEPHRA_KUBE_BIND_CONCURRENCY`` at once; a task with a call in
   flight is not planned again until the call returns.

Restarts: nothing is kept but what the projection and the cluster hold.  A
binding is only attempted for a pod without a node; the apiserver refuses a
second one (409), and a 409 for the wanted node counts as done, so a
SIGKILL between a binding and its acknowledgement binds nothing twice.
Only one bridge of a cluster is active: it holds a PostgreSQL advisory lock.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import aiohttp
import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from events.models import Event, JobCancelled, JobCancelledData
from events.serde import encode
from events.signing import EventSigner
from events.topics import Topics, kafka_key, topic_for
from kube.bridge.calls import BindOutcome, bind_pod, create_if_absent, evict_pod, eviction_version
from kube.bridge.door import BRIDGE_SOURCE, Door, ObjectParser, utc_now
from kube.bridge.informer import Informer
from kube.bridge.objects import (
    PodKind,
    PodRef,
    bridge_event_id,
    gated,
    legacy_pod_task,
    pod_ref,
    volcano_job_pods,
)
from kube.bridge.outage import Outage
from kube.bridge.plan import Bind, CreatePod, Evict, ProjectedTask, plan_tasks
from kube.bridge.settings import KubeBridgeSettings
from kube.bridge.signing import signing
from kube.bridge.status import StatusWriter
from kube.bridge.store import BridgeLock, projection_seq, read_projected_state, read_tasks
from kube.crds import install_crds
from kube.rest import JsonObject, KubeApiError, KubeClient, json_str, resource_path
from projector.connections import DatabaseAccess, KafkaAccess, create_pool, new_producer, start_client
from projector.migrate import require_schema
from projector.writer import NOTIFY_CHANNEL

__all__ = ["Bridge", "run_bridge"]

log = logging.getLogger(__name__)

_RETRY_AFTER: Final = (0.2, 0.5, 1.0, 2.0, 5.0)
#: Seconds between two checks that the lock's connection is alive.
_LOCK_CHECK: Final = 5.0
#: Seconds between two reads of every task in transition; in between, only those whose rows changed
#: (and those whose pods moved).  The full read retries what nothing else brings back: a binding
#: refused for a conflict, an eviction a disruption budget blocked.
_FULL_READ_EVERY: Final = 5.0

QUEUES_PATH: Final = "/apis/scheduling.volcano.sh/v1beta1/queues"
PODGROUPS_PATH: Final = "/apis/scheduling.volcano.sh/v1beta1/podgroups"
VCJOBS_PATH: Final = "/apis/batch.volcano.sh/v1alpha1/jobs"
HYPERNODES_PATH: Final = "/apis/topology.volcano.sh/v1alpha1/hypernodes"


@dataclass
class _Pods:
    """The pods of our schedulers, indexed by task and by group."""

    by_task: dict[str, tuple[PodRef, JsonObject]] = field(default_factory=dict)
    by_key: dict[str, PodRef] = field(default_factory=dict)
    #: (namespace, PodGroup) -> pod keys
    groups: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    dirty_tasks: set[str] = field(default_factory=set)
    dirty_groups: set[tuple[str, str]] = field(default_factory=set)
    new_lone: set[str] = field(default_factory=set)

    def change(self, key: str, old: JsonObject | None, new: JsonObject | None, job_controller: bool) -> None:
        previous = self.by_key.pop(key, None)
        if previous is not None:
            self.dirty_tasks.add(previous.task_id)
            if self.by_task.get(previous.task_id, (None,))[0] == previous:
                del self.by_task[previous.task_id]
            if previous.kind is PodKind.GROUP:
                members = self.groups.get((previous.namespace, previous.group))
                if members is not None:
                    members.discard(key)
                    if not members:
                        del self.groups[(previous.namespace, previous.group)]
        if new is None:
            return
        ref = pod_ref(new, job_controller=job_controller)
        if ref is None:
            return
        self.by_key[key] = ref
        self.by_task[ref.task_id] = (ref, new)
        self.dirty_tasks.add(ref.task_id)
        if ref.kind is PodKind.GROUP:
            self.groups.setdefault((ref.namespace, ref.group), set()).add(key)
            self.dirty_groups.add((ref.namespace, ref.group))
        elif ref.kind is PodKind.LONE and (previous is None or (old is not None and gated(old))):
            self.new_lone.add(key)  # new, or its last scheduling gate just went


def _unbound_live(pod: JsonObject) -> bool:
    return not json_str(pod, "spec", "nodeName") and json_str(pod, "status", "phase") in (None, "Pending")


def _schedulable(pod: JsonObject) -> bool:
    """Unbound, live, and without scheduling gates: as kube-scheduler, a gated pod is not taken
    until its gates are gone (then submitted without them: nothing in Tephra lifts a gate)."""
    return _unbound_live(pod) and not gated(pod)


class Bridge:
    """The reconciler's state: informers, the door, the calls in flight."""

    def __init__(
        self,
        settings: KubeBridgeSettings,
        client: KubeClient,
        parse: ObjectParser,
        *,
        publish: Callable[[Sequence[Event]], Awaitable[None]],
        pool: asyncpg.Pool,
        cluster: str,
        check_lock: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self._check_lock = check_lock
        self.client = client
        self.publish = publish
        self.pool = pool
        self.cluster = cluster
        self.door = Door(parse, cluster=cluster)
        self.changed = asyncio.Event()
        self.pods = _Pods()
        job_controller = settings.kube_job_controller

        def on_pod(key: str, old: JsonObject | None, new: JsonObject | None) -> None:
            self.pods.change(key, old, new, job_controller)

        def informer(path: str, api_version: str, kind: str, **kw: Any) -> Informer:
            return Informer(client, path, api_version=api_version, kind=kind, changed=self.changed, **kw)

        self.nodes = informer("/api/v1/nodes", "v1", "Node")
        self.priority_classes = informer(
            "/apis/scheduling.k8s.io/v1/priorityclasses", "scheduling.k8s.io/v1", "PriorityClass"
        )
        self.queues = informer(QUEUES_PATH, "scheduling.volcano.sh/v1beta1", "Queue")
        self.podgroups = informer(PODGROUPS_PATH, "scheduling.volcano.sh/v1beta1", "PodGroup")
        self.vcjobs = informer(VCJOBS_PATH, "batch.volcano.sh/v1alpha1", "Job")
        self.hypernodes = informer(HYPERNODES_PATH, "topology.volcano.sh/v1alpha1", "HyperNode")
        # One watch per scheduler name: the apiserver filters pods by spec.schedulerName.
        self.pod_informers = [
            Informer(
                client,
                "/api/v1/pods",
                query={"fieldSelector": f"spec.schedulerName={name}"},
                api_version="v1",
                kind="Pod",
                changed=self.changed,
                on_change=on_pod,
            )
            for name in sorted(settings.scheduler_names)
        ]
        self.status = StatusWriter(client, pool, enabled=settings.kube_status)
        self._slots = asyncio.Semaphore(settings.kube_bind_concurrency)
        #: Kubernetes Events are a view: a few at a time, so they never hold bindings back.
        self._event_slots = asyncio.Semaphore(8)
        self._in_flight: set[str] = set()  # task ids with a call under way
        #: Tasks passed over while their call was under way: read again once it returns.
        self._passed_over: set[str] = set()
        self._bound: dict[str, tuple[str, str]] = {}  # task id -> (pod uid, node) bound by us
        self._calls: set[asyncio.Task[None]] = set()
        self.outage = Outage()
        self._eviction_version = "policy/v1beta1"
        self._emitted: dict[str, int] = {}  # event id -> seq of the task state it records
        #: Tasks of jobs an earlier bridge submitted, named ``ns/<group>-<pod>-0`` or ``ns/<pod>-pod-0``
        #: (kube.bridge.objects.legacy_pod_task) -> their pods' task ids; and back.
        self._legacy: dict[str, str] = {}
        self._legacy_of: dict[str, str] = {}
        self.bindings = 0
        #: The projection's seq as the projector last announced it (None: not since listening).
        self.announced_seq: int | None = None
        self.announcements = 0  # notifications of the projection's seq received
        self._listening: asyncpg.Connection | None = None
        #: The seq the last reads of the projection (tasks, sessions) reflect.
        self.seq = -1

    @property
    def informers(self) -> list[Informer]:
        return [
            self.nodes,
            self.priority_classes,
            self.queues,
            self.podgroups,
            self.vcjobs,
            self.hypernodes,
            *self.pod_informers,
        ]

    def _ours(self, vcjob: JsonObject) -> bool:
        name = json_str(vcjob, "spec", "schedulerName") or "tephra"
        return name in self.settings.scheduler_names

    def volcano_job_ids(self) -> frozenset[str]:
        if not self.settings.kube_job_controller:
            return frozenset()
        return frozenset(key for key, job in self.vcjobs.objects.items() if self._ours(job))

    # ------------------------------------------------------------------ in

    def _take(self, informer: Informer) -> list[str]:
        keys = sorted(informer.dirty)
        informer.dirty.clear()
        return keys

    def _in_events(self) -> tuple[list[Event], list[JsonObject]]:
        """The events the changed objects call for, and the Volcano Jobs to create pods for."""
        now = utc_now()
        events = self._state_events(now)
        created = self._volcano_job_events(now, events) if self.settings.kube_job_controller else []
        for key in self._take(self.podgroups):  # a PodGroup seen after its pods: look at them now
            namespace, _, group = key.partition("/")
            if (namespace, group) in self.pods.groups:
                self.pods.dirty_groups.add((namespace, group))
        groups, self.pods.dirty_groups = self.pods.dirty_groups, set()
        for namespace, group in sorted(groups):
            podgroup = self.podgroups.objects.get(f"{namespace}/{group}")
            members = self.pods.groups.get((namespace, group), set())
            pods = [self.pods.by_task[self.pods.by_key[k].task_id][1] for k in sorted(members)]
            if podgroup is None or not pods:
                continue
            joined = self.door.group_tasks(podgroup, [p for p in pods if _schedulable(p)], now)
            if joined is not None:  # submitted before: the pods that joined since are added to it
                events.extend(joined)
                continue
            if not all(_unbound_live(p) for p in pods):
                continue
            # Gated pods join the job (TasksAdded) once their gates are gone.
            ungated = [p for p in pods if not gated(p)]
            if (e := self.door.group_job(podgroup, ungated, now)) is not None:
                events.append(e)
        lone, self.pods.new_lone = self.pods.new_lone, set()
        for key in sorted(lone):
            ref = self.pods.by_key.get(key)
            if ref is None:
                continue
            pod = self.pods.by_task[ref.task_id][1]
            if _schedulable(pod) and (e := self.door.lone_job(pod, ref, now)) is not None:
                events.append(e)
        return events, created

    def _state_events(self, now: datetime) -> list[Event]:
        events: list[Event] = []
        for informer, read in (
            (self.priority_classes, self.door.priority_class),
            (self.nodes, self.door.node),
            (self.queues, self.door.queue),
            (self.hypernodes, self.door.hypernode),
        ):
            for key in self._take(informer):
                if (e := read(key, informer.objects.get(key), now)) is not None:
                    events.append(e)
        return events

    def _volcano_job_events(self, now: datetime, events: list[Event]) -> list[JsonObject]:
        """Submit new Volcano Jobs of ours (their pods follow), cancel deleted ones."""
        created: list[JsonObject] = []
        for key in self._take(self.vcjobs):
            job = self.vcjobs.objects.get(key)
            if job is None:
                events.extend(self._vcjob_deleted(key, now))
                continue
            if not self._ours(job) or any(ref.kind is PodKind.VOLCANO_JOB for ref in self._job_pods(key)):
                continue  # its pods exist: submitted before
            if (e := self.door.volcano_job(job, now)) is not None:
                events.append(e)
                created.append(job)
        return created

    def _job_pods(self, job_id: str) -> list[PodRef]:
        namespace, _, name = job_id.partition("/")
        return [ref for ref in self.pods.by_key.values() if ref.namespace == namespace and ref.group == name]

    def _vcjob_deleted(self, job_id: str, now: datetime) -> list[Event]:
        """A Volcano Job deleted: cancel its job, delete its pods (the garbage collector's work)."""
        pods = [ref for ref in self._job_pods(job_id) if ref.kind is PodKind.VOLCANO_JOB]
        for ref in pods:
            self._spawn(self._delete_pod(ref), ref.task_id)
        if job_id not in self.door.submitted:
            return []
        return [
            JobCancelled(
                id=bridge_event_id(self.cluster, "vcjob", job_id, "deleted"),
                source=BRIDGE_SOURCE,
                time=now,
                subject=f"job/{job_id}",
                cluster=self.cluster,
                data=JobCancelledData(job_id=job_id, reason="Volcano Job deleted"),
            )
        ]

    async def _delete_pod(self, ref: PodRef) -> None:
        with contextlib.suppress(KubeApiError):
            await self.client.delete(resource_path("v1", "pods", namespace=ref.namespace, name=ref.name))

    async def _create_job_objects(self, job: JsonObject) -> None:
        podgroup, plans = volcano_job_pods(job)
        namespace = json_str(job, "metadata", "namespace") or "default"
        await create_if_absent(
            self.client,
            resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace=namespace),
            podgroup,
        )
        pods_path = resource_path("v1", "pods", namespace=namespace)
        await asyncio.gather(*(self._call(create_if_absent(self.client, pods_path, p.body)) for p in plans))

    async def _recreate(self, creation: CreatePod) -> None:
        namespace, _, pod_name = creation.task.task_id.partition("/")
        job = self.vcjobs.objects.get(creation.task.job_id)
        if job is None:
            return
        for plan in volcano_job_pods(job)[1]:
            if plan.name == pod_name:
                await create_if_absent(
                    self.client, resource_path("v1", "pods", namespace=namespace), plan.body
                )

    # ------------------------------------------------------------------ out

    async def _call(self, call: Coroutine[Any, Any, object]) -> None:
        async with self._slots:
            await call

    def _spawn(self, call: Coroutine[Any, Any, None], task_id: str | None = None) -> None:
        if task_id is not None:
            self._in_flight.add(task_id)

        async def run() -> None:
            try:
                async with self._slots:
                    await call
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self.outage.failed(exc)  # the apiserver is away: calls pause
                if task_id is not None:
                    self.pods.dirty_tasks.add(task_id)  # look at it again
            except KubeApiError as exc:
                self.outage.answered()
                log.warning("kube bridge: %s", exc)
                if task_id is not None:
                    self.pods.dirty_tasks.add(task_id)  # look at it again
            else:
                self.outage.answered()
            finally:
                if task_id is not None:
                    self._in_flight.discard(task_id)
                    if task_id in self._passed_over:  # its row moved meanwhile: plan it again
                        self._passed_over.discard(task_id)
                        self.pods.dirty_tasks.add(task_id)
                self.changed.set()

        handle = asyncio.create_task(run())
        self._calls.add(handle)
        handle.add_done_callback(self._calls.discard)

    def _spawn_event(self, call: Coroutine[Any, Any, None]) -> None:
        async def run() -> None:
            async with self._event_slots:
                await call

        handle = asyncio.create_task(run())
        self._calls.add(handle)
        handle.add_done_callback(self._calls.discard)

    async def _bind(self, bind: Bind) -> None:
        outcome = await bind_pod(self.client, bind.pod, bind.node)
        if outcome in (BindOutcome.BOUND, BindOutcome.ALREADY):
            self._bound[bind.task.task_id] = (bind.pod.uid, bind.node)
            if outcome is BindOutcome.BOUND:
                self.bindings += 1
                # Off the binding's slot: the next binding does not wait for this Event.
                self._spawn_event(self.status.scheduled(bind.pod, bind.node))

    async def _evict(self, evict: Evict) -> None:
        await self.status.preempted(evict.pod, evict.task.preemptor)
        await evict_pod(self.client, evict.pod, self._eviction_version)

    def _find_legacy(self, tasks: list[ProjectedTask]) -> None:
        """Match the tasks an earlier bridge named ``ns/<group>-<pod>-0`` or ``ns/<pod>-pod-0``
        to their pods, so a bridge upgraded under running jobs neither cancels nor loses them."""
        for task in tasks:
            if task.task_id in self.pods.by_task:
                continue
            pod_task = legacy_pod_task(task.task_id, task.job_id, task.kind)
            found = self.pods.by_task.get(pod_task) if pod_task is not None else None
            if pod_task is not None and found is not None and found[0].job_id == task.job_id:
                self._legacy[task.task_id] = pod_task
                self._legacy_of[pod_task] = task.task_id

    def _take_dirty_tasks(self) -> set[str]:
        """The tasks whose pods moved or whose calls failed, by the ids the projection holds."""
        dirty, self.pods.dirty_tasks = self.pods.dirty_tasks, set()
        if self._legacy_of:  # a pod of an earlier bridge's task moved: read that task
            dirty.update(self._legacy_of[t] for t in list(dirty) if t in self._legacy_of)
        return dirty

    def _pods_by_task(self) -> Mapping[str, tuple[PodRef, JsonObject]]:
        """The pods by the task ids the projection holds (an earlier bridge's names too)."""
        by_task = self.pods.by_task
        if not self._legacy:
            return by_task
        legacy = {old: by_task[new] for old, new in self._legacy.items() if new in by_task}
        return collections.ChainMap(legacy, by_task)

    async def _out(self, tasks: list[ProjectedTask]) -> None:
        # Tasks whose calls are under way wait for them; pods we bound wait for the watch to show it.
        waiting = []
        pods = self._pods_by_task()
        for task in tasks:
            if task.task_id in self._in_flight:
                self._passed_over.add(task.task_id)
                continue
            bound = self._bound.get(task.task_id)
            found = pods.get(task.task_id)
            if bound is not None and found is not None:
                if json_str(found[1], "spec", "nodeName") or found[0].uid != bound[0]:
                    del self._bound[task.task_id]
                elif task.status == "Bound":
                    continue
            waiting.append(task)
        if self.outage.away():
            self.pods.dirty_tasks.update(task.task_id for task in waiting)  # planned once it answers
            return
        plan = plan_tasks(
            waiting,
            pods,
            nodes=frozenset(self.nodes.objects),
            volcano_jobs=self.volcano_job_ids(),
            cluster=self.cluster,
            source=BRIDGE_SOURCE,
            now=utc_now(),
        )
        seqs = {t.task_id: t.seq for t in tasks}
        fresh = [e for e in plan.events if e.id not in self._emitted]
        if fresh:
            await self.publish(fresh)
            for event in fresh:
                subject = (event.subject or "").removeprefix("task/")
                self._emitted[event.id] = seqs.get(subject, 0)
        if len(self._emitted) > 100_000:
            self._emitted.clear()  # a restart's worth: at worst a redelivery the archive skips
        for bind in plan.binds:
            self._spawn(self._bind(bind), bind.task.task_id)
        for evict in plan.evictions:
            self._spawn(self._evict(evict), evict.task.task_id)
        for creation in plan.creations:
            self._spawn(self._recreate(creation), creation.task.task_id)

    # ------------------------------------------------------------------ loop

    def _projection_moved(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.announced_seq = int(payload)
            self.announcements += 1
            self.changed.set()

    async def _projection_seq(self, *, read: bool) -> int:
        """The seq announced last; read from the database first when ``read`` or none was heard yet."""
        if self.announced_seq is not None and not read:
            return self.announced_seq
        heard = self.announcements
        seq = await projection_seq(self.pool)
        if self.announcements == heard:  # no newer announcement while reading
            self.announced_seq = seq
        return seq

    async def run(self) -> None:
        # The projector NOTIFYs its new seq at each commit: the loop wakes when there are decisions
        # to execute, and reads the seq from the database only now and then (a missed notification).
        async with self.pool.acquire() as listening:
            await listening.add_listener(NOTIFY_CHANNEL, self._projection_moved)
            self._listening = listening
            try:
                async with asyncio.TaskGroup() as group:
                    for informer in self.informers:
                        group.create_task(informer.run(), name=f"watch {informer.kind}")
                    group.create_task(self._reconcile(), name="reconcile")
            finally:
                self._listening = None
                for call in list(self._calls):
                    call.cancel()
                await asyncio.gather(*self._calls, return_exceptions=True)
                with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                    await listening.remove_listener(NOTIFY_CHANNEL, self._projection_moved)

    async def _check_connections(self) -> None:
        """Raises when the bridge lock or the notifications' connection is gone (start again)."""
        if self._check_lock is not None:
            await self._check_lock()
        if self._listening is None or self._listening.is_closed():
            raise asyncpg.InterfaceError("the connection listening for the projection's seq is closed")

    async def _reconcile(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()
        self._eviction_version = await eviction_version(self.client)
        self.door.seed(await read_projected_state(self.pool))
        # Nodes the projection holds that the cluster no longer has.
        for name in sorted(self.door.known_nodes() - set(self.nodes.objects)):
            self.nodes.dirty.add(name)
        for ref in list(self.pods.by_key.values()):
            if ref.kind is PodKind.LONE:
                self.pods.new_lone.add(f"{ref.namespace}/{ref.name}")
        log.info(
            "kube bridge %s: synced (%d nodes, %d queues, %d pods of %s)",
            self.cluster,
            len(self.nodes.objects),
            len(self.queues.objects),
            len(self.pods.by_key),
            self.settings.kube_scheduler_names,
        )
        everything = True
        last_seq = -1
        relists = sum(i.relists for i in self.pod_informers)
        last_check = last_full = time.monotonic()
        nodes = frozenset(self.nodes.objects)
        while True:
            self.changed.clear()
            events, created = self._in_events()
            if events:
                await self.publish(events)
            for job in created:
                await self._create_job_objects(job)
            dirty = self._take_dirty_tasks()
            now_relists = sum(i.relists for i in self.pod_informers)
            if now_relists != relists:
                relists, everything = now_relists, True  # pods may have gone while the watch was down
            # The tasks in transition change only with the projection: after a new seq, those whose
            # rows changed since the last read; in between, only the tasks whose pods moved or whose
            # calls failed need a look (a backlog of Bound tasks would otherwise be read and planned
            # again at every pod event or seq).  All of them now and then, after a rebuilt
            # projection, and when the nodes changed (a task bound to a node not yet listed).
            due = time.monotonic() - last_full > _FULL_READ_EVERY
            seq = await self._projection_seq(read=due)
            now_nodes = frozenset(self.nodes.objects)
            full = seq < last_seq or now_nodes != nodes or due
            if full:
                last_full, nodes = time.monotonic(), now_nodes
            tasks = await read_tasks(
                self.pool,
                sorted(dirty),
                everything=everything,
                transitional=seq != last_seq or full,
                changed_after=None if full or last_seq < 0 else last_seq,
            )
            if everything:
                self._find_legacy(tasks)
            everything, last_seq = False, seq
            self.seq = seq
            await self._out(tasks)
            await self.status.update(self)
            if time.monotonic() - last_check > _LOCK_CHECK:
                last_check = time.monotonic()
                await self._check_connections()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.kube_poll_interval):
                    await self.changed.wait()


async def _publish(producer: AIOKafkaProducer, topics: Topics, events: Sequence[Event]) -> None:
    futures = [await producer.send(topic_for(e, topics), encode(e), key=kafka_key(e)) for e in events]
    await asyncio.gather(*futures)


async def run_bridge(
    settings: KubeBridgeSettings,
    parse: ObjectParser,
    *,
    kafka: KafkaAccess,
    database: DatabaseAccess,
    topics: Topics,
    cluster: str,
    install: bool = False,
    signer: EventSigner | None = None,
    on_ready: Callable[[Bridge], None] | None = None,
) -> None:
    """Run the bridge until cancelled; outages of Kafka, PostgreSQL or the apiserver are retried.

    ``install``: first create or update Tephra's Volcano CRDs (``--install-crds``).
    ``signer``: who signs what it publishes (:mod:`kube.bridge.signing`); None: unsigned.
    """
    failures = 0
    while True:
        began = time.monotonic()
        lock = BridgeLock(database, cluster)
        failure: BaseException | None = None
        try:
            await lock.acquire()
            async with (
                create_pool(database, min_size=2, max_size=4) as pool,  # one listens
                await KubeClient.connect(settings.kubeconfig) as client,
            ):
                if install:
                    log.info("kube bridge: installed %s", ", ".join(await install_crds(client)))
                    install = False
                async with pool.acquire() as conn:  # it reads the projection: tephra migrate's schema
                    await require_schema(conn)
                producer = new_producer(kafka, acks="all")
                try:
                    await start_client(producer, kafka)
                    bridge = Bridge(
                        settings,
                        client,
                        parse,
                        publish=signing(functools.partial(_publish, producer, topics), signer),
                        pool=pool,
                        cluster=cluster,
                        check_lock=lock.check,
                    )
                    if on_ready is not None:
                        on_ready(bridge)
                    await bridge.run()
                finally:
                    await producer.stop()
        except* (
            OSError,
            TimeoutError,
            aiohttp.ClientError,
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            KafkaError,
            KubeApiError,
        ) as group:
            # The apiserver, the broker or the database went away: start again from a fresh list.
            failure = group.exceptions[0]
        finally:
            with contextlib.suppress(OSError, asyncpg.InterfaceError):
                await lock.release()
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            # Told to stop: a failure on the way out (a query cut short) is no reason to go on.
            raise asyncio.CancelledError
        if time.monotonic() - began > 30:
            failures = 0  # the last run was healthy: retry quickly
        delay = _RETRY_AFTER[min(failures, len(_RETRY_AFTER) - 1)]
        failures += 1
        log.warning("kube bridge: %s; retrying in %.1fs", failure, delay)
        await asyncio.sleep(delay)
