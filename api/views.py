"""``tephra get``: read models over the projection tables, printed kubectl-style.

Each ``list_*`` function returns plain JSON-able dicts (the ``-o json`` /
``-o yaml`` items, resources as canonical Kubernetes quantities); the table
renderers only choose columns.  Reads are one
repeatable-read transaction, so the counts in one listing agree with each
other.  Nothing here writes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import asyncpg
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from api.endpoints import Endpoints
from events.display import printable, redact
from events.quantity import CPU, MEMORY, PODS, format_resources, parse_resources
from projector.state import OCCUPYING, TASK_STATUSES

__all__ = [
    "KINDS",
    "JobQuery",
    "ViewError",
    "get_command",
    "job_page",
    "job_tasks",
    "list_jobs",
    "list_nodes",
    "list_queues",
    "list_sessions",
    "render",
]

GPU = "nvidia.com/gpu"
Item = dict[str, Any]


class ViewError(ValueError):
    """An unknown kind or output format, or a database without the projection."""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- read models


async def _occupancy(con: asyncpg.Connection) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Resources held per node and per queue by tasks that occupy a node (each also one ``pods``)."""
    rows = await con.fetch(
        """
        SELECT t.node, t.role, j.queue, j.spec -> 'task_specs' AS specs
          FROM tasks t JOIN jobs j ON j.id = t.job_id
         WHERE t.status = ANY($1::text[]) AND t.node IS NOT NULL
        """,
        sorted(OCCUPYING),
    )
    per_node: dict[str, dict[str, int]] = {}
    per_queue: dict[str, dict[str, int]] = {}
    for row in rows:
        spec = next((s for s in _json(row["specs"]) if s["name"] == row["role"]), None)
        request = parse_resources(spec.get("resources") if spec else None)
        request[PODS] = request.get(PODS, 0) + 1
        for bucket in (per_node.setdefault(row["node"], {}), per_queue.setdefault(row["queue"], {})):
            for name, amount in request.items():
                bucket[name] = bucket.get(name, 0) + amount
    return per_node, per_queue


async def _pending_reasons(
    con: asyncpg.Connection, job_ids: list[str]
) -> tuple[str | None, dict[str, list[dict[str, str]]]]:
    """The newest session's pending reasons of the given jobs (only theirs are read out of it)."""
    rows = await con.fetch(
        """
        SELECT s.session_id, p.value ->> 'job' AS job, coalesce(p.value -> 'reasons', '[]'::json) AS reasons
          FROM (SELECT session_id, doc FROM sessions ORDER BY seq DESC LIMIT 1) AS s,
               json_array_elements(CASE WHEN json_typeof(s.doc -> 'pending') = 'array'
                                        THEN s.doc -> 'pending' ELSE '[]'::json END) AS p(value)
         WHERE p.value ->> 'job' = ANY($1::text[])
        """,
        job_ids,
    )
    session_id = rows[0]["session_id"] if rows else None
    return session_id, {row["job"]: _json(row["reasons"]) for row in rows}


@dataclass(frozen=True)
class JobQuery:
    """Which jobs :func:`list_jobs` returns: filters, and a page (ids after ``after``, at most ``limit``)."""

    namespace: str | None = None
    queue: str | None = None
    phase: str | None = None
    job_id: str | None = None
    after: str | None = None
    limit: int | None = None
    #: Read the newest session's pending reasons of these jobs: its whole document is parsed,
    #: which at 50k pending jobs costs more than the rest of a page (bench/http_api.py).
    reasons: bool = True


async def list_jobs(con: asyncpg.Connection, query: JobQuery = JobQuery()) -> list[Item]:
    """The jobs the query selects, in id order (``tephra get jobs``: all of them)."""
    _, items = await job_page(con, query)
    return items


