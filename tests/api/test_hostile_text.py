"""Names and texts with control characters are shown escaped by every renderer, and in the logs.

``tephra submit`` refuses such names, but raw events reach the archive, and
free text (reasons, messages, rules, errors) can carry anything: a renderer
must never let one recolour the terminal (ESC), forge a row (a newline) or
be read as rich markup.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from rich.console import Console

from api.logs import SafeTextFormatter
from api.views import Item, render
from events.models import JobSubmitted, JobSubmittedData, TaskSpec
from events.topics import Topics
from replay.audit import EvictionRow, QueueShare, rows_to_csv
from replay.render import print_audit
from tests.service.helpers import produce, queue, running_projector, wait_for

HOSTILE = "ev\x1b[31mil\nforged-row [bold]x[/bold] \u202e\x9b2J"
ROOT = Path(__file__).resolve().parents[2]


def _assert_safe(output: str) -> None:
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in output, repr(output)
    assert not any(line.startswith("forged-row") for line in output.splitlines()), output


def _job(name: str, reason: str) -> Item:
    return {
        "id": f"ns/{name}", "namespace": "ns", "name": name, "uid": 1, "queue": name, "phase": "Pending",
        "minAvailable": 1,
        "tasks": {"Pending": 1, "Bound": 0, "Running": 0, "Releasing": 0, "Succeeded": 0, "Failed": 0},
        "created": None, "pendingReasons": [{"code": "gang-not-ready", "message": reason}],
    }  # fmt: skip


def test_tephra_get_tables_escape_every_cell() -> None:
    out = io.StringIO()
    render("jobs", [_job(HOSTILE, f"queue {HOSTILE} is full")], "table", out)
    _assert_safe(out.getvalue())
    assert "ev\\x1b[31mil\\nforged-row" in out.getvalue()
    assert "[bold]x[/bold]" in out.getvalue()  # shown, not read as markup


def _eviction(text: str) -> EvictionRow:
    share = QueueShare(allocated={"cpu": 1}, deserved={"cpu": 2.0})
    return EvictionRow(
        time=datetime(2026, 1, 1, tzinfo=UTC), session_id=text, seq=1, position=0, action=text, node=text,
        victim_task=text, victim_job=text, victim_queue=text, victim_priority=0, preemptor_task=text,
        preemptor_job=text, preemptor_queue=text, preemptor_priority=1, rule=text,
        victim_share_before=share, victim_share_after=share, preemptor_share_before=share,
        preemptor_share_after=share, verified=False, voided=text,
    )  # fmt: skip


@pytest.mark.parametrize("output_format", ["table", "csv", "json"])
def test_replay_audit_escapes_every_field(output_format: str) -> None:
    out = io.StringIO()
    print_audit(Console(file=out, width=400), [_eviction(HOSTILE)], output_format)
    _assert_safe(out.getvalue())
    if output_format == "json":  # JSON's own escapes: the same text once parsed
        assert json.loads(out.getvalue())["items"][0]["victim"]["task"] == HOSTILE
    else:
        assert "ev\\x1b[31mil" in out.getvalue()


def test_the_csv_keeps_plain_values_as_they_are() -> None:
    assert "plain-name" in rows_to_csv([_eviction("plain-name")])


def test_log_lines_escape_the_message_and_redact_passwords() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(SafeTextFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.hostile")
    logger.addHandler(handler)
    try:
        logger.warning("job %s rejected; db postgresql://u:pw-123@db/t", HOSTILE)
    finally:
        logger.removeHandler(handler)
    line = stream.getvalue()
    assert line.count("\n") == 1  # one record, one line
    _assert_safe(line)
    assert "pw-123" not in line
    assert "postgresql://u:***@db/t" in line


async def test_a_raw_event_with_a_hostile_name_never_reaches_the_terminal_raw(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # Straight to Kafka, as any producer may: the doors' validation is not in the way.
    hostile = JobSubmitted(
        id=str(uuid.uuid4()), source="tests://hostile", time=datetime.now(UTC), subject="job/ns/x",
        data=JobSubmittedData.model_construct(
            namespace="ns", name="ev\x1b[31mil\nforged-row", queue="default", min_available=1,
            tasks=[TaskSpec(name="worker", replicas=1, resources={"cpu": "1"})],
        ),
    )  # fmt: skip
    await produce(kafka_bootstrap, topics, [queue(), hostile])
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        try:
            # Archived (then projected) or rejected (an invalid name): either way, settled.
            await wait_for(
                conn, "SELECT (SELECT count(*) FROM event_log) + (SELECT count(*) FROM rejected_events)", 2
            )
        finally:
            await conn.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPHRA_")}
    env.update(
        TEPHRA_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TEPHRA_DATABASE_URL=database_url,
        TEPHRA_TOPICS_PREFIX=topics.prefix,
        PYTHONPATH=str(ROOT),
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "api.cli", "get", "jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    _assert_safe(result.stdout)
    if "forged-row" in result.stdout:  # projected (not rejected at the projector as an invalid name)
        assert "ev\\x1b[31mil\\nforged-row" in result.stdout
