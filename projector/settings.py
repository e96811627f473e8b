"""The projector's settings: ``TEPHRA_<FIELD>`` in the environment, ``--<field>`` on ``tephra projector``.

Where the projector connects (Kafka, PostgreSQL, topics, cluster) is not
here: ``api`` resolves the endpoints (an external stack or the embedded one)
and passes them to :func:`~projector.service.run_projector` alongside these.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from events.models import INT32_MAX
from projector.connection_settings import ServiceCredentials
from projector.door import Position
from projector.heap import BUSY_THAW_GROWTH, THAW_GROWTH

__all__ = ["ProjectorSettings", "parse_positions"]

# A Kafka topic name ([a-zA-Z0-9._-]), a partition and an offset.
_POSITION: Final = re.compile(r"([a-zA-Z0-9._-]+):([0-9]+):([0-9]+)")


class ProjectorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEPHRA_", extra="ignore", frozen=True, allow_inf_nan=False)

    projector_consumer: str = Field(
        default="",
        description="name the consumed offsets are stored under (empty: projector:<cluster>)",
    )
    projector_batch_size: int = Field(default=5_000, gt=0, description="most records per transaction")
    projector_linger_ms: int = Field(
        default=50,
        ge=0,
        description="how long a batch may wait for more records once it has one"
        " (not past a session's marker)",
    )
    # Kafka answers a fetch as soon as records are there; the embedded broker (Tansu) only
    # when this expires, so aiokafka's 500 ms default added ~115 ms to every session's
    # read-your-writes wait (bench/e2e.py).
    projector_fetch_max_wait_ms: int = Field(
        default=25, gt=0, description="the longest a fetch waits at the broker for records"
    )
    projector_topics_refresh: float = Field(
        default=5.0,
        gt=0,
        description="seconds between two looks for topics and partitions that appeared since the start",
    )
    projector_max_read_skew: float = Field(
        default=300.0,
        gt=0,
        description="seconds of event time a topic is read ahead of the slowest one with records left"
        " to read (projector.read_pacing): past it, its partitions are held back while a backlog drains",
    )
    snapshot_every: int = Field(default=10_000, gt=0, description="events between two state snapshots")
    snapshot_scale: float = Field(
        default=1.0,
        ge=0,
        description="and at least this many events per job, task and node of the state between two"
        " snapshots (0: every snapshot_every events exactly)",
    )
    projector_max_backoff: float = Field(
        default=5.0, gt=0, description="seconds: the longest wait before reconnecting after an outage"
    )
    projector_metrics_period: float = Field(
        default=30.0, gt=0, description="seconds between two metrics log lines"
    )
    projector_freeze: bool = Field(
        default=True,
        description="keep the collector off the folded state and the batches (projector.heap);"
        " process-wide, so `tephra up` leaves it off",
    )
    projector_thaw_growth: float = Field(
        default=THAW_GROWTH,
        gt=0,
        description="a full collection is due at an idle moment once the frozen heap grew by this factor",
    )
    projector_busy_thaw_growth: float = Field(
        default=BUSY_THAW_GROWTH,
        gt=0,
        description="a batch runs the full collection once the frozen heap grew by this factor"
        " without an idle moment",
    )

    checkpoint_every_events: int = Field(
        default=10_000,
        gt=0,
        description="archived events between two signed checkpoints of the chain (docs/archive-format.md)",
    )
    checkpoint_every_seconds: float = Field(
        default=60.0,
        gt=0,
        description="seconds after which a checkpoint is published anyway, if the archive grew since",
    )
    projector_key_file: Path | None = Field(
        default=None,
        description="the projector's Ed25519 private key (PKCS#8 PEM), which signs the checkpoints;"
        " created when missing (empty: projector.key under TEPHRA_DATA_DIR)",
    )

    max_record_bytes: int = Field(
        default=2 * 1024 * 1024,
        gt=0,
        description="bytes: a larger record is rejected (record-too-large) before it is decoded;"
        " keep it above TEPHRA_SCHEDULER_MAX_MESSAGE_BYTES plus 64 KiB",
    )
    max_replicas_per_task: int = Field(
        default=10_000,
        gt=0,
        le=INT32_MAX,
        description="a JobSubmitted with a task of more replicas is rejected (too-many-replicas)",
    )
    max_tasks_per_job: int = Field(
        default=10_000,
        gt=0,
        le=INT32_MAX,
        description="a JobSubmitted with more replicas in all its tasks is rejected (too-many-tasks)",
    )
    projector_kafka_username: str = Field(
        default="", description="the projector's own SASL user (empty: TEPHRA_KAFKA_USERNAME)"
    )
    projector_kafka_password_file: Path | None = Field(
        default=None, description="a file holding the projector's SASL password"
    )
    projector_database_user: str = Field(
        default="", description="the PostgreSQL role the projector connects as (empty: the URL's user)"
    )
    projector_database_password_file: Path | None = Field(
        default=None, description="a file holding that role's password"
    )

    allow_unsigned_intents: bool | None = Field(
        default=None,
        description="accept intents without principal and signature (development only; never decisions);"
        " empty: on for the embedded stack, off otherwise (docs/producers.md, Signing)",
    )
    allow_unsigned_observations: bool | None = Field(
        default=None,
        description="accept observations (node and task events) without principal and signature;"
        " empty: on for the embedded stack, off otherwise",
    )
    allow_leaderless_sessions: bool = Field(
        default=False,
        description="take sessions while the log names no leader (no LeaderElected yet), fenced only by"
        " the highest epoch seen, as archives written before leadership events were: for feeding such"
        " archives and test streams through a projector, never for a deployment",
    )
    skip_record: str = Field(
        default="",
        description="TOPIC:PARTITION:OFFSET[,...]: records the projector rejects unread"
        " (skipped-by-operator), the escape hatch past a record that stops it",
    )

    @field_validator("skip_record")
    @classmethod
    def _positions(cls, value: str) -> str:
        parse_positions(value)
        return value

    @model_validator(mode="after")
    def _thaws_in_order(self) -> Self:
        if self.projector_busy_thaw_growth < self.projector_thaw_growth:
            raise ValueError(
                f"TEPHRA_PROJECTOR_BUSY_THAW_GROWTH ({self.projector_busy_thaw_growth}) must be at least"
                f" TEPHRA_PROJECTOR_THAW_GROWTH ({self.projector_thaw_growth})"
            )
        return self

    def projector_credentials(self) -> ServiceCredentials:
        return ServiceCredentials(
            "projector",
            self.projector_kafka_username,
            self.projector_kafka_password_file,
            self.projector_database_user,
            self.projector_database_password_file,
        )

    def consumer_name(self, cluster: str) -> str:
        return self.projector_consumer or f"projector:{cluster}"


def parse_positions(text: str) -> list[Position]:
    """``TOPIC:PARTITION:OFFSET`` items, comma-separated, as positions (ValueError naming a bad one)."""
    positions: list[Position] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        match = _POSITION.fullmatch(item)
        if match is None:
            raise ValueError(f"{item!r} is not TOPIC:PARTITION:OFFSET (e.g. tephra.intents:0:1234)")
        positions.append((match[1], int(match[2]), int(match[3])))
    return positions