async def job_page(con: asyncpg.Connection, query: JobQuery) -> tuple[int, list[Item]]:
    """The seq the projection reflects and the jobs the query selects, in id order.

    The jobs, their task counts and the seq are one statement, so they agree
    without a transaction (one round trip: most of a page's cost on a busy
    host, bench/http_api.py); the pending reasons, when asked for, are a second
    query, which agrees with the first inside a repeatable-read transaction.
    """
    filters = (
        ("namespace = $", query.namespace),
        ("queue = $", query.queue),
        ("phase = $", query.phase),
        ("id = $", query.job_id),
        ("id > $", query.after),
    )
    where: list[str] = []
    args: list[object] = []
    for condition, value in filters:
        if value is not None:
            args.append(value)
            where.append(f"j.{condition}{len(args)}")
    limit = ""
    if query.limit is not None:
        args.append(query.limit)
        limit = f" LIMIT ${len(args)}"
    jobs = await con.fetch(
        # Only the constant fragments here are joined; every value is a parameter.
        "SELECT j.id, j.namespace, j.name, j.queue, j.phase, j.phase_reason, j.created,"  # noqa: S608
        " (j.spec ->> 'min_available')::integer AS min_available,"
        " (SELECT json_object_agg(c.status, c.n) FROM (SELECT status, count(*) AS n FROM tasks"
        "   WHERE job_id = j.id GROUP BY status) AS c)::text AS counts,"
        " (SELECT seq FROM projection_meta) AS projected_seq"
        " FROM jobs AS j" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY j.id" + limit,
        *args,
    )
    seq = jobs[0]["projected_seq"] if jobs else await con.fetchval("SELECT seq FROM projection_meta")
    ids = [job["id"] for job in jobs]
    session_id, pending = await _pending_reasons(con, ids) if query.reasons else (None, {})
    items = []
    for job in jobs:
        counts = json.loads(job["counts"]) if job["counts"] else {}
        tasks = {status: counts.get(status, 0) for status in TASK_STATUSES}
        item: Item = {
            "id": job["id"],
            "namespace": job["namespace"],
            "name": job["name"],
            "queue": job["queue"],
            "phase": job["phase"],
            "minAvailable": job["min_available"],
            "tasks": tasks,
            "created": _iso(job["created"]),
        }
        if job["phase_reason"]:
            item["reason"] = job["phase_reason"]
        if job["id"] in pending:
            item["pendingReasons"] = pending[job["id"]]
            item["pendingSession"] = session_id
        items.append(item)
    return int(seq), items


async def job_tasks(con: asyncpg.Connection, job_id: str) -> list[Item]:
    """One job's tasks in role and index order: status and node."""
    rows = await con.fetch(
        "SELECT id, role, idx, status, node FROM tasks WHERE job_id = $1 ORDER BY role, idx", job_id
    )
    return [
        {"id": r["id"], "role": r["role"], "index": r["idx"], "status": r["status"], "node": r["node"]}
        for r in rows
    ]


async def list_queues(con: asyncpg.Connection) -> list[Item]:
    _, used = await _occupancy(con)
    phases: dict[str, dict[str, int]] = {}
    for row in await con.fetch("SELECT queue, phase, count(*) AS n FROM jobs GROUP BY queue, phase"):
        phases.setdefault(row["queue"], {})[row["phase"]] = row["n"]
    items = []
    for row in await con.fetch("SELECT name, doc FROM queues ORDER BY name"):
        doc = _json(row["doc"])
        items.append(
            {
                "name": row["name"],
                "weight": doc.get("weight"),
                "state": doc.get("state"),
                "priority": doc.get("priority"),
                "reclaimable": doc.get("reclaimable"),
                "capability": format_resources(doc.get("capability") or {}),
                "deserved": format_resources(doc.get("deserved") or {}),
                "guarantee": format_resources(doc.get("guarantee") or {}),
                "allocated": format_resources(used.get(row["name"], {})),
                "jobs": dict(sorted(phases.get(row["name"], {}).items())),
            }
        )
    return items


async def list_nodes(con: asyncpg.Connection) -> list[Item]:
    used, _ = await _occupancy(con)
    tasks = {
        r["node"]: r["n"]
        for r in await con.fetch(
            "SELECT node, count(*) AS n FROM tasks"
            " WHERE node IS NOT NULL AND status = ANY($1::text[]) GROUP BY node",
            sorted(OCCUPYING),
        )
    }
    items = []
    for row in await con.fetch("SELECT name, ready, unschedulable, doc FROM nodes ORDER BY name"):
        doc = _json(row["doc"])
        items.append(
            {
                "name": row["name"],
                "ready": row["ready"],
                "unschedulable": row["unschedulable"],
                "labels": doc.get("labels") or {},
                "allocatable": format_resources(doc.get("allocatable") or {}),
                "used": format_resources(used.get(row["name"], {})),
                "tasks": tasks.get(row["name"], 0),
            }
        )
    return items


