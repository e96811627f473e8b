"""Tephra's settings: one model per service, composed here, built once per process.

Each service package owns the model of its own settings
(:class:`~projector.settings.ProjectorSettings`,
:class:`~scheduler.service.settings.SchedulerSettings`,
:class:`~kube.settings.SimClusterSettings`,
:class:`~kube.bridge.settings.KubeBridgeSettings`,
:class:`~api.http.settings.ApiSettings`); :class:`CommonSettings` holds
what every command shares: where the stack is, and the log level.
:class:`TephraSettings` is all of them in one object, the one the service
commands build; each service is handed it as its own model (a base class).

One name per setting: field ``x_y`` is the variable ``TEPHRA_X_Y`` and the
flag ``--x-y`` of the commands in :data:`COMMAND_SETTINGS`; a flag wins over
the variable.  The standard ``OTEL_*`` variables are read by the
OpenTelemetry SDK itself.  With neither ``TEPHRA_KAFKA_BOOTSTRAP`` nor
``TEPHRA_DATABASE_URL`` set, commands use the embedded dev stack kept under
``TEPHRA_DATA_DIR``.  ``python -m api.settings`` prints docs/configuration.md.
"""

from __future__ import annotations

import os
import re
import types
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Self, TypeVar, get_args
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.http.settings import ApiSettings
from events.display import redact
from events.models import DEFAULT_CLUSTER
from events.topics import Topics
from kube.bridge.settings import KubeBridgeSettings
from kube.settings import SimClusterSettings
from projector.connection_settings import ConnectionSettings
from projector.settings import ProjectorSettings
from replay.locate import DEFAULT_DATA_DIR_TEXT, default_data_dir
from scheduler.service.settings import SchedulerSettings

__all__ = [
    "COMMAND_SETTINGS",
    "ENV_PREFIX",
    "CommonSettings",
    "KubeBridgeCommandSettings",
    "LogFormat",
    "LogLevel",
    "MigrateSettings",
    "ObservabilitySettings",
    "SettingsError",
    "TephraSettings",
    "configuration_markdown",
    "default_text",
    "env_name",
    "flag_name",
    "load_settings",
    "type_name",
]

