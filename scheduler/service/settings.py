"""The scheduler's settings: ``TEPHRA_<FIELD>`` in the environment, ``--<field>`` on ``tephra scheduler``.

Where the scheduler connects (Kafka, PostgreSQL, topics, cluster) is not
here: ``api`` resolves the endpoints and passes them to
:func:`~scheduler.service.main.run_scheduler` alongside these.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from projector.connection_settings import ServiceCredentials

__all__ = ["SchedulerSettings"]


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEPHRA_", extra="ignore", frozen=True, allow_inf_nan=False)

    schedule_period: float = Field(
        default=1.0, gt=0, le=3600, description="seconds: the longest interval between two sessions"
    )
    session_budget: float = Field(
        default=30.0, gt=0, description="seconds a session may run before it is abandoned"
    )
    scheduler_apply_timeout: float = Field(
        default=30.0,
        gt=0,
        description="seconds to wait for the projection to apply a session before reporting a stall",
    )
    # Kafka's default message.max.bytes is 1 MiB + 12: room is left for key, headers and framing.
    scheduler_max_message_bytes: int = Field(
        default=1_000_000,
        ge=4_000,
        description="largest session message; bigger sessions are split into parts (the broker's limit)",
    )
    scheduler_holder: str = Field(
        default="", description="name recorded as the leader in scheduler_leaders (empty: host:pid)"
    )
    scheduler_key_file: Path | None = Field(
        default=None,
        description="the scheduler's Ed25519 private key (PKCS#8 PEM) that signs its LeaderElected and"
        " sessions, created (mode 0600) when missing; empty: <data dir>/keys/scheduler.pem. Its public"
        " key must be in the keyring (TEPHRA_SCHEDULER_ENROL, or `tephra producer add`)",
    )
    scheduler_principal: str = Field(
        default="scheduler",
        pattern=r"^[A-Za-z0-9._@-]{1,128}$",
        description="the scheduler's name in the keyring (the principal of its events)",
    )
    scheduler_enrol: bool = Field(
        default=False,
        description="put the scheduler's key in the keyring at each term (the embedded stack and compose"
        " do; a deployment's operator adds it once with `tephra producer add`)",
    )
    scheduler_freeze_heap: bool = Field(
        default=True,
        description="freeze the long-lived heap out of the collector before each session and pause"
        " the collector until the session is published (scheduler.service.heap)",
    )

    scheduler_kafka_username: str = Field(
        default="", description="the scheduler's own SASL user (empty: TEPHRA_KAFKA_USERNAME)"
    )
    scheduler_kafka_password_file: Path | None = Field(
        default=None, description="a file holding the scheduler's SASL password"
    )
    scheduler_database_user: str = Field(
        default="", description="the PostgreSQL role the scheduler connects as (empty: the URL's user)"
    )
    scheduler_database_password_file: Path | None = Field(
        default=None, description="a file holding that role's password"
    )

    def scheduler_credentials(self) -> ServiceCredentials:
        return ServiceCredentials(
            "scheduler",
            self.scheduler_kafka_username,
            self.scheduler_kafka_password_file,
            self.scheduler_database_user,
            self.scheduler_database_password_file,
        )
