"""Issue 22 item 5 on the real broker and PostgreSQL: a job name is reused once its job finished.

The live stack (projector, scheduler, simulated cluster, as ``tephra up`` runs them) runs a job to
completion, takes the same name again as a new incarnation that is scheduled and runs, refuses it
while that one runs (``duplicate-job``); ``tephra describe`` shows the live incarnation with the
earlier one listed, replay verifies the whole run and explains each incarnation at its own sessions.
A session computed before a resubmission and committed after it (a late copy, signed by the
leader) binds nothing of the new incarnation: voided ``stale-incarnation``, and verify still passes.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from api.endpoints import Endpoints
from api.views import describe_job, describe_text
from events.models import SessionCommitted, TaskFinished, TaskFinishedData, TaskStarted, TaskStartedData
from events.signing import EventSigner, SigningKey
from events.topics import Topics
from projector.settings import ProjectorSettings
from replay.queries import explain_job, verify_archive
from replay.store import open_archive
from tests.api.helpers import live_stack
from tests.api.test_live_scheduling import NODE, PHASE, SETUP, submit
from tests.service.helpers import job, node, produce, queue, running_projector, running_scheduler, wait_for

pytestmark = pytest.mark.integration

_UID = "SELECT (spec ->> 'submitted_seq')::bigint FROM jobs WHERE id = $1"
_INCARNATIONS = "SELECT count(*) FROM jobs WHERE namespace = $1 AND name = $2"


def _vcjob(replicas: int, runtime: int) -> str:
    return f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: train, annotations: {{tephra.dev/sim-runtime: "{runtime}s"}}}}
spec:
  minAvailable: {replicas}
  tasks:
    - name: worker
      replicas: {replicas}
      template:
        spec:
          containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]
"""


async def _verified(database_url: str) -> int:
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    return report.sessions