async def list_sessions(con: asyncpg.Connection, limit: int = 20) -> list[Item]:
    """The newest sessions, oldest first; with the scheduler's durations of each when it recorded them."""
    timed = await con.fetchval("SELECT to_regclass('scheduler_session_timings') IS NOT NULL")
    durations = (
        "t.read_seconds, t.compute_seconds, t.publish_seconds, t.apply_seconds"
        if timed
        else "NULL AS read_seconds, NULL AS compute_seconds, NULL AS publish_seconds, NULL AS apply_seconds"
    )
    timings = "LEFT JOIN scheduler_session_timings t USING (session_id)" if timed else ""
    rows = await con.fetch(
        f"""
        SELECT s.session_id, s.seq, s.leader_epoch, s.input_seq, s.config_version, s.now, s.accepted, s.doc,
               {durations}
          FROM sessions s {timings} ORDER BY s.seq DESC LIMIT $1
        """,  # noqa: S608 - only the two constant fragments above are interpolated
        limit,
    )
    items = []
    for row in reversed(rows):
        doc = _json(row["doc"])
        items.append(
            {
                "id": row["session_id"],
                "seq": row["seq"],
                "leaderEpoch": row["leader_epoch"],
                "inputSeq": row["input_seq"],
                "configVersion": row["config_version"],
                "now": _iso(row["now"]),
                "accepted": row["accepted"],
                "voided": doc.get("voided", []),
                # The newest session's list only (None for older ones; the archive keeps them).
                "pending": doc.get("pending"),
                # Seconds: snapshot read, computation, publish, until the projection applied it.
                "durations": None
                if row["compute_seconds"] is None
                else {
                    "read": row["read_seconds"],
                    "compute": row["compute_seconds"],
                    "publish": row["publish_seconds"],
                    "apply": row["apply_seconds"],
                },
            }
        )
    return items


Lister = Callable[[asyncpg.Connection], Coroutine[Any, Any, list[Item]]]
KINDS: dict[str, Lister] = {
    "jobs": list_jobs,
    "queues": list_queues,
    "nodes": list_nodes,
    "sessions": list_sessions,
}
_ALIASES = {"job": "jobs", "queue": "queues", "node": "nodes", "session": "sessions", "vcjob": "jobs"}


