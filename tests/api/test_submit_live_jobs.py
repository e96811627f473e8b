"""Issue 22: ``tephra submit`` says at once that a job's name is taken, and ``--wait`` says what the
projector made of each object, on the real broker and PostgreSQL, with ``tephra`` run as its own
process as a user runs it.

A job whose name an unfinished job holds is refused before anything is produced (as Kubernetes
answers AlreadyExists), naming the job, its phase and the way out; once it is cancelled and the
cancellation has finished it, the name is taken again as a new incarnation.  A duplicate the check
cannot see (submitted by someone else while the projection had not folded it yet, or with the
check skipped) is the projector's ``duplicate-job``, which ``--wait`` reports, exiting 1.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from typer.testing import CliRunner

from api.cli import app
from api.endpoints import Endpoints
from events.serde import decode
from events.topics import Topics
from projector.migrate import apply_migrations
from tests.api.helpers import live_stack, read_topic
from tests.api.test_live_scheduling import NODE, PHASE, SETUP, submit
from tests.api.test_submit import QUEUE, fresh_topics
from tests.service.helpers import running_projector, wait_for

pytestmark = pytest.mark.integration

TRAIN = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train, annotations: {tephra.dev/sim-runtime: "600s"}}
spec:
  queue: training
  minAvailable: 1
  tasks:
    - name: worker
      replicas: 1
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
"""
_UID = "SELECT (spec ->> 'submitted_seq')::bigint FROM jobs WHERE id = $1"
_FINISHED = "SELECT finished_at IS NOT NULL FROM jobs WHERE id = $1"
_SUBMITTED = "SELECT count(*) FROM event_log WHERE type = 'tephra.job.submitted.v1' AND subject = $1"
_TAKEN = (
    "job default/train is {phase}: its name is taken until it finishes; cancel it with"
    " `tephra cancel job default/train` and submit again once it has finished, wait for it to finish,"
    " or pick another name"
)


def _env(kafka_bootstrap: str, database_url: str, topics: Topics, data_dir: Path) -> dict[str, str]:
    """The deployment's settings; a data dir of the test's own, where no earlier test's stack left
    a ``keys/cli.pem`` that this database's keyring does not know (its events would be rejected,
    ``unknown-principal``)."""
    return {
        **os.environ,
        "TEPHRA_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TEPHRA_DATABASE_URL": database_url,
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
        "TEPHRA_DATA_DIR": str(data_dir),
    }


def _said(stderr: str) -> list[str]:
    """The errors and the verdict in ``stderr``, without warnings (an unsigned producer) or logs."""
    return [line for line in stderr.splitlines() if line.startswith(("error: ", "nothing was"))]


