"""Tephra's settings: one pydantic-settings object, built once per process.

Every variable is ``TEPHRA_*`` (plus the standard ``OTEL_*`` variables, which
the OpenTelemetry SDK reads itself).  With neither ``TEPHRA_KAFKA_BOOTSTRAP``
nor ``TEPHRA_DATABASE_URL`` set, commands use the embedded dev stack kept
under ``TEPHRA_DATA_DIR``.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SettingsError", "TephraSettings", "load_settings"]

_CLUSTER_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


class TephraSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEPHRA_", extra="ignore", frozen=True)

    kafka_bootstrap: str | None = Field(
        default=None, description="host:port[,host:port] of the Kafka brokers"
    )
    database_url: str | None = Field(default=None, description="postgresql://user@host:port/db")
    cluster: str = Field(default="default", description="cluster id: the Kafka key and the leader scope")
    schedule_period: float = Field(default=1.0, gt=0, le=3600, description="seconds between sessions")
    data_dir: Path = Field(default=Path(".tephra"), description="where the embedded stack keeps its data")
    topics_prefix: str = Field(default="tephra", description="prefix of the Kafka topic names")
    session_budget: float = Field(
        default=30.0, gt=0, description="seconds a session may run before it is abandoned"
    )
    sim_bind_delay: float = Field(
        default=0.5, ge=0, description="simulated cluster: seconds from binding to TaskStarted"
    )
    sim_evict_delay: float = Field(
        default=0.5, ge=0, description="simulated cluster: seconds from eviction to TaskFinished"
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        for part in value.split(","):
            host, sep, port = part.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {value!r}")
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"expected a postgresql:// URL, got {value!r}")
        return value

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if not _CLUSTER_RE.match(value):
            raise ValueError(f"expected a DNS label (lowercase letters, digits, '-'), got {value!r}")
        return value

    @property
    def embedded(self) -> bool:
        """True when the embedded dev stack is to be used (no external services configured)."""
        return self.kafka_bootstrap is None and self.database_url is None


def load_settings() -> TephraSettings:
    """Build the settings from the environment, with errors that name the variable."""
    try:
        settings = TephraSettings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = "TEPHRA_" + ".".join(str(p) for p in err["loc"]).upper()
            problems.append(f"{name}: {err['msg']}")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
    if (settings.kafka_bootstrap is None) != (settings.database_url is None):
        missing = "TEPHRA_DATABASE_URL" if settings.database_url is None else "TEPHRA_KAFKA_BOOTSTRAP"
        raise SettingsError(
            f"invalid settings: {missing} is not set; set both TEPHRA_KAFKA_BOOTSTRAP and "
            "TEPHRA_DATABASE_URL to use external services, or neither to use the embedded stack"
        )
    return settings
