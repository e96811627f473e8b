"""Who may do what in the database: one PostgreSQL role per component, and its privileges on each table.

:data:`TABLE_GRANTS` is the one place the grants are written down: every
table of the schema, and what each role may do with it beyond reading
(every role reads every table: the scheduler, the API and the simulated
cluster read the projection and the archive's recent events; the auditor and
``replay`` read everything).  tests/projector/test_roles.py fails when a
migration adds a table this table does not name.

``tephra migrate`` runs :func:`apply_grants` after the migrations, in the same
transaction: it creates the login roles that do not exist, sets the passwords
it is given, and sets each role's privileges to exactly those listed (what
was granted before and is not listed any more is revoked).  Running it again
changes nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import asyncpg
import scramp

__all__ = [
    "APPEND",
    "READ",
    "TABLE_GRANTS",
    "WRITE",
    "Login",
    "Role",
    "apply_grants",
    "default_logins",
    "schema_tables",
    "scram_verifier",
]


class Role(StrEnum):
    """A component with a role of its own; the value is its settings' prefix."""

    PROJECTOR = "projector"
    SCHEDULER = "scheduler"
    API = "api"
    SIM_CLUSTER = "sim"
    #: ``replay`` and auditors: read-only.
    AUDITOR = "auditor"

    @property
    def default_name(self) -> str:
        return f"tephra_{self.value}"


READ: Final = ("SELECT",)
APPEND: Final = ("SELECT", "INSERT")
WRITE: Final = ("SELECT", "INSERT", "UPDATE", "DELETE")


def _table(
    projector: tuple[str, ...] = READ, scheduler: tuple[str, ...] = READ
) -> dict[Role, tuple[str, ...]]:
    """A table every role reads; the projector or the scheduler may also write it."""
    grants: dict[Role, tuple[str, ...]] = dict.fromkeys(Role, READ)
    grants[Role.PROJECTOR] = projector
    grants[Role.SCHEDULER] = scheduler
    return grants


#: table -> role -> privileges.  The archive is append-only for the projector (no UPDATE or
#: DELETE on event_log, even for it); the scheduler writes its leadership and its sessions'
#: timings, nothing else; the API, the simulated cluster and the auditor only read.
TABLE_GRANTS: Final[Mapping[str, Mapping[Role, tuple[str, ...]]]] = {
    "schema_migrations": _table(),
    # the archive
    "event_log": _table(projector=APPEND),
    "rejected_events": _table(projector=APPEND),
    # The chain's signed checkpoints (projector.checkpoints): appended, never rewritten.
    "checkpoints": _table(projector=APPEND),
    # Who may produce what (projector.keyring): `tephra producer add` writes it as the owner;
    # a scheduler with TEPHRA_SCHEDULER_ENROL puts its own key in at each term (INSERT ... ON
    # CONFLICT UPDATE). Turn enrolment off and enrol by hand to take this grant away.
    "keyring": _table(scheduler=("SELECT", "INSERT", "UPDATE")),
    "consumer_offsets": _table(projector=WRITE),
    "state_snapshots": _table(projector=WRITE),
    "state_snapshot_chunks": _table(projector=WRITE),
    "early_observations": _table(projector=WRITE),
    "session_parts": _table(projector=WRITE),
    "expired_buffers": _table(projector=WRITE),
    # the projection
    "projection_meta": _table(projector=WRITE),
    "queues": _table(projector=WRITE),
    "priority_classes": _table(projector=WRITE),
    "hypernodes": _table(projector=WRITE),
    "nodes": _table(projector=WRITE),
    "jobs": _table(projector=WRITE),
    "tasks": _table(projector=WRITE),
    "transitional_tasks": _table(projector=WRITE),
    "bindings": _table(projector=WRITE),
    "evictions": _table(projector=WRITE),
    "sessions": _table(projector=WRITE),
    # The newest session's pending list, one row per job (projector.newest_pending).
    "newest_pending": _table(projector=WRITE),
    # leadership (scheduler.service.leader) and the scheduler's own session records
    "scheduler_leaders": _table(scheduler=APPEND),
    "scheduler_session_timings": _table(scheduler=APPEND),
}

