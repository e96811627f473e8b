"""``tephra demo``: the seed articles' examples on an embedded stack, end to end, then an explanation.

The demo runs the real services (projector, scheduler, simulated cluster) on
a throw-away embedded stack, submits :mod:`api.demo_manifests` stage by stage,
waits after each stage until the cluster is stable, and prints what the
scheduler decided (from the projection's accepted bindings and evictions)
and why the job that stayed Pending did not move (the reasons recorded by the
sessions).  Everything it starts is stopped before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import asyncpg

from api.demo_manifests import STAGES
from api.endpoints import Endpoints
from api.manifests import parse_manifests
from api.settings import TephraSettings
from api.stack import SERVICES, embedded_stack, run_services, run_until_signalled, sigterm_unwinds
from api.submit import produce_manifests
from api.views import fetch_items, render
from events.display import printable
from events.quantity import format_quantity
from projector.connections import connect
from projector.migrate import apply_migrations

__all__ = ["DemoError", "demo_command", "run_demo"]

STUCK_JOB = "default/llm-pretrain"
STAGE_TIMEOUT = 90.0


class DemoError(RuntimeError):
    """The demo's cluster did not reach a stable state in time, or a service failed."""


@dataclass(frozen=True)
class _Progress:
    #: Tasks being started (Bound) or stopped (Releasing) by the simulated cluster.
    transitional: int
    #: The newest session: its seq and input seq (None: no session yet).
    session_seq: int | None
    input_seq: int | None
    #: Events archived after that session's input, other than the session itself.
    unseen: int
    #: Projection rows (jobs, tasks) that session changed and nothing changed since.
    changed: int

    def settled(self, since_seq: int) -> bool:
        """Nothing in flight, and the newest session saw everything up to it and changed nothing.

        Then the scheduler has nothing more to do until something new arrives: its
        loop runs a session after every change and only skips once one finds nothing.
        """
        return (
            self.transitional == 0
            and self.input_seq is not None
            and self.input_seq >= since_seq
            and self.unseen == 0
            and self.changed == 0
        )


async def _progress(con: asyncpg.Connection) -> _Progress:
    # The Bound and Releasing tasks (kept by the projector; projector/migrations/0005).
    transitional = await con.fetchval("SELECT count(*) FROM transitional_tasks")
    last = await con.fetchrow("SELECT seq, input_seq FROM sessions ORDER BY seq DESC LIMIT 1")
    if last is None:
        return _Progress(transitional, None, None, 0, 0)
    unseen = await con.fetchval(
        "SELECT count(*) FROM event_log WHERE seq > $1 AND seq <> $2", last["input_seq"], last["seq"]
    )
    # Every projection row carries the seq of the last event that changed it (an enqueue, a binding,
    # an eviction: the session's); pipelines are recorded, not applied, and change no row.
    changed = await con.fetchval(
        "SELECT (SELECT count(*) FROM jobs WHERE seq = $1) + (SELECT count(*) FROM tasks WHERE seq = $1)",
        last["seq"],
    )
    return _Progress(transitional, last["seq"], last["input_seq"], unseen, changed)


async def _wait_projected(
    con: asyncpg.Connection, event_ids: Sequence[str], services: asyncio.Task[None]
) -> int:
    """Wait until every submitted event is archived (or rejected); return the newest one's seq.

    Not the projection's seq: a session that ran meanwhile may already follow the
    events, and waiting for a later session to have seen that session would wait
    for one that never comes (the scheduler runs no session after one that changed
    nothing)."""
    deadline = time.monotonic() + STAGE_TIMEOUT
    while True:
        _check(services)
        done = await con.fetchval(
            "SELECT (SELECT count(*) FROM event_log WHERE event_id = ANY($1::text[]))"
            " + (SELECT count(DISTINCT event_id) FROM rejected_events WHERE event_id = ANY($1::text[]))",
            list(event_ids),
        )
        if done >= len(event_ids):
            return int(
                await con.fetchval(
                    "SELECT coalesce(max(seq), 0) FROM event_log WHERE event_id = ANY($1::text[])",
                    list(event_ids),
                )
            )
        if time.monotonic() > deadline:
            raise DemoError(
                f"only {done}/{len(event_ids)} submitted events were projected in {STAGE_TIMEOUT:.0f}s"
            )
        await asyncio.sleep(0.1)


