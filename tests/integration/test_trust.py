"""Issue 24's attacks on decisions and producers, against the real broker, PostgreSQL, projector and
scheduler: each is refused with its code and a log line, and the legitimate flow goes on.

The deployment is a production one: no unsigned intents or observations.  The keyring holds the
scheduler (its own key, enrolled at its term), ``team-a`` (jobs and queues, queue ``research``
and ``missing``), ``inventory`` (node and task observations) and ``team-b`` (jobs, queue ``other`` only).
``mallory`` has a key nobody enrolled.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from events.models import (
    MAX_SEQ,
    BindDecision,
    Event,
    JobCancelled,
    JobCancelledData,
    QueueUpserted,
    QueueUpsertedData,
    SessionCommitted,
    SessionCommittedData,
    TaskFinished,
    TaskFinishedData,
    TaskStarted,
    TaskStartedData,
)
from events.serde import decode, encode
from events.signing import EventSigner, SigningKey
from events.topics import Topics, kafka_key
from projector.keyring import add_producer
from projector.migrate import apply_migrations
from projector.settings import ProjectorSettings
from projector.trust import KeyringEntry
from replay.queries import verify_archive
from replay.store import open_archive
from scheduler.service.leader import LEADER_TYPES
from tests.replay.helpers import run_replay
from tests.service.helpers import CLUSTER, job, node, produce, running_projector, running_scheduler, wait_for

pytestmark = pytest.mark.integration

TEAM_A = EventSigner(SigningKey.generate(), "team-a")
TEAM_B = EventSigner(SigningKey.generate(), "team-b")
INVENTORY = EventSigner(SigningKey.generate(), "inventory")
MALLORY = EventSigner(SigningKey.generate(), "mallory")
_JOB_TYPES = frozenset({"tephra.job.submitted.v1", "tephra.job.cancelled.v1", "tephra.queue.upserted.v1"})
_OBSERVATION_TYPES = frozenset(
    {"tephra.node.reported.v1", "tephra.task.started.v1", "tephra.task.finished.v1"}
)
_PRODUCTION = ProjectorSettings(
    projector_linger_ms=5,
    allow_unsigned_intents=False,
    allow_unsigned_observations=False,
    allow_leaderless_sessions=False,
)


async def _send_raw(bootstrap: str, topic: str, event: Event) -> None:
    """One record to ``topic`` whatever its type's topic is (what an attacker with broker access does)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode(event), key=kafka_key(event))
    finally:
        await producer.stop()


async def _rejected(conn: asyncpg.Connection, event_id: str, code: str) -> None:
    query = "SELECT count(*) > 0 FROM rejected_events WHERE event_id = $1 AND error = $2"
    await wait_for(conn, query, True, event_id, code)


def _logged(caplog: pytest.LogCaptureFixture, event_topic: str, code: str) -> bool:
    return any(
        record.levelno == logging.WARNING
        and f"rejected {event_topic}" in record.getMessage()
        and f": {code}: " in record.getMessage()
        for record in caplog.records
    )