ENV_PREFIX = "TEPHRA_"
_CLUSTER_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable or the flag."""


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


#: hide_input_in_errors: pydantic's own message of a ValidationError quotes each bad value, and
#: one of them may be a database URL with its password; load_settings quotes them redacted.
_CONFIG = SettingsConfigDict(
    env_prefix=ENV_PREFIX, extra="ignore", frozen=True, allow_inf_nan=False, hide_input_in_errors=True
)


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class CommonSettings(ConnectionSettings):
    """Where the stack is, how to reach it (:class:`~projector.connections.ConnectionSettings`), logging."""

    model_config = _CONFIG

    kafka_bootstrap: str | None = Field(
        default=None, description="host:port[,host:port] of the Kafka brokers (unset: the embedded stack)"
    )
    database_url: str | None = Field(
        default=None, description="postgresql://user@host:port/db (unset: the embedded stack)"
    )
    cluster: str = Field(
        default=DEFAULT_CLUSTER, description="cluster id: the Kafka key and the leader scope"
    )
    topics_prefix: str = Field(default=Topics().prefix, description="prefix of the Kafka topic names")
    create_topics: bool = Field(
        default=True,
        description="create the deployment's missing topics at start (false: the services wait for them,"
        " and read them once they exist)",
    )
    topic_partitions: int = Field(default=1, gt=0, description="partitions of each topic Tephra creates")
    topic_replication_factor: int = Field(
        default=1, gt=0, description="replicas of each topic Tephra creates (at most the number of brokers)"
    )
    data_dir: Path = Field(
        default_factory=lambda: default_data_dir(os.environ),
        description="where the embedded stack keeps its data (the user's state directory: every folder"
        " finds the same stack)",
        json_schema_extra={"default_text": DEFAULT_DATA_DIR_TEXT},
    )
    producer_name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._@-]{1,128}$",
        description="the keyring name this process signs intents as, NAME:SUBJECT (empty: cli for the"
        " commands, api for the HTTP API; docs/producers.md)",
    )
    producer_key_file: Path | None = Field(
        default=None,
        description="the Ed25519 private key (PKCS#8 PEM) that signs them (empty: <data dir>/keys/NAME.pem,"
        " when it exists; else the events go unsigned)",
    )
    log_level: LogLevel = Field(default=LogLevel.INFO, description="the services' log level")
    log_format: LogFormat = Field(
        default=LogFormat.TEXT, description="text lines, or one JSON object a line (for log collectors)"
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        for part in value.split(","):
            host, sep, port = part.strip().rpartition(":")
            if "@" in host:
                raise ValueError("expected host:port[,host:port] without credentials")
            if not sep or not host or not port.isdigit():
                raise ValueError("expected host:port[,host:port]")
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        problem = _database_url_problem(value)
        if problem is not None:
            raise ValueError(problem)  # load_settings quotes the value, redacted
        return value

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if not _CLUSTER_RE.match(value):
            raise ValueError(f"expected a DNS label (lowercase letters, digits, '-'), got {value!r}")
        return value

    @field_validator("topics_prefix")
    @classmethod
    def _topics_prefix(cls, value: str) -> str:
        return Topics(value).prefix  # its own check of Kafka's topic names

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if (self.kafka_bootstrap is None) != (self.database_url is None):
            missing = "database_url" if self.database_url is None else "kafka_bootstrap"
            raise ValueError(
                f"{env_name(missing)} (--{flag_name(missing)}) is not set; set both TEPHRA_KAFKA_BOOTSTRAP"
                " and TEPHRA_DATABASE_URL to use external services, or neither to use the embedded stack"
            )
        return self

    @property
    def embedded(self) -> bool:
        """True when the embedded dev stack is to be used (no external services configured)."""
        return self.kafka_bootstrap is None and self.database_url is None


class ObservabilitySettings(BaseSettings):
    """Where a service process serves its metrics and health (tracing is the ``OTEL_*`` variables')."""

    model_config = _CONFIG

    metrics_addr: str = Field(
        default="",
        description="host:port serving /metrics (Prometheus text), /healthz and /readyz (unset: none;"
        " port 0: any free port, printed at start)",
    )
    ready_max_lag: int = Field(
        default=1_000,
        ge=0,
        description="records the projector may be behind the broker and still answer /readyz with 200",
    )

    @field_validator("metrics_addr")
    @classmethod
    def _metrics_addr(cls, value: str) -> str:
        if value == "":
            return value
        _, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65_535:
            raise ValueError(f"expected host:port (or :port), got {value!r}")
        return value


class MigrateSettings(BaseSettings):
    """``tephra migrate``: who migrates, and the auditor's role (the services' roles are their settings')."""

    model_config = _CONFIG

    migrate_database_user: str = Field(
        default="",
        description="the role tephra migrate connects as: the tables' owner, allowed to create roles"
        " (empty: the URL's user)",
    )
    migrate_database_password_file: Path | None = Field(
        default=None, description="a file holding that role's password"
    )
    migrate_roles: bool = Field(
        default=True,
        description="create the components' roles and set their grants (projector.roles); false: only"
        " the migrations",
    )
    auditor_database_user: str = Field(
        default="", description="the read-only role of replay and auditors (empty: tephra_auditor)"
    )
    auditor_database_password_file: Path | None = Field(
        default=None, description="a file holding its password, set by tephra migrate"
    )


class TephraSettings(
    CommonSettings,
    ObservabilitySettings,
    ProjectorSettings,
    SchedulerSettings,
    SimClusterSettings,
    ApiSettings,
    MigrateSettings,
):
    """Every setting: what ``tephra up`` runs with; each service reads its own base class."""

    model_config = _CONFIG


class KubeBridgeCommandSettings(CommonSettings, ObservabilitySettings, KubeBridgeSettings):
    """What ``tephra kube-bridge`` runs with: the bridge is no part of ``tephra up``."""

    model_config = _CONFIG


#: The models whose fields each command accepts as flags.  Every service command builds the
#: whole :class:`TephraSettings` (one environment, checked as a whole); its flags are its own.
COMMAND_SETTINGS: Mapping[str, tuple[type[BaseSettings], ...]] = {
    "up": (
        CommonSettings,
        ObservabilitySettings,
        ProjectorSettings,
        SchedulerSettings,
        SimClusterSettings,
        ApiSettings,
        MigrateSettings,
    ),
    "projector": (CommonSettings, ObservabilitySettings, ProjectorSettings),
    "scheduler": (CommonSettings, ObservabilitySettings, SchedulerSettings),
    "sim-cluster": (CommonSettings, ObservabilitySettings, SimClusterSettings),
    "kube-bridge": (CommonSettings, ObservabilitySettings, KubeBridgeSettings),
    "api": (CommonSettings, ApiSettings),
    "migrate": (CommonSettings, MigrateSettings),
    "submit": (CommonSettings,),
    "get": (CommonSettings,),
}


def _shown(value: str) -> str:
    """A setting's value as an error message may quote it: without its secrets."""
    if any(c.isspace() for c in value):
        # A password with a space in it would not be recognised as one (events.display): say less.
        return "a value holding whitespace"
    return repr(redact(value))


def _database_url_problem(value: str) -> str | None:
    """What is wrong with a database URL (never quoting it), or None.

    Checked here, at the door, so no driver ever parses a malformed URL: one
    with an unescaped ``/`` or ``#`` in its password is split in the wrong
    place, and the driver's error would quote a piece of the password.
    """
    if not value.startswith(("postgresql://", "postgres://")):
        return "expected a postgresql:// URL"
    parts = urlsplit(value)
    if "@" in parts.path + parts.query + parts.fragment:
        return (
            "expected postgresql://user:password@host:port/db; an '@' after the host means the"
            " password holds a '/', '?' or '#': percent-encode it (%2F, %3F, %23)"
        )
    try:
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        return "expected a port number after the host"
    return None


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def flag_name(field: str) -> str:
    """The flag without its dashes: ``projector_batch_size`` -> ``projector-batch-size``."""
    return field.replace("_", "-")


S = TypeVar("S", bound=BaseSettings)


def load_settings(model: type[S], flags: Mapping[str, str] | None = None) -> S:
    """Build ``model`` from the environment and the given flags (by field name), validated once.

    Raises :class:`SettingsError` naming each bad value by the flag or the variable it came from.
    """
    flags = flags or {}
    # Init keywords outrank the environment (pydantic-settings' order of sources).
    values: dict[str, Any] = dict(flags)  # BaseSettings takes its fields as **Any
    try:
        return model(**values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a rule over several settings: its message names them
                problems.append(err["msg"].removeprefix("Value error, "))
                continue
            field = str(err["loc"][0])
            source = f"--{flag_name(field)}" if field in flags else env_name(field)
            got = _shown(err["input"]) if isinstance(err["input"], str) else repr(err["input"])
            problems.append(f"{source}: {err['msg']} (got {got})")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None


# --------------------------------------------------------------------------- docs/configuration.md


def type_name(info: FieldInfo) -> str:
    """What a setting's value is, for people: ``integer``, ``true|false``, ``DEBUG|INFO|...``."""
    kinds = [kind for kind in get_args(info.annotation) if kind is not types.NoneType] or [info.annotation]
    (kind,) = kinds
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        return "|".join(member.value for member in kind)
    names = {bool: "true|false", int: "integer", float: "number", str: "text", Path: "path"}
    return names[kind] if isinstance(kind, type) and kind in names else str(kind)


def default_text(info: FieldInfo) -> str:
    """The default as documented; a computed one (``default_factory``) names its rule, not a value."""
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("default_text"), str):
        return str(extra["default_text"])
    value = info.default
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def configuration_markdown() -> str:
    """docs/configuration.md: every setting, from the models (a test keeps the file equal to this)."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m api.settings > docs/configuration.md` from the settings models;",
        "     tests/api/test_settings.py fails when this file and the models disagree. -->",
        "",
        "Every setting has one name: the field `x_y` of its model is the environment",
        "variable `TEPHRA_X_Y` and the flag `--x-y` of the commands listed beside it.",
        "A flag wins over the variable; every value is checked once, at start-up, and a",
        "bad one stops the command with exit code 2 and a message naming the variable",
        "or the flag.  Every service command (`up`, `projector`, `scheduler`,",
        "`sim-cluster`, `api`) checks the whole environment, as compose.yaml gives all its",
        "services the same one; `tephra demo` reads the variables and takes no flags.",
        "With neither `TEPHRA_KAFKA_BOOTSTRAP` nor `TEPHRA_DATABASE_URL` set, commands",
        "use the embedded dev stack under `TEPHRA_DATA_DIR`.  OpenTelemetry reads the",
        "standard `OTEL_*` variables itself.",
        "",
        "| Variable | Flag | Type | Default | Commands | Description |",
        "|---|---|---|---|---|---|",
    ]
    models = dict.fromkeys(model for group in COMMAND_SETTINGS.values() for model in group)
    for model in models:
        commands = ", ".join(f"`{name}`" for name, group in COMMAND_SETTINGS.items() if model in group)
        for field, info in model.model_fields.items():
            description = (info.description or "").replace("|", "\\|")
            kind = type_name(info).replace("|", " \\| ")
            lines.append(
                f"| `{env_name(field)}` | `--{flag_name(field)}` | {kind} | `{default_text(info)}`"
                f" | {commands} | {description} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(configuration_markdown(), end="")