async def _wait_stable(con: asyncpg.Connection, since_seq: int, *, services: asyncio.Task[None]) -> None:
    """Wait until the cluster is stable after the events up to ``since_seq`` (see :meth:`_Progress.settled`).

    Conditions on the projection only, never a quiet period: on a slow or busy
    machine a session can take longer than any fixed pause.
    """
    deadline = time.monotonic() + STAGE_TIMEOUT
    while True:
        _check(services)
        p = await _progress(con)
        if p.settled(since_seq):
            return
        if time.monotonic() > deadline:
            raise DemoError(f"the cluster did not settle within {STAGE_TIMEOUT:.0f}s ({p})")
        await asyncio.sleep(0.1)


def _check(services: asyncio.Task[None]) -> None:
    if services.done():
        exc = services.exception() if not services.cancelled() else None
        raise DemoError(f"a service stopped during the demo: {exc!r}") from exc


# --------------------------------------------------------------------------- the report


async def _decisions(con: asyncpg.Connection) -> list[str]:
    rows = await con.fetch(
        """
        SELECT s.seq, s.session_id, 'bind' AS kind, b.decision, b.task_id, b.node,
               NULL AS action, NULL AS preemptor, NULL AS rule
          FROM bindings b JOIN sessions s ON s.seq = b.seq
        UNION ALL
        SELECT s.seq, s.session_id, 'evict', e.decision, e.task_id, e.node, e.action, e.preemptor_job, e.rule
          FROM evictions e JOIN sessions s ON s.seq = e.seq
        ORDER BY 1, 4
        """
    )
    lines: list[str] = []
    current = None
    for row in rows:
        if row["session_id"] != current:
            current = row["session_id"]
            lines.append(f"  session {current} (seq {row['seq']}):")
        if row["kind"] == "bind":
            lines.append(f"    bind   {row['task_id']} -> {row['node']}")
        else:
            rule = f", rule {row['rule']}" if row["rule"] else ""
            lines.append(
                f"    evict  {row['task_id']} on {row['node']} ({row['action']} for {row['preemptor']}{rule})"
            )
    return lines


async def _why_pending(con: asyncpg.Connection, job_id: str) -> list[str]:
    job = await con.fetchrow("SELECT phase, spec FROM jobs WHERE id = $1", job_id)
    if job is None:
        return [f"  {job_id} is not in the projection"]
    # The projection keeps the newest session's pending list in newest_pending (the archive: every session's).
    latest = await con.fetchrow(
        """
        SELECT s.session_id, s.seq, p.entry -> 'reasons' AS reasons
          FROM (SELECT session_id, seq FROM sessions ORDER BY seq DESC LIMIT 1) AS s,
               newest_pending AS p
         WHERE p.job = $1
        """,
        job_id,
    )
    lines = [f"  {job_id} is {job['phase']}."]
    if latest is None:
        lines.append("  The latest session recorded no reason for it.")
        return lines
    lines.append(f"  The latest session, {latest['session_id']}, left it pending")
    lines.append(f"  (seq {latest['seq']}), recorded:")
    for reason in _json(latest["reasons"]) or []:
        lines.append(f"    - {reason['code']}: {reason['message']}")
    spec = _json(job["spec"])
    needed = (spec.get("min_resources") or {}).get("nvidia.com/gpu")
    total = await con.fetchval(
        "SELECT coalesce(sum((doc -> 'allocatable' ->> 'nvidia.com/gpu')::bigint), 0) FROM nodes WHERE ready"
    )
    if needed:
        lines.append(
            f"  In numbers: its gang (minAvailable {spec.get('min_available')}) needs "
            f"{format_quantity('nvidia.com/gpu', needed)} nvidia.com/gpu at once; "
            f"the cluster has {total} in total."
        )
        lines.append(
            "  It will move when enough capacity is reported (a NodeReported) or the gang is made smaller."
        )
    return lines


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def _replay_explain(database_url: str, job_id: str, out: TextIO) -> None:
    """The full explanation, as ``replay explain`` prints it (re-run of the recorded session)."""
    from rich.console import Console  # noqa: PLC0415 - only the report needs it

    from replay.errors import ArchiveError, NotFound, ReplayError  # noqa: PLC0415
    from replay.queries import explain_job  # noqa: PLC0415
    from replay.render import print_explanation  # noqa: PLC0415
    from replay.store import open_archive  # noqa: PLC0415

    print(f"\n$ replay explain {job_id}", file=out)
    try:
        async with open_archive(database_url) as reader:
            explanation = await explain_job(reader, job_id)
    except (ArchiveError, NotFound, ReplayError) as exc:
        # The recorded reasons above stand on their own; say why the re-run is missing.
        print(f"  (replay could not explain it: {printable(exc)})", file=out)
        return
    print_explanation(
        Console(file=out, soft_wrap=False, width=200 if not out.isatty() else None), explanation
    )