async def test_a_finished_job_s_name_runs_again_as_a_new_incarnation(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    async with live_stack(endpoints):
        conn = await asyncpg.connect(database_url)
        try:
            await submit(endpoints, SETUP + "---\n" + NODE.format(name="n1"))
            await wait_for(conn, "SELECT count(*) FROM nodes", 1)
            await submit(endpoints, _vcjob(replicas=1, runtime=1))
            await wait_for(conn, PHASE, "Completed", "default/train", within=60)
            first = await conn.fetchval(_UID, "default/train")

            await submit(endpoints, _vcjob(replicas=2, runtime=600))
            await wait_for(conn, _INCARNATIONS, 2, "default", "train")
            await wait_for(conn, PHASE, "Running", "default/train", within=60)
            second = await conn.fetchval(_UID, "default/train")
            assert second > first
            assert await conn.fetchval(PHASE, f"default/train#{first}") == "Completed"

            await submit(endpoints, _vcjob(replicas=1, runtime=1))  # while the second runs
            await wait_for(conn, "SELECT count(*) FROM rejected_events WHERE error = 'duplicate-job'", 1)
            assert await conn.fetchval(PHASE, "default/train") == "Running"
            bound = await conn.fetch(
                "SELECT DISTINCT session_id, seq FROM bindings WHERE job_id = 'default/train' ORDER BY seq"
            )
            # The simulated kubelet says which binding each start executes: the first incarnation's
            # before the second's submission, the second's after it.
            starts = await conn.fetch(
                "SELECT (data ->> 'observed_seq')::bigint AS observed FROM event_log"
                " WHERE type = 'tephra.task.started.v1' ORDER BY seq"
            )
            assert [r["observed"] < second for r in starts] == [True, False, False]

            item = await describe_job(conn, "default/train")
        finally:
            await conn.close()
    assert item is not None
    assert (item["uid"], item["phase"], len(item["taskList"])) == (second, "Running", 2)
    assert [(i["id"], i["uid"], i["phase"]) for i in item["earlierIncarnations"]] == [
        (f"default/train#{first}", first, "Completed")
    ]
    assert all(e["seq"] >= second for e in item["events"])  # this incarnation's only
    assert "Earlier Incarnations:" in describe_text(item)

    assert await _verified(database_url) > 0
    # One session bound the first incarnation, one the second: each explained as it saw the name.
    (one, _), (two, _) = [(r["session_id"], r["seq"]) for r in bound]
    async with open_archive(database_url) as reader:
        whole = await explain_job(reader, "default/train", counterfactual=False)
        at_one = await explain_job(reader, "default/train", session_id=one, counterfactual=False)
        at_two = await explain_job(reader, "default/train", session_id=two, counterfactual=False)
    submissions = [e for e in whole.timeline if e.kind == "submitted"]
    assert [e.seq for e in submissions] == [first, second]
    assert submissions[1].text.startswith(f"submitted again (incarnation {second})")
    assert (at_one.facts["uid"], at_one.facts["tasks"]) == (first, {"Binding": 1})
    assert (at_two.facts["uid"], at_two.facts["tasks"]) == (second, {"Binding": 2})


async def test_a_session_from_before_the_resubmission_binds_nothing_of_the_new_incarnation(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    leader = EventSigner(SigningKey.generate(), "scheduler")
    settings = ProjectorSettings(
        projector_linger_ms=5, allow_unsigned_intents=True, allow_unsigned_observations=True
    )
    task = "ns/train-worker-0"
    conn = await asyncpg.connect(database_url)
    try:
        async with running_projector(kafka_bootstrap, database_url, topics, settings):
            await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("train")])
            async with running_scheduler(
                kafka_bootstrap, database_url, topics, signer=leader, enrol=True, schedule_period=0.2
            ):
                await wait_for(conn, "SELECT status FROM tasks WHERE id = $1", "Bound", task)
            # The session that bound the first incarnation, as archived.
            seq = await conn.fetchval("SELECT seq FROM bindings WHERE task_id = $1", task)
            async with open_archive(database_url) as reader:
                (archived,) = [row async for row in reader.rows(seq, seq)]
            original = archived.event
            assert isinstance(original, SessionCommitted)

            await produce(kafka_bootstrap, topics, [_started(task), _finished(task)])
            await wait_for(conn, PHASE, "Completed", "ns/train")
            await produce(kafka_bootstrap, topics, [job("train")])
            await wait_for(conn, _INCARNATIONS, 2, "ns", "train")
            submitted = await conn.fetchval(_UID, "ns/train")
            assert submitted > original.data.input_seq

            # The same session arriving late (a new id; the leader's key, its epoch): it was
            # computed before the resubmission, so its binding names the earlier incarnation.
            late = leader.sign(
                original.model_copy(
                    update={
                        "id": str(uuid.uuid4()),
                        "data": original.data.model_copy(update={"session_id": "late-copy"}),
                    }
                )
            )
            await produce(kafka_bootstrap, topics, [late])
            await wait_for(conn, "SELECT count(*) FROM sessions WHERE session_id = 'late-copy'", 1)
            doc = json.loads(await conn.fetchval("SELECT doc FROM sessions WHERE session_id = 'late-copy'"))
            # Its enqueue and its bind: neither holds for a job it never saw.
            assert [(v["kind"], v["task"], v["reason"]) for v in doc["voided"]] == [
                ("enqueue", None, "stale-incarnation"),
                ("bind", task, "stale-incarnation"),
            ]
            assert await conn.fetchval(PHASE, "ns/train") == "Pending"
            assert await conn.fetchval("SELECT status FROM tasks WHERE id = $1", task) == "Pending"
            assert await conn.fetchval("SELECT count(*) FROM bindings WHERE session_id = 'late-copy'") == 0

            # The next term's sessions see the new incarnation: it is scheduled and runs.
            async with running_scheduler(
                kafka_bootstrap, database_url, topics, signer=leader, enrol=True, schedule_period=0.2
            ):
                await wait_for(conn, "SELECT status FROM tasks WHERE id = $1", "Bound", task)
            await produce(kafka_bootstrap, topics, [_started(task)])
            await wait_for(conn, PHASE, "Running", "ns/train")
            assert (
                await conn.fetchval(
                    "SELECT phase FROM jobs WHERE namespace = 'ns' AND name = 'train' AND id <> 'ns/train'"
                )
                == "Completed"
            )
    finally:
        await conn.close()
    assert await _verified(database_url) >= 3  # the late copy re-runs to the decisions it carries


def _started(task: str) -> TaskStarted:
    data = TaskStartedData(job_id="ns/train", task_id=task, node="n1")
    return TaskStarted(id=str(uuid.uuid4()), source="tests://incarnations", time=datetime.now(UTC), data=data)


def _finished(task: str) -> TaskFinished:
    data = TaskFinishedData(job_id="ns/train", task_id=task, node="n1", outcome="succeeded", exit_code=0)
    return TaskFinished(
        id=str(uuid.uuid4()), source="tests://incarnations", time=datetime.now(UTC), data=data
    )