async def fetch_items(database_url: str, kind: str, *, limit: int = 20) -> list[Item]:
    try:
        con = await asyncpg.connect(database_url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise ViewError(f"cannot reach the projection database: {redact(str(exc))}") from None
    try:
        async with con.transaction(isolation="repeatable_read", readonly=True):
            if kind == "sessions":
                return await list_sessions(con, limit)
            return await KINDS[kind](con)
    except asyncpg.UndefinedTableError as exc:
        raise ViewError(f"the database has no projection yet ({exc}); is the projector running?") from exc
    finally:
        await con.close()


# --------------------------------------------------------------------------- rendering


def _amount(name: str, value: int | None) -> str:
    if value is None:
        return "-"
    if name == CPU:
        return f"{value / 1000:g}"
    if name == MEMORY:
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                return f"{value / size:.4g}{unit}"
        return str(value)
    return str(value)


def _used_of(used: Mapping[str, str], total: Mapping[str, str], name: str) -> str:
    """``used/total`` of one resource; the items hold canonical quantity strings."""
    have = parse_resources({name: total[name]})[name] if name in total else None
    held = parse_resources({name: used[name]})[name] if name in used else 0
    return f"{_amount(name, held)}/{_amount(name, have)}"


def _age(created: str | None, now: datetime) -> str:
    if created is None:
        return "-"
    seconds = int((now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _reason_text(item: Item) -> str:
    reasons = item.get("pendingReasons") or []
    if reasons:
        return "; ".join(f"{r['code']}: {r['message']}" for r in reasons)
    return str(item.get("reason", ""))


def _add_row(table: Table, *cells: str) -> None:
    """One row; every cell shown as text: control characters escaped, no rich markup read from it."""
    table.add_row(*(escape(printable(cell)) for cell in cells))


def _table(kind: str, items: list[Item]) -> Table:
    now = datetime.now(UTC)
    table = Table(box=None, header_style="bold", pad_edge=False)
    if kind == "jobs":
        for column in (
            "NAMESPACE",
            "NAME",
            "QUEUE",
            "PHASE",
            "MIN",
            "PENDING",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
        ):
            table.add_column(column)
        table.add_column("AGE")
        table.add_column("REASON", overflow="fold")
        for j in items:
            t = j["tasks"]
            _add_row(
                table,
                j["namespace"], j["name"], j["queue"], j["phase"], str(j["minAvailable"]),
                str(t["Pending"]), str(t["Bound"] + t["Running"] + t["Releasing"]),
                str(t["Succeeded"]), str(t["Failed"]), _age(j["created"], now), _reason_text(j),
            )  # fmt: skip
    elif kind == "queues":
        for column in ("NAME", "STATE", "WEIGHT", "GPU", "CPU", "MEMORY", "JOBS"):
            table.add_column(column)
        for q in items:
            capability = q["capability"]
            jobs = ", ".join(f"{n} {p}" for p, n in q["jobs"].items()) or "-"
            _add_row(
                table,
                q["name"], q["state"], str(q["weight"]),
                _used_of(q["allocated"], capability, GPU), _used_of(q["allocated"], capability, CPU),
                _used_of(q["allocated"], capability, MEMORY), jobs,
            )  # fmt: skip
    elif kind == "nodes":
        for column in ("NAME", "STATUS", "GPU", "CPU", "MEMORY", "PODS", "TASKS"):
            table.add_column(column)
        for n in items:
            status = ("Ready" if n["ready"] else "NotReady") + (
                ",SchedulingDisabled" if n["unschedulable"] else ""
            )
            alloc, used = n["allocatable"], n["used"]
            _add_row(
                table,
                n["name"], status, _used_of(used, alloc, GPU), _used_of(used, alloc, CPU),
                _used_of(used, alloc, MEMORY), _used_of(used, alloc, PODS), str(n["tasks"]),
            )  # fmt: skip
    else:
        columns = (
            "SESSION",
            "SEQ",
            "EPOCH",
            "INPUT SEQ",
            "NOW",
            "ACCEPTED",
            "VOIDED",
            "PENDING JOBS",
            "TOOK",
        )
        for column in columns:
            table.add_column(column)
        for s in items:
            took = "-" if s["durations"] is None else f"{sum(s['durations'].values()) * 1000:.0f}ms"
            pending = "-" if s["pending"] is None else str(len(s["pending"]))  # the newest session's only
            _add_row(
                table,
                s["id"], str(s["seq"]), str(s["leaderEpoch"]), str(s["inputSeq"]), s["now"] or "-",
                str(s["accepted"]), str(len(s["voided"])), pending, took,
            )  # fmt: skip
    return table


def render(kind: str, items: list[Item], output: str, out: TextIO) -> None:
    if output == "json":
        out.write(json.dumps({"items": items}, indent=2, sort_keys=False) + "\n")
    elif output == "yaml":
        out.write(yaml.safe_dump({"items": items}, sort_keys=False))
    elif not items:
        out.write(f"No {kind} found.\n")
    else:
        Console(file=out, width=200 if not out.isatty() else None).print(_table(kind, items))


def get_command(
    what: str, output: str, endpoints: Endpoints, *, limit: int = 20, out: TextIO | None = None
) -> int:
    out = out or sys.stdout  # read at call time: tests and embedding apps swap sys.stdout
    kind = _ALIASES.get(what, what)
    if kind not in KINDS:
        raise ViewError(f"unknown kind {what!r}; expected one of: {', '.join(KINDS)}")
    if output not in ("table", "json", "yaml"):
        raise ViewError(f"unknown output format {output!r}; expected table, json or yaml")
    items = asyncio.run(fetch_items(endpoints.database_url, kind, limit=limit))
    render(kind, items, output, out)
    return 0