@pytest.fixture
async def keyring(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        for signer, may, queues in (
            (TEAM_A, _JOB_TYPES, {"research", "missing"}),
            (TEAM_B, _JOB_TYPES, {"other"}),
            (INVENTORY, _OBSERVATION_TYPES, set()),
        ):
            entry = KeyringEntry(signer.principal, signer.key.public_key, may, frozenset(queues))
            await add_producer(conn, entry)
        yield conn
    finally:
        await conn.close()


def _forged_session(epoch: int, signer: EventSigner | None, binds: tuple[str, str, str]) -> SessionCommitted:
    task, job_id, node_name = binds
    session = SessionCommitted(
        id=str(uuid.uuid4()),
        source="tephra://scheduler",
        time=datetime.now(UTC),
        cluster=CLUSTER,
        data=SessionCommittedData(
            session_id=str(uuid.uuid4()),
            leader_epoch=epoch,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=datetime.now(UTC),
            input_digest="sha256:" + "00" * 32,
            decisions=[BindDecision(task=task, job=job_id, node=node_name)],
        ),
    )
    return session if signer is None else signer.sign(session)


async def test_forged_decisions_and_producers_are_refused_and_scheduling_goes_on(
    kafka_bootstrap: str,
    database_url: str,
    topics: Topics,
    keyring: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="projector")
    conn = keyring
    async with (
        running_projector(kafka_bootstrap, database_url, topics, _PRODUCTION),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.2),
    ):
        # The legitimate flow: a queue and a job by team-a, a node by inventory; the job is bound.
        victim = TEAM_A.sign(job("victim", cpu="4", queue_name="research", namespace="team-a"))
        await produce(
            kafka_bootstrap,
            topics,
            [TEAM_A.sign(_queue("research")), INVENTORY.sign(node("node-0", cpu="8")), victim],
        )
        await wait_for(conn, "SELECT count(*) FROM bindings WHERE job_id = 'team-a/victim'", 1, within=60)
        epoch = await conn.fetchval("SELECT leader_epoch FROM projection_meta")
        victim_task = await conn.fetchval("SELECT task_id FROM bindings WHERE job_id = 'team-a/victim'")
        started = INVENTORY.sign(_started(victim_task, "team-a/victim", "node-0"))
        await produce(kafka_bootstrap, topics, [started])
        await wait_for(conn, "SELECT status FROM tasks WHERE id = $1", "Running", victim_task)

        await _forge_sessions(kafka_bootstrap, topics, conn, epoch)
        await _replay_a_session(kafka_bootstrap, database_url, topics, conn, epoch)
        await _forge_producers(kafka_bootstrap, topics, conn, victim_task)

        # Nothing of it applied: the victim runs, the node is not overcommitted, the epoch is the leader's.
        assert await conn.fetchval("SELECT status FROM tasks WHERE id = $1", victim_task) == "Running"
        assert await conn.fetchval("SELECT phase FROM jobs WHERE id = 'team-a/victim'") == "Running"
        queue_doc = json.loads(await conn.fetchval("SELECT doc FROM queues WHERE name = 'research'"))
        assert queue_doc["state"] == "Open"
        assert await conn.fetchval("SELECT leader_epoch FROM projection_meta") == epoch
        assert await conn.fetchval("SELECT count(*) FROM bindings WHERE job_id = 'team-a/stray'") == 0

        # The legitimate scheduler goes on: a new job is bound.
        after = TEAM_A.sign(job("after", cpu="2", queue_name="research", namespace="team-a"))
        await produce(kafka_bootstrap, topics, [after, TEAM_A.sign(_cancel("team-a/stray"))])
        await wait_for(conn, "SELECT count(*) FROM bindings WHERE job_id = 'team-a/after'", 1, within=60)
        await wait_for(conn, "SELECT phase FROM jobs WHERE id = 'team-a/stray'", "Cancelled")

    for event_topic, code in (
        (topics.intents, "wrong-topic"),
        (topics.decisions, "not-leader"),
        (topics.decisions, "bad-signature"),
        (topics.observations, "wrong-topic"),
        (topics.observations, "unsigned"),
        (topics.observations, "unknown-principal"),
        (topics.observations, "not-permitted"),
        (topics.intents, "not-permitted"),
        (topics.intents, "bad-signature"),
    ):
        assert _logged(caplog, event_topic, code), (event_topic, code)
    # Who did what is in the archive: the principals of the accepted events.
    principals = {row["principal"] for row in await conn.fetch("SELECT DISTINCT principal FROM event_log")}
    assert {"team-a", "inventory", "scheduler"} <= principals
    # Replay re-derives every recorded session, each checked against the leadership in the log.
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    assert report.sessions > 0
    # `replay audit actions` says who did what.
    audit = run_replay(database_url, "audit", "actions", "-o", "csv")
    assert audit.returncode == 0, audit.stderr
    acts = {tuple(line.split(",")[2:6]) for line in audit.stdout.splitlines()[1:]}
    assert ("team-a", "true", "submit", "job/team-a/victim") in acts
    assert ("team-a", "true", "cancel", "job/team-a/stray") in acts
    assert ("scheduler", "true", "lead", f"leader/{epoch}") in acts
    assert not any(act[0] in {"team-b", "mallory"} for act in acts)


