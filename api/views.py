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
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

import asyncpg
import yaml

from api.endpoints import Endpoints
from events.display import printable, redact
from events.quantity import CPU, MEMORY, PODS, format_resources, parse_resources
from projector.connections import DatabaseAccess, connect
from projector.occupancy import occupancy
from projector.state import OCCUPYING, TASK_STATUSES

__all__ = [
    "KINDS",
    "JobQuery",
    "ViewError",
    "earlier_incarnations",
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


async def _pending_reasons(
    con: asyncpg.Connection, job_ids: list[str]
) -> tuple[str | None, dict[str, list[dict[str, str]]]]:
    """The newest session's pending reasons of the given jobs (only theirs are read out of it)."""
    rows = await con.fetch(
        """
        SELECT s.session_id, p.job, coalesce(p.entry -> 'reasons', '[]'::json) AS reasons
          FROM (SELECT session_id FROM sessions ORDER BY seq DESC LIMIT 1) AS s,
               newest_pending AS p
         WHERE p.job = ANY($1::text[])
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
    #: Read the newest session's pending reasons of these jobs (a further query, by job id in
    #: newest_pending; it parsed the session's whole document before, bench/http_api.py).
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
        " coalesce((j.spec ->> 'submitted_seq')::bigint, 0) AS uid,"
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
            "uid": job["uid"],
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


async def earlier_incarnations(con: asyncpg.Connection, job: Item) -> list[Item]:
    """The earlier incarnations of ``job``'s name still in the projection (a name is reused
    once its job finished; each stays until its own retention deadline), oldest first."""
    rows = await con.fetch(
        "SELECT id, phase, phase_reason, created, finished_at,"
        " coalesce((spec ->> 'submitted_seq')::bigint, 0) AS uid"
        " FROM jobs WHERE namespace = $1 AND name = $2 AND id <> $3 ORDER BY uid, id",
        job["namespace"],
        job["name"],
        job["id"],
    )
    return [
        {
            "id": r["id"],
            "uid": r["uid"],
            "phase": r["phase"],
            "reason": r["phase_reason"] or None,
            "created": _iso(r["created"]),
            "finishedAt": _iso(r["finished_at"]),
        }
        for r in rows
        if r["uid"] < job["uid"]
    ]


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
    _, used = await occupancy(con)
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
    used, _ = await occupancy(con)
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
               CASE WHEN (s.doc ->> 'pending_rows')::boolean
                    THEN (SELECT coalesce(json_agg(p.entry ORDER BY p.job), '[]'::json) FROM newest_pending p)
               END AS pending_rows,
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
                "pending": doc.get("pending") if row["pending_rows"] is None else _json(row["pending_rows"]),
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


T = TypeVar("T")


async def read_projection(
    database_url: DatabaseAccess | str, work: Callable[[asyncpg.Connection], Awaitable[T]]
) -> T:
    """Run ``work`` in one read-only repeatable-read transaction; errors as :class:`ViewError`."""
    try:
        con = await connect(database_url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise ViewError(f"cannot reach the projection database: {redact(str(exc))}") from None
    try:
        async with con.transaction(isolation="repeatable_read", readonly=True):
            return await work(con)
    except asyncpg.UndefinedTableError as exc:
        raise ViewError(
            f"the database has no projection yet ({exc}); run `tephra migrate`, then the projector"
        ) from exc
    finally:
        await con.close()


async def fetch_items(
    database_url: DatabaseAccess | str, kind: str, *, limit: int = 20, query: JobQuery | None = None
) -> list[Item]:
    """One listing; ``query`` selects the jobs (default: all of them)."""

    async def work(con: asyncpg.Connection) -> list[Item]:
        if kind == "sessions":
            return await list_sessions(con, limit)
        if kind == "jobs":
            return await list_jobs(con, query or JobQuery())
        return await KINDS[kind](con)

    return await read_projection(database_url, work)


# --------------------------------------------------------------------------- rendering

#: The output formats of every listing (``-o``): ``table`` and ``wide`` are for people.
OUTPUTS = ("table", "wide", "json", "yaml", "name")


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


def reason_codes(item: Item) -> str:
    """The short REASON of a job: its first (most fundamental) pending reason's code and how many
    more there are (the newest session's), else its phase's reason."""
    codes = list(dict.fromkeys(str(r["code"]) for r in item.get("pendingReasons") or []))
    if codes:
        return codes[0] + (f" (+{len(codes) - 1})" if len(codes) > 1 else "")
    return str(item.get("reason", "")) or "-"


def reason_text(item: Item) -> str:
    """The whole reason: each pending reason's code and message (``-o wide``, ``describe``)."""
    reasons = item.get("pendingReasons") or []
    if reasons:
        return "; ".join(f"{r['code']}: {r['message']}" for r in reasons)
    return str(item.get("reason", ""))


def cell(value: object) -> str:
    """One table cell as text: every value of a table goes through here (control characters escaped)."""
    return "-" if value is None else printable(str(value))


def columns(header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    """Rows as plain columns, kubectl's layout: each as wide as its longest cell, two spaces apart.

    No cell is cut (a name is what one types next); the last column is not padded, so a long
    one only makes its own line longer.  Linear in the rows: no layout pass over the table.
    """
    text = [header, *(tuple(cell(value) for value in row) for row in rows)]
    widths = [max(len(line[i]) for line in text) for i in range(len(header) - 1)]
    lines = []
    for line in text:
        padded = [value.ljust(width) for value, width in zip(line, widths, strict=False)]
        lines.append("  ".join([*padded, line[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def _job_rows(
    items: list[Item], *, wide: bool, namespaces: bool
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    now = datetime.now(UTC)
    head: tuple[str, ...] = ("NAMESPACE",) if namespaces else ()
    if wide:
        header = (
            *head,
            "NAME",
            "QUEUE",
            "PHASE",
            "MIN",
            "PENDING",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
            "AGE",
            "REASON",
        )
    else:  # READY: tasks on a node of all the tasks (kubectl's READY); MIN and the rest in -o wide
        header = (*head, "NAME", "QUEUE", "PHASE", "READY", "AGE", "REASON")
    rows: list[tuple[object, ...]] = []
    for j in items:
        t = j["tasks"]
        running = t["Bound"] + t["Running"] + t["Releasing"]
        first = (j["namespace"],) if namespaces else ()
        # The id's name part: an earlier incarnation of a reused name shows as <name>#<uid>.
        name = j["id"].partition("/")[2]
        age = _age(j["created"], now)
        if wide:
            rows.append(
                (
                    *first,
                    name,
                    j["queue"],
                    j["phase"],
                    j["minAvailable"],
                    t["Pending"],
                    running,
                    t["Succeeded"],
                    t["Failed"],
                    age,
                    reason_text(j) or "-",
                )
            )
        else:
            ready = f"{running}/{sum(t.values())}"
            rows.append((*first, name, j["queue"], j["phase"], ready, age, reason_codes(j)))
    return header, rows


def _table(kind: str, items: list[Item], *, wide: bool = False, namespaces: bool = True) -> str:
    return columns(*_table_rows(kind, items, wide=wide, namespaces=namespaces))


def _table_rows(
    kind: str, items: list[Item], *, wide: bool, namespaces: bool
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """A table's header and rows (one per item, in order), not yet laid out."""
    if kind == "jobs":
        header, rows = _job_rows(items, wide=wide, namespaces=namespaces)
    elif kind == "queues":
        header = ("NAME", "STATE", "WEIGHT", "GPU", "CPU", "MEMORY", "JOBS")
        if wide:
            header = (*header[:3], "PRIORITY", "RECLAIMABLE", *header[3:])
        rows = []
        for q in items:
            capability, allocated = q["capability"], q["allocated"]
            jobs = ", ".join(f"{n} {p}" for p, n in q["jobs"].items()) or "-"
            extra = (q["priority"], q["reclaimable"]) if wide else ()
            rows.append(
                (
                    q["name"],
                    q["state"],
                    q["weight"],
                    *extra,
                    _used_of(allocated, capability, GPU),
                    _used_of(allocated, capability, CPU),
                    _used_of(allocated, capability, MEMORY),
                    jobs,
                )
            )
    elif kind == "nodes":
        header = ("NAME", "STATUS", "GPU", "CPU", "MEMORY", "PODS", "TASKS") + (("LABELS",) if wide else ())
        rows = []
        for n in items:
            status = ("Ready" if n["ready"] else "NotReady") + (
                ",SchedulingDisabled" if n["unschedulable"] else ""
            )
            alloc, used = n["allocatable"], n["used"]
            labels = (",".join(f"{k}={v}" for k, v in sorted(n["labels"].items())) or "-",) if wide else ()
            rows.append(
                (
                    n["name"],
                    status,
                    _used_of(used, alloc, GPU),
                    _used_of(used, alloc, CPU),
                    _used_of(used, alloc, MEMORY),
                    _used_of(used, alloc, PODS),
                    n["tasks"],
                    *labels,
                )
            )
    else:
        header = ("SESSION", "SEQ", "EPOCH", "INPUT SEQ", "NOW", "ACCEPTED", "VOIDED", "PENDING JOBS", "TOOK")
        rows = []
        for s in items:
            took = "-" if s["durations"] is None else f"{sum(s['durations'].values()) * 1000:.0f}ms"
            rows.append(
                (
                    s["id"],
                    s["seq"],
                    s["leaderEpoch"],
                    s["inputSeq"],
                    s["now"],
                    s["accepted"],
                    len(s["voided"]),
                    None if s["pending"] is None else len(s["pending"]),  # the newest session's only
                    took,
                )
            )
    return header, rows


_REF = {
    "jobs": ("job", "id"),
    "queues": ("queue", "name"),
    "nodes": ("node", "name"),
    "sessions": ("session", "id"),
}


def render(kind: str, items: list[Item], output: str, out: TextIO, *, namespaces: bool = True) -> None:
    """Print ``items`` as ``output`` (one of :data:`OUTPUTS`); ``namespaces``: a jobs table shows them."""
    if output == "json":
        out.write(json.dumps({"items": items}, indent=2, sort_keys=False) + "\n")
    elif output == "yaml":
        out.write(yaml.safe_dump({"items": items}, sort_keys=False))
    elif output == "name":
        prefix, key = _REF[kind]
        out.write("".join(f"{prefix}/{cell(item[key])}\n" for item in items))
    elif not items:
        out.write(f"No {kind} found.\n")
    else:
        out.write(_table(kind, items, wide=output == "wide", namespaces=namespaces))


@dataclass(frozen=True)
class Selection:
    """What ``tephra get`` lists: a kind, optionally one object by name, a namespace (jobs), a limit."""

    kind: str
    name: str | None = None
    namespace: str | None = "default"  # None: every namespace (-A)
    limit: int = 20  # sessions: how many of the newest
    #: nodes: key=value pairs every listed node's labels hold (``-l``).
    labels: tuple[tuple[str, str], ...] = ()

    def job_query(self) -> JobQuery:
        if self.name is not None and "/" in self.name:
            return JobQuery(job_id=self.name)
        if self.name is not None:
            return JobQuery(job_id=f"{self.namespace or 'default'}/{self.name}")
        return JobQuery(namespace=self.namespace)


def kind_of(what: str) -> str:
    kind = _ALIASES.get(what, what)
    if kind not in KINDS:
        raise ViewError(f"unknown kind {what!r}; expected one of: {', '.join(KINDS)}")
    return kind


async def select_items(database_url: DatabaseAccess | str, selection: Selection) -> list[Item]:
    """The items ``selection`` names (a named one that does not exist: an empty list)."""
    kind = selection.kind
    if kind == "jobs":
        return await fetch_items(database_url, kind, query=selection.job_query())
    items = await fetch_items(database_url, kind, limit=selection.limit)
    if selection.labels:
        items = [i for i in items if all(i["labels"].get(k) == v for k, v in selection.labels)]
    if selection.name is None:
        return items
    key = _REF[kind][1]
    return [item for item in items if item[key] == selection.name]


def label_selector(text: str | None, kind: str) -> tuple[tuple[str, str], ...]:
    """``-l key=value[,key=value]`` as pairs; only nodes have labels."""
    if not text:
        return ()
    if kind != "nodes":
        raise ViewError(f"-l: {kind} have no labels; only nodes do")
    pairs = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key:
            raise ViewError(f"-l: expected key=value[,key=value], got {text!r}")
        pairs.append((key, value))
    return tuple(pairs)


def watch(
    database_url: DatabaseAccess | str,
    selection: Selection,
    output: str,
    out: TextIO,
    *,
    interval: float = 2.0,
    rounds: int | None = None,
) -> None:
    """``get -w``: the table, then each row again whenever it changes (its AGE aside), until interrupted.

    ``rounds``: stop after that many reads (None: never; Ctrl-C ends it).
    """
    if output not in ("table", "wide"):
        raise ViewError(f"-w: watches a table (-o table or wide), not {output}")
    key = _REF[selection.kind][1]
    shown: dict[object, tuple[object, ...]] = {}
    done = 0
    while rounds is None or done < rounds:
        items = asyncio.run(select_items(database_url, selection))
        header, rows = _table_rows(
            selection.kind, items, wide=output == "wide", namespaces=selection.namespace is None
        )
        age = header.index("AGE") if "AGE" in header else None
        changed = []
        for item, row in zip(items, rows, strict=True):
            compared = row if age is None else row[:age] + row[age + 1 :]
            if shown.get(item[key]) != compared:
                shown[item[key]] = compared
                changed.append(row)
        text = columns(header, changed) if changed else ""
        out.write(text if done == 0 else "".join(text.splitlines(keepends=True)[1:]))
        out.flush()
        done += 1
        if rounds is None or done < rounds:
            time.sleep(interval)


def get_command(
    what: str,
    output: str,
    endpoints: Endpoints,
    *,
    name: str | None = None,
    namespace: str | None = "default",
    limit: int = 20,
    labels: str | None = None,
    watch_interval: float | None = None,
    out: TextIO | None = None,
) -> int:
    """``tephra get``: 0, or 1 when a named object does not exist."""
    out = out or sys.stdout  # read at call time: tests and embedding apps swap sys.stdout
    kind = kind_of(what)
    if output not in OUTPUTS:
        raise ViewError(f"unknown output format {output!r}; expected one of: {', '.join(OUTPUTS)}")
    selection = Selection(kind, name, namespace, limit, label_selector(labels, kind))
    if watch_interval is not None:
        try:
            watch(endpoints.database(), selection, output, out, interval=watch_interval)
        except KeyboardInterrupt:
            pass
        return 0
    items = asyncio.run(select_items(endpoints.database(), selection))
    if name is not None and not items:
        where = f" in namespace {namespace or 'default'}" if kind == "jobs" and "/" not in name else ""
        print(f"error: {_REF[kind][0]} {name!r} not found{where}", file=sys.stderr)
        return 1
    if kind == "jobs" and not items and namespace is not None and output in ("table", "wide"):
        out.write(f"No jobs found in namespace {namespace} (-A: every namespace).\n")
        return 0
    render(kind, items, output, out, namespaces=namespace is None)
    return 0


# --------------------------------------------------------------------------- describe job

_EVENT_WORDS = {
    "tephra.job.submitted.v1": "Submitted",
    "tephra.job.cancelled.v1": "Cancelled",
    "tephra.job.rejected.v1": "Rejected",
    "tephra.task.started.v1": "Started",
    "tephra.task.finished.v1": "Finished",
}


async def describe_job(con: asyncpg.Connection, job_id: str, *, events: int = 30) -> Item | None:
    """One job as ``tephra describe job`` shows it: its listing item, its tasks, its last ``events``.

    The events are the archive's records of the job (submitted, started, finished, cancelled) and
    the decisions about its tasks (bound, evicted), newest last; ``None``: no such job.
    """
    found = await list_jobs(con, JobQuery(job_id=job_id))
    if not found:
        return None
    item = found[0]
    tasks = await job_tasks(con, job_id)
    # This incarnation's events: from its JobSubmitted on (a reused name's earlier ones are listed).
    rows = await con.fetch(
        """
        SELECT * FROM (
            SELECT e.seq, e.time, e.type AS what, coalesce(e.data ->> 'task_id', '') AS task,
                   concat_ws(' ', 'to queue ' || (e.data ->> 'queue'), e.data ->> 'outcome',
                             'on ' || (e.data ->> 'node'), nullif(e.data ->> 'reason', '')) AS detail
              FROM event_log e WHERE e.job = $1 AND e.seq >= $4
            UNION ALL
            SELECT b.seq, e.time, 'Bound', b.task_id, 'to ' || b.node || ' (session ' || b.session_id || ')'
              FROM bindings b JOIN event_log e ON e.seq = b.seq
             WHERE b.task_id = ANY($2::text[]) AND b.seq >= $4
            UNION ALL
            SELECT v.seq, e.time, 'Evicted', v.task_id,
                   'from ' || v.node || ' for ' || v.preemptor_job || ' (' || v.action || ', '
                   || v.rule || ')'
              FROM evictions v JOIN event_log e ON e.seq = v.seq
             WHERE v.task_id = ANY($2::text[]) AND v.seq >= $4
        ) AS timeline ORDER BY seq DESC LIMIT $3
        """,
        job_id,
        [t["id"] for t in tasks],
        events,
        item["uid"],
    )
    item["taskList"] = tasks
    item["earlierIncarnations"] = await earlier_incarnations(con, item)
    item["events"] = [
        {
            "seq": r["seq"],
            "time": _iso(r["time"]),
            "event": _EVENT_WORDS.get(r["what"], r["what"]),
            "task": r["task"] or None,
            "detail": r["detail"] or None,
        }
        for r in reversed(rows)
    ]
    return item


def _facts(facts: Sequence[tuple[str, object]]) -> list[str]:
    """``Label:  value`` lines, the values aligned."""
    width = max(len(label) for label, _ in facts) + 2
    return [f"{label + ':':<{width}}{cell(value)}" for label, value in facts]


def _indented(header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> list[str]:
    return ["  " + line for line in columns(header, rows).splitlines()] if rows else ["  none"]


def _quantities(resources: Mapping[str, str]) -> str:
    """``cpu: 64, memory: 512Gi, ...`` as the tables show them."""
    amounts = parse_resources(dict(resources))
    return ", ".join(f"{name}: {_amount(name, amount)}" for name, amount in sorted(amounts.items())) or "-"


async def describe_object(con: asyncpg.Connection, kind: str, name: str) -> Item | None:
    """A queue or node as ``tephra describe`` shows it: its listing item, and for a node its tasks."""
    items = await (list_queues(con) if kind == "queues" else list_nodes(con))
    item = next((i for i in items if i["name"] == name), None)
    if item is not None and kind == "nodes":
        rows = await con.fetch(
            "SELECT id, job_id, status FROM tasks WHERE node = $1 AND status = ANY($2::text[]) ORDER BY id",
            name,
            sorted(OCCUPYING),
        )
        item["taskList"] = [{"id": r["id"], "job": r["job_id"], "status": r["status"]} for r in rows]
    return item


def describe_object_text(kind: str, item: Item) -> str:
    """A queue's facts and its jobs by phase; a node's facts and the tasks on it."""
    if kind == "queues":
        lines = _facts(
            [
                ("Name", item["name"]),
                ("State", item["state"]),
                ("Weight", item["weight"]),
                ("Priority", item["priority"]),
                ("Reclaimable", item["reclaimable"]),
                ("Capability", _quantities(item["capability"])),
                ("Deserved", _quantities(item["deserved"])),
                ("Guarantee", _quantities(item["guarantee"])),
                ("Allocated", _quantities(item["allocated"])),
            ]
        )
        lines += ["", "Jobs:", *_indented(("PHASE", "JOBS"), list(item["jobs"].items()))]
    else:
        status = ("Ready" if item["ready"] else "NotReady") + (
            ",SchedulingDisabled" if item["unschedulable"] else ""
        )
        labels = ", ".join(f"{k}={v}" for k, v in sorted(item["labels"].items())) or "-"
        lines = _facts(
            [
                ("Name", item["name"]),
                ("Status", status),
                ("Labels", labels),
                ("Allocatable", _quantities(item["allocatable"])),
                ("Allocated", _quantities(item["used"])),
            ]
        )
        rows = [(t["id"], t["job"], t["status"]) for t in item["taskList"]]
        lines += ["", "Tasks:", *_indented(("TASK", "JOB", "STATUS"), rows)]
    return "\n".join(lines) + "\n"


def describe_text(item: Item) -> str:
    """``kubectl describe``'s layout: facts, tasks, the newest pending reasons, the event timeline."""
    t = item["tasks"]
    facts = [
        ("Name", item["name"]),
        ("Namespace", item["namespace"]),
        ("Queue", item["queue"]),
        ("Phase", item["phase"] + (f" ({item['reason']})" if item.get("reason") else "")),
        ("Min Available", item["minAvailable"]),
        ("Tasks", ", ".join(f"{n} {status}" for status, n in t.items() if n) or "none"),
        ("Created", item["created"]),
        ("UID", item["uid"]),
    ]
    lines = _facts(facts)
    if earlier := item.get("earlierIncarnations"):
        lines += ["", "Earlier Incarnations:"]
        incarnation_rows = [
            (i["uid"], i["phase"], i["reason"], i["created"], i["finishedAt"]) for i in earlier
        ]
        lines += _indented(("UID", "PHASE", "REASON", "CREATED", "FINISHED"), incarnation_rows)
    lines += ["", "Task List:"]
    task_rows = [(task["role"], task["index"], task["status"], task["node"]) for task in item["taskList"]]
    lines += _indented(("ROLE", "INDEX", "STATUS", "NODE"), task_rows)
    reasons = item.get("pendingReasons") or []
    lines += [
        "",
        f"Pending Reasons (session {item.get('pendingSession')}):" if reasons else "Pending Reasons: none",
    ]
    lines += [f"  {cell(r['code'])}: {cell(r['message'])}" for r in reasons]
    event_rows = [(e["seq"], e["time"], e["event"], e["task"], e["detail"]) for e in item["events"]]
    lines += ["", "Events:", *_indented(("SEQ", "TIME", "EVENT", "TASK", "DETAIL"), event_rows)]
    return "\n".join(lines) + "\n"


async def fetch_job(database_url: DatabaseAccess | str, job_id: str) -> Item | None:
    """:func:`describe_job` in one read-only transaction."""
    return await read_projection(database_url, lambda con: describe_job(con, job_id))


async def fetch_object(database_url: DatabaseAccess | str, kind: str, name: str) -> Item | None:
    """:func:`describe_object` in one read-only transaction."""
    return await read_projection(database_url, lambda con: describe_object(con, kind, name))
