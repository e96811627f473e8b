"""The deployment's transport security settings (Kafka SASL/TLS, PostgreSQL TLS) and a service's credentials.

Plain settings, no client library: :mod:`projector.connections` builds the clients from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ConnectionSettings", "SaslMechanism", "SecurityProtocol", "ServiceCredentials", "SslMode"]


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class SslMode(StrEnum):
    """libpq's ``sslmode`` values, as asyncpg takes them."""

    DISABLE = "disable"
    ALLOW = "allow"
    PREFER = "prefer"
    REQUIRE = "require"
    VERIFY_CA = "verify-ca"
    VERIFY_FULL = "verify-full"


_CONFIG: Final = SettingsConfigDict(
    env_prefix="TEPHRA_", extra="ignore", frozen=True, allow_inf_nan=False, hide_input_in_errors=True
)


class ConnectionSettings(BaseSettings):
    """The deployment's transport security, shared by every service; credentials default from here."""

    model_config = _CONFIG

    kafka_security_protocol: SecurityProtocol = Field(
        default=SecurityProtocol.PLAINTEXT, description="how every Kafka client talks to the brokers"
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        default=SaslMechanism.SCRAM_SHA_512, description="the SASL mechanism (with a SASL_* protocol)"
    )
    kafka_username: str = Field(
        default="",
        description="the SASL user of every client without its own (TEPHRA_<SERVICE>_KAFKA_USERNAME)",
    )
    kafka_password: str = Field(
        default="", description="its password (prefer TEPHRA_KAFKA_PASSWORD_FILE)", repr=False
    )
    kafka_password_file: Path | None = Field(
        default=None, description="a file holding that password (docker secrets); wins over the variable"
    )
    kafka_ssl_cafile: Path | None = Field(
        default=None,
        description="PEM file of the CAs that sign the brokers' certificates (unset: the system's)",
    )
    kafka_ssl_certfile: Path | None = Field(
        default=None, description="PEM client certificate, for brokers that require one (mutual TLS)"
    )
    kafka_ssl_keyfile: Path | None = Field(default=None, description="PEM private key of that certificate")
    kafka_ssl_check_hostname: bool = Field(
        default=True, description="check that a broker's certificate names the host connected to"
    )
    database_password_file: Path | None = Field(
        default=None,
        description="a file holding the PostgreSQL password of every service without its own"
        " (wins over a password in TEPHRA_DATABASE_URL)",
    )
    database_sslmode: SslMode | None = Field(
        default=None,
        description="libpq's sslmode for every PostgreSQL connection (unset: the URL's, else prefer)",
    )
    database_sslrootcert: Path | None = Field(
        default=None, description="PEM file of the CAs that sign the server's certificate"
    )
    database_sslcert: Path | None = Field(
        default=None, description="PEM client certificate (cert authentication)"
    )
    database_sslkey: Path | None = Field(default=None, description="PEM private key of that certificate")

    @model_validator(mode="after")
    def _pairs(self) -> Self:
        if (self.kafka_ssl_certfile is None) != (self.kafka_ssl_keyfile is None):
            raise ValueError(
                "set TEPHRA_KAFKA_SSL_CERTFILE and TEPHRA_KAFKA_SSL_KEYFILE together, or neither"
            )
        if (self.database_sslcert is None) != (self.database_sslkey is None):
            raise ValueError("set TEPHRA_DATABASE_SSLCERT and TEPHRA_DATABASE_SSLKEY together, or neither")
        return self


@dataclass(frozen=True)
class ServiceCredentials:
    """One service's own credentials (its ``TEPHRA_<SERVICE>_...`` settings); empty: the common ones."""

    #: The settings' prefix: ``projector``, ``scheduler``, ``sim``, ``api`` ("" for the common ones).
    service: str = ""
    kafka_username: str = ""
    kafka_password_file: Path | None = None
    database_user: str = ""
    database_password_file: Path | None = None

    @property
    def prefix(self) -> str:
        return f"TEPHRA_{self.service.upper()}_" if self.service else "TEPHRA_"