async def test_a_scheduler_takes_office_once_an_operator_enrols_its_key(
    kafka_bootstrap: str, database_url: str, topics: Topics, keyring: asyncpg.Connection
) -> None:
    """The operator follows the scheduler's logged `tephra producer add`: the same term then leads,
    without a restart (its rejected LeaderElected is sent again)."""
    signer = EventSigner(SigningKey.generate(), "scheduler")
    public_key = signer.key.public_key
    async with (
        running_projector(kafka_bootstrap, database_url, topics, _PRODUCTION),
        running_scheduler(
            kafka_bootstrap,
            database_url,
            topics,
            schedule_period=0.2,
            signer=signer,
            enrol=False,
        ),
    ):
        refused = "SELECT count(*) > 0 FROM rejected_events WHERE error = 'unknown-principal'"
        await wait_for(keyring, refused, True, within=60)
        assert await keyring.fetchval("SELECT leader_epoch FROM projection_meta") == 0
        await add_producer(keyring, KeyringEntry("scheduler", public_key, LEADER_TYPES))
        await wait_for(keyring, "SELECT leader_key FROM projection_meta", public_key, within=60)
        await produce(kafka_bootstrap, topics, [INVENTORY.sign(node("node-0", cpu="8"))])
        await produce(kafka_bootstrap, topics, [TEAM_A.sign(_queue("research"))])
        await produce(
            kafka_bootstrap,
            topics,
            [TEAM_A.sign(job("later", cpu="1", queue_name="research", namespace="team-a"))],
        )
        await wait_for(keyring, "SELECT count(*) FROM bindings WHERE job_id = 'team-a/later'", 1, within=60)


async def _forge_sessions(kafka_bootstrap: str, topics: Topics, conn: asyncpg.Connection, epoch: int) -> None:
    # 1. A SessionCommitted on the intents topic with epoch 10^12 binding a job in a missing queue.
    stray = TEAM_A.sign(job("stray", cpu="1", queue_name="missing", namespace="team-a"))
    await produce(kafka_bootstrap, topics, [stray])
    await wait_for(conn, "SELECT count(*) FROM jobs WHERE id = 'team-a/stray'", 1)
    forged = _forged_session(10**12, MALLORY, ("team-a/stray-worker-0", "team-a/stray", "node-0"))
    await _send_raw(kafka_bootstrap, topics.intents, forged)
    await _rejected(conn, forged.id, "wrong-topic")
    # ... and on the decisions topic: not the leadership's epoch, nor its key.
    on_decisions = _forged_session(10**12, MALLORY, ("team-a/victim-worker-0", "team-a/victim", "node-0"))
    await _send_raw(kafka_bootstrap, topics.decisions, on_decisions)
    await _rejected(conn, on_decisions.id, "not-leader")
    right_epoch = _forged_session(epoch, MALLORY, ("team-a/victim-worker-0", "team-a/victim", "node-0"))
    await _send_raw(kafka_bootstrap, topics.decisions, right_epoch)
    await _rejected(conn, right_epoch.id, "bad-signature")
    unsigned = _forged_session(epoch, None, ("team-a/victim-worker-0", "team-a/victim", "node-0"))
    await _send_raw(kafka_bootstrap, topics.decisions, unsigned)
    await _rejected(conn, unsigned.id, "bad-signature")