#: Beyond tables: the projector stages rows in temporary tables (projector.projection_rows) and
#: takes ids from the archive's sequences (rejected_events, expired_buffers).
_TEMP_ROLES: Final = (Role.PROJECTOR,)
_SEQUENCE_ROLES: Final = (Role.PROJECTOR,)


@dataclass(frozen=True)
class Login:
    """A role's name and, when given, the password to set (None: leave it as it is)."""

    name: str
    password: str | None = field(default=None, repr=False)


def default_logins() -> dict[Role, Login]:
    return {role: Login(role.default_name) for role in Role}


async def schema_tables(conn: asyncpg.Connection) -> list[str]:
    """The tables of the schema (``public``), sorted."""
    rows = await conn.fetch(
        'SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename COLLATE "C"'
    )
    return [str(r["tablename"]) for r in rows]


async def apply_grants(conn: asyncpg.Connection, logins: Mapping[Role, Login]) -> None:
    """Create the missing roles, set the given passwords, make each role's privileges :data:`TABLE_GRANTS`.

    Run inside the caller's transaction, by a role that owns the tables and may create roles.
    """
    missing = sorted(set(await schema_tables(conn)) - set(TABLE_GRANTS))
    if missing:
        raise LookupError(f"projector.roles.TABLE_GRANTS does not name the tables {missing}: add them")
    database = await conn.fetchval("SELECT current_database()")
    # Before PostgreSQL 15 every role may create tables in public, and every role may create
    # temporary tables in a new database: only what is granted below remains.
    await conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    await _execute_formatted(conn, "REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC", database)
    for role in Role:
        login = logins[role]
        exists = await conn.fetchval("SELECT true FROM pg_roles WHERE rolname = $1", login.name)
        verb = "ALTER" if exists else "CREATE"
        await _execute_formatted(
            conn, f"{verb} ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE", login.name
        )
        if login.password is not None:
            verifier = scram_verifier(login.password)
            await _execute_formatted(conn, "ALTER ROLE %I WITH PASSWORD %L", login.name, verifier)
        await _execute_formatted(conn, "GRANT CONNECT ON DATABASE %I TO %I", database, login.name)
        temp = "GRANT" if role in _TEMP_ROLES else "REVOKE"
        await _execute_formatted(
            conn, f"{temp} TEMPORARY ON DATABASE %I {_to_from(temp)} %I", database, login.name
        )
        await _execute_formatted(conn, "GRANT USAGE ON SCHEMA public TO %I", login.name)
        sequences = "GRANT" if role in _SEQUENCE_ROLES else "REVOKE"
        await _execute_formatted(
            conn,
            f"{sequences} USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public {_to_from(sequences)} %I",
            login.name,
        )
        for table in sorted(TABLE_GRANTS):
            await _execute_formatted(conn, "REVOKE ALL ON TABLE %I FROM %I", table, login.name)
            privileges = ", ".join(TABLE_GRANTS[table][role])
            await _execute_formatted(conn, f"GRANT {privileges} ON TABLE %I TO %I", table, login.name)


#: PostgreSQL's default ``scram_iterations``.
SCRAM_ITERATIONS: Final = 4096


def scram_verifier(password: str, salt: bytes | None = None) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (its ``rolpassword`` form).

    Given a verifier, ``ALTER ROLE ... PASSWORD`` stores it as it is, so the password
    itself never reaches the server, nor any statement log it keeps (what psql's
    ``\\password`` does).
    """
    mechanism = scramp.ScramMechanism("SCRAM-SHA-256")
    salt, stored_key, server_key, iterations = mechanism.make_auth_info(
        password, iteration_count=SCRAM_ITERATIONS, salt=salt
    )
    b64 = base64.b64encode
    return (
        f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
        f"${b64(stored_key).decode()}:{b64(server_key).decode()}"
    )


def _to_from(verb: str) -> str:
    return "TO" if verb == "GRANT" else "FROM"


async def _execute_formatted(conn: asyncpg.Connection, template: str, *values: str) -> None:
    """Run a statement whose identifiers and literals PostgreSQL's ``format`` quotes (DDL takes no $n)."""
    statement = await conn.fetchval("SELECT format($1, VARIADIC $2::text[])", template, list(values))
    await conn.execute(statement)