async def _tephra(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """``tephra ARGS`` as its own process: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_a_running_job_s_name_is_refused_until_it_is_cancelled_then_taken_again(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    env = _env(kafka_bootstrap, database_url, topics, tmp_path / "data")
    job = tmp_path / "train.yaml"
    job.write_text(TRAIN)
    async with live_stack(endpoints):
        conn = await asyncpg.connect(database_url)
        try:
            await submit(endpoints, "---\n".join([SETUP, QUEUE, NODE.format(name="n1")]))
            await wait_for(conn, "SELECT count(*) FROM nodes", 1)

            code, out, err = await _tephra(env, "submit", "--wait", str(job))
            assert code == 0, err
            accepted, summary = out.splitlines()
            first = await conn.fetchval(_UID, "default/train")
            assert accepted == f"job/default/train accepted (seq {first})"
            assert summary == "submitted 1 object (1 job): 1 accepted, 0 rejected"
            await wait_for(conn, PHASE, "Running", "default/train", within=60)

            code, out, err = await _tephra(env, "submit", str(job))
            assert code == 1
            assert out == ""
            assert _said(err) == [
                f"error: {job}, document 1 (Job train): metadata.name: {_TAKEN.format(phase='Running')}",
                "nothing was submitted",
            ]

            code, out, err = await _tephra(env, "cancel", "job", "default/train")
            assert (code, out) == (0, "job/default/train cancelled\n"), err
            await wait_for(conn, _FINISHED, True, "default/train")
            # The refused submission produced nothing: the projector, which took the cancellation
            # produced after it to the same partition, archived one submission and rejected none.
            assert await conn.fetchval(_SUBMITTED, "job/default/train") == 1
            assert await conn.fetchval("SELECT count(*) FROM rejected_events") == 0

            code, out, err = await _tephra(env, "submit", "--wait", str(job))
            assert code == 0, err
            second = await conn.fetchval(_UID, "default/train")
            assert out.splitlines()[0] == f"job/default/train accepted (seq {second})"
            assert second > first
            assert await conn.fetchval(PHASE, f"default/train#{first}") == "Cancelled"
        finally:
            await conn.close()


async def _until_records(bootstrap: str, topic: str, count: int, within: float = 60) -> None:
    """Until ``topic`` holds ``count`` records: read as they come, without writing to it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()  # the cluster's metadata, which partitions_for_topic reads
        numbers = sorted(consumer.partitions_for_topic(topic) or ())
        partitions = [TopicPartition(topic, p) for p in numbers]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        seen = 0
        while seen < count:
            if loop.time() > deadline:
                pytest.fail(f"{topic}: {seen} records, not {count}, after {within} s")
            batch = await consumer.getmany(*partitions, timeout_ms=200)
            seen += sum(len(records) for records in batch.values())
    finally:
        await consumer.stop()


async def test_wait_reports_the_duplicate_the_check_could_not_see_and_exits_1(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    env = _env(kafka_bootstrap, database_url, topics, tmp_path / "data")
    files = tmp_path / "queue-and-train.yaml"
    files.write_text(QUEUE + "---\n" + TRAIN)
    # Someone submits train while the projector is not running (or behind): the projection does
    # not show it yet, so the second submitter's check passes.
    await submit(endpoints, QUEUE + "---\n" + TRAIN)
    second = asyncio.create_task(_tephra(env, "submit", "--wait", "--timeout", "120", str(files)))
    await _until_records(kafka_bootstrap, topics.intents, 4)  # both submissions are on the broker
    async with running_projector(kafka_bootstrap, database_url, topics):
        code, out, err = await second
        assert code == 1, err
        lines = out.splitlines()
        assert len(lines) == 2, err
        assert lines[0].startswith("queue/training accepted (seq "), err
        assert lines[1:] == ["submitted 2 objects (1 queue, 1 job): 1 accepted, 1 rejected"]
        assert _said(err) == [
            "error: job/default/train rejected: duplicate-job: job default/train was already submitted"
            " and has not finished; a job of that name had not finished when the projector came to it:"
            " cancel it with `tephra cancel job default/train` and submit again once it has finished,"
            " wait for it to finish, or pick another name"
        ]

        # Now the projection shows it (Pending: no scheduler runs): the check refuses at once, and
        # with the check skipped the projector rejects it again, which --wait -o name reports.
        job = tmp_path / "train.yaml"
        job.write_text(TRAIN)
        code, _, err = await _tephra(env, "submit", str(job))
        assert code == 1
        assert _TAKEN.format(phase="Pending") in err
        code, out, err = await _tephra(env, "submit", "--skip-live-check", "--wait", "-o", "name", str(job))
        assert (code, out) == (1, "")
        assert _said(err)[0].startswith("error: job/default/train rejected: duplicate-job: ")


def _cli(
    kafka_bootstrap: str, database_url: str, topics: Topics, data_dir: Path, *args: str
) -> tuple[int, str, str]:
    """``tephra submit ARGS`` in this process."""
    env = {
        "TEPHRA_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TEPHRA_DATABASE_URL": database_url,
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
        "TEPHRA_DATA_DIR": str(data_dir),
    }
    result = CliRunner().invoke(app, ["submit", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


async def _projected_cancelled_job(database_url: str) -> None:
    """A migrated projection holding queue training and job default/train, Cancelled while its
    tasks still release their nodes (not finished)."""
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        await conn.execute("INSERT INTO queues (name, seq, doc) VALUES ('training', 1, '{}')")
        await conn.execute(
            "INSERT INTO jobs (id, namespace, name, queue, phase, phase_reason, created, seq, spec)"
            " VALUES ('default/train', 'default', 'train', 'training', 'Cancelled', '', now(), 2, '{}')"
        )
    finally:
        await conn.close()


def test_a_releasing_job_waiting_and_the_flags(
    kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    asyncio.run(_projected_cancelled_job(database_url))
    topics = fresh_topics(kafka_bootstrap)
    job = tmp_path / "train.yaml"
    job.write_text(TRAIN)

    code, out, err = _cli(kafka_bootstrap, database_url, topics, tmp_path, str(job))
    assert (code, out) == (1, "")
    assert (
        "metadata.name: job default/train is Cancelled but has not finished (its tasks are still"
        " releasing their nodes): wait until it has, then submit again, or pick another name"
    ) in err
    assert asyncio.run(read_topic(kafka_bootstrap, topics.intents)) == []

    code, _, err = _cli(kafka_bootstrap, database_url, topics, tmp_path, "--timeout", "5", str(job))
    assert code == 2
    assert "--timeout is how long --wait waits: give --wait too" in err

    # Skipped, it is produced; no projector runs, so --wait names what it could not learn.
    skipped = ("--skip-live-check", "--wait", "--timeout", "0.5", str(job))
    code, out, err = _cli(kafka_bootstrap, database_url, topics, tmp_path, *skipped)
    assert code == 1
    assert out == "submitted 1 object (1 job): 0 accepted, 0 rejected, 1 unknown\n"
    assert "error: job/default/train: not taken by the projector within 0.5 s (is it running?" in err
    ((value, _, _),) = asyncio.run(read_topic(kafka_bootstrap, topics.intents))
    assert decode(value).subject == "job/default/train"


def test_without_the_database_the_name_check_says_so(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = fresh_topics(kafka_bootstrap)
    job = tmp_path / "train.yaml"
    job.write_text(TRAIN)
    unreachable = "postgresql://nobody@127.0.0.1:1/x"
    code, _, err = _cli(kafka_bootstrap, unreachable, topics, tmp_path, "--allow-missing-queue", str(job))
    assert code == 1
    assert "error: cannot check that the jobs' names are free: cannot reach the projection database" in err
    assert "(--skip-live-check submits without the check)" in err
    assert asyncio.run(read_topic(kafka_bootstrap, topics.intents)) == []
