"""One queue check for every door: ``tephra submit`` refuses a job for a queue that does not exist, as
Volcano's admission webhook and the HTTP API do (issue 23 item 4), on the real broker and PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner

from api.cli import app
from events.serde import decode
from events.topics import Topics
from projector.migrate import apply_migrations
from tests.api.helpers import read_topic
from tests.api.test_submit import JOB, QUEUE, fresh_topics

pytestmark = pytest.mark.integration

LONELY = JOB.replace("spec:\n", "spec:\n  queue: lonely\n", 1)


async def _migrated(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()


@pytest.fixture
def stack(kafka_bootstrap: str, database_url: str) -> tuple[str, Topics]:
    """A migrated projection (no queue) and topics no other test uses."""
    asyncio.run(_migrated(database_url))
    return database_url, fresh_topics(kafka_bootstrap)


def _submit(bootstrap: str, database_url: str, topics: Topics, *args: str) -> tuple[int, str, str]:
    env = {
        "TEPHRA_KAFKA_BOOTSTRAP": bootstrap,
        "TEPHRA_DATABASE_URL": database_url,
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
    }
    result = CliRunner().invoke(app, ["submit", "-o", "name", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_job_for_a_missing_queue_is_refused_unless_allowed(
    kafka_bootstrap: str, stack: tuple[str, Topics], tmp_path: Path
) -> None:
    database_url, topics = stack
    path = tmp_path / "job.yaml"
    path.write_text(LONELY)

    code, _, stderr = _submit(kafka_bootstrap, database_url, topics, str(path))

    assert code == 1
    assert f"{path}, document 1 (Job demo-training): spec.queue: queue 'lonely' does not exist;" in stderr
    assert "or use one of: none exists yet" in stderr
    assert "nothing was submitted (--allow-missing-queue" in stderr
    assert asyncio.run(read_topic(kafka_bootstrap, topics.intents)) == []

    code, stdout, stderr = _submit(kafka_bootstrap, database_url, topics, "--allow-missing-queue", str(path))

    assert code == 0, stderr
    assert stdout.splitlines() == ["job/default/demo-training"]
    ((value, _, _),) = asyncio.run(read_topic(kafka_bootstrap, topics.intents))
    assert decode(value).data.queue == "lonely"  # type: ignore[union-attr]


def test_a_queue_in_the_same_submission_or_the_projection_will_do(
    kafka_bootstrap: str, stack: tuple[str, Topics], tmp_path: Path
) -> None:
    database_url, topics = stack
    together = tmp_path / "together.yaml"
    together.write_text(QUEUE + "---\n" + JOB.replace("spec:\n", "spec:\n  queue: training\n", 1))
    code, stdout, stderr = _submit(kafka_bootstrap, database_url, topics, str(together))
    assert code == 0, stderr
    assert stdout.splitlines() == ["queue/training", "job/default/demo-training"]

    async def projected() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("INSERT INTO queues (name, seq, doc) VALUES ('lonely', 1, '{}')")
        finally:
            await conn.close()

    asyncio.run(projected())
    alone = tmp_path / "alone.yaml"
    alone.write_text(LONELY)
    code, stdout, stderr = _submit(kafka_bootstrap, database_url, topics, str(alone))
    assert code == 0, stderr
    assert stdout.splitlines() == ["job/default/demo-training"]


def test_without_the_database_the_check_says_so(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = fresh_topics(kafka_bootstrap)
    path = tmp_path / "job.yaml"
    path.write_text(LONELY)
    code, _, stderr = _submit(kafka_bootstrap, "postgresql://nobody@127.0.0.1:1/x", topics, str(path))
    assert code == 1
    assert "error: cannot check that the jobs' queues exist: cannot reach the projection database" in stderr
    assert "(--allow-missing-queue submits without the check)" in stderr
    assert asyncio.run(read_topic(kafka_bootstrap, topics.intents)) == []