# --------------------------------------------------------------------------- the run


async def run_demo(settings: TephraSettings, endpoints: Endpoints, out: TextIO) -> None:
    con = await connect(endpoints.database())
    # The demo's own PostgreSQL: migrated here, before the services start (they do not migrate),
    # so the demo's queries run from the start.
    try:
        await apply_migrations(con)
    except BaseException:
        await con.close()
        raise
    services = asyncio.create_task(run_services(settings, endpoints, tuple(SERVICES)), name="services")
    try:
        for stage, file, text in STAGES:
            manifests = parse_manifests([(file, text)], cluster=endpoints.cluster, now=datetime.now(UTC),
                                        source="tephra://cli/demo")  # fmt: skip
            await produce_manifests(manifests, endpoints)
            print(f"submitted {file}: " + ", ".join(o.ref for o in manifests.objects), file=out, flush=True)
            seq = await _wait_projected(con, [o.event.id for o in manifests.objects], services)
            await _wait_stable(con, seq, services=services)
            print(f"  ... {stage}: stable", file=out, flush=True)

        print("\nWhat the scheduler decided (accepted decisions, in order):", file=out)
        for line in await _decisions(con):
            print(printable(line), file=out)
        for kind in ("jobs", "nodes"):
            print(f"\n$ tephra get {kind}", file=out)
            render(kind, await fetch_items(endpoints.database_url, kind), "table", out)
        print(f"\nWhy {STUCK_JOB} did not move:", file=out)
        for line in await _why_pending(con, STUCK_JOB):
            print(printable(line), file=out)
        await _replay_explain(endpoints.database_url, STUCK_JOB, out)
        out.flush()
    finally:
        await con.close()
        services.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await services


def demo_command(base: TephraSettings, *, keep: bool = False, out: TextIO | None = None) -> int:
    """Run the demo on a fresh embedded stack in a temporary data dir; 0 on success.

    ``base`` supplies the periods and delays; the demo always runs its own embedded
    stack, whatever TEPHRA_KAFKA_BOOTSTRAP / TEPHRA_DATABASE_URL / TEPHRA_DATA_DIR say.
    """
    out = out or sys.stdout  # read at call time: tests and embedding apps swap sys.stdout
    data_dir = Path(tempfile.mkdtemp(prefix="tephra-demo-"))
    # PostgreSQL may run as an unprivileged account (when we are root): it must be able to enter.
    data_dir.chmod(0o711)
    settings = base.model_copy(update={"data_dir": data_dir, "kafka_bootstrap": None, "database_url": None})
    print(f"tephra demo: starting an embedded stack in {data_dir} ...", file=out, flush=True)
    try:
        with sigterm_unwinds(), embedded_stack(settings, durable=False) as stack:
            failures: list[DemoError] = []

            async def main() -> None:
                try:
                    await run_demo(settings, stack.endpoints, out)
                except DemoError as exc:
                    failures.append(exc)

            code = run_until_signalled(main)
            for failure in failures:
                print(f"demo failed: {failure}", file=sys.stderr)
                code = 1
    finally:
        if keep:
            print(f"data kept in {data_dir}", file=out)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    return code