async def _replay_a_session(
    kafka_bootstrap: str, database_url: str, topics: Topics, conn: asyncpg.Connection, epoch: int
) -> None:
    # 2. A copy of a real session with a higher epoch (and a new id), on observations and on decisions.
    real = await conn.fetchrow(
        "SELECT seq FROM event_log WHERE type = 'tephra.session.committed.v1' ORDER BY seq DESC LIMIT 1"
    )
    async with open_archive(database_url) as reader:
        (archived,) = [row async for row in reader.rows(real["seq"], real["seq"])]
    copied = archived.event
    assert isinstance(copied, SessionCommitted)
    assert copied.signature is not None  # the scheduler signs its sessions
    replayed = copied.model_copy(
        update={
            "id": str(uuid.uuid4()),
            "data": copied.data.model_copy(update={"leader_epoch": epoch + 1, "session_id": "copy"}),
        }
    )
    await _send_raw(kafka_bootstrap, topics.observations, replayed)
    await _rejected(conn, replayed.id, "wrong-topic")
    await _send_raw(kafka_bootstrap, topics.decisions, replayed)
    await _rejected(conn, replayed.id, "not-leader")
    same_epoch = replayed.model_copy(
        update={"data": replayed.data.model_copy(update={"leader_epoch": epoch})}
    )
    await _send_raw(kafka_bootstrap, topics.decisions, same_epoch)
    await _rejected(conn, same_epoch.id, "bad-signature")  # the signature covers id and data


async def _forge_producers(
    bootstrap: str, topics: Topics, conn: asyncpg.Connection, victim_task: str
) -> None:
    kafka_bootstrap = bootstrap
    # 3. Observations and intents from producers who may not send them.
    forged_start = _started(victim_task, "team-a/victim", "node-0")
    await produce(kafka_bootstrap, topics, [forged_start])
    await _rejected(conn, forged_start.id, "unsigned")
    by_mallory = MALLORY.sign(_started(victim_task, "team-a/victim", "node-0"))
    await produce(kafka_bootstrap, topics, [by_mallory])
    await _rejected(conn, by_mallory.id, "unknown-principal")
    failed = TEAM_B.sign(_finished(victim_task, "team-a/victim", "node-0", "failed"))
    await produce(kafka_bootstrap, topics, [failed])
    await _rejected(conn, failed.id, "not-permitted")
    cancel = TEAM_B.sign(_cancel("team-a/victim"))
    await produce(kafka_bootstrap, topics, [cancel])
    await _rejected(conn, cancel.id, "not-permitted")
    closed = TEAM_B.sign(_queue("research", state="Closed"))
    await produce(kafka_bootstrap, topics, [closed])
    await _rejected(conn, closed.id, "not-permitted")
    # team-a's own signature, the record edited after signing.
    tampered = TEAM_A.sign(_cancel("team-a/victim")).model_copy(update={"id": str(uuid.uuid4())})
    await produce(kafka_bootstrap, topics, [tampered])
    await _rejected(conn, tampered.id, "bad-signature")


def _queue(name: str, **fields: object) -> QueueUpserted:
    return QueueUpserted(
        id=str(uuid.uuid4()),
        source="tests://trust",
        time=datetime.now(UTC),
        cluster=CLUSTER,
        data=QueueUpsertedData.model_validate({"name": name, **fields}),
    )


def _started(task: str, job_id: str, node_name: str) -> TaskStarted:
    return TaskStarted(
        id=str(uuid.uuid4()),
        source="tests://trust",
        time=datetime.now(UTC),
        cluster=CLUSTER,
        data=TaskStartedData(job_id=job_id, task_id=task, node=node_name),
    )


def _finished(task: str, job_id: str, node_name: str, outcome: str) -> TaskFinished:
    return TaskFinished(
        id=str(uuid.uuid4()),
        source="tests://trust",
        time=datetime.now(UTC),
        cluster=CLUSTER,
        data=TaskFinishedData.model_validate(
            {"job_id": job_id, "task_id": task, "node": node_name, "outcome": outcome}
        ),
    )


def _cancel(job_id: str) -> JobCancelled:
    return JobCancelled(
        id=str(uuid.uuid4()),
        source="tests://trust",
        time=datetime.now(UTC),
        cluster=CLUSTER,
        data=JobCancelledData(job_id=job_id, reason="forged"),
    )


def test_a_record_signed_by_hand_decodes_with_its_attributes() -> None:
    signed = TEAM_A.sign(_cancel("team-a/x"))
    assert decode(encode(signed)) == signed
