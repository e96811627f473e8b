"""The HTTP API's settings: ``TEPHRA_<FIELD>`` variables, ``--<field>`` on ``tephra api`` and ``tephra up``.

Where it connects (Kafka, PostgreSQL, topics, cluster) is not here: ``api``
resolves the endpoints and passes them to the app alongside these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from projector.connection_settings import ServiceCredentials

__all__ = ["ApiSettings", "split_addr"]


def split_addr(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); raises ValueError naming what is wrong."""
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {value!r}")
    return host, int(port)


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEPHRA_", extra="ignore", frozen=True, allow_inf_nan=False)

    api_addr: str = Field(default="127.0.0.1:8080", description="host:port the HTTP API listens on")
    api_body_limit: int = Field(
        default=4 * 2**20, gt=0, description="bytes: the largest request body accepted (larger: 413)"
    )
    api_wait_limit: float = Field(
        default=30.0,
        gt=0,
        description="seconds: the longest a request waits for the projection (?min_seq=, ?wait=)",
    )
    api_page_limit: int = Field(default=500, gt=0, description="the most items one page of a listing holds")
    api_tokens_file: Path = Field(
        default=Path(".tephra/api-tokens.json"),
        description="the API tokens, hashed (tephra token create); none: reads open, writes loopback only",
    )
    api_pool_size: int = Field(default=8, gt=0, description="PostgreSQL connections the API keeps open")
    api_jwks_file: Path | None = Field(
        default=None,
        description="a JWKS file: bearer JWTs signed by its keys are accepted beside the tokens"
        " (needs TEPHRA_API_JWT_ISSUER and TEPHRA_API_JWT_AUDIENCE)",
    )
    api_jwt_issuer: str | None = Field(default=None, description="the iss every accepted JWT must carry")
    api_jwt_audience: str | None = Field(default=None, description="the aud every accepted JWT must name")
    api_jwt_leeway: float = Field(
        default=30.0, ge=0, description="seconds of clock skew allowed on a JWT's exp, nbf and iat"
    )
    api_kafka_username: str = Field(
        default="", description="the HTTP API's own SASL user (empty: TEPHRA_KAFKA_USERNAME)"
    )
    api_kafka_password_file: Path | None = Field(
        default=None, description="a file holding the HTTP API's SASL password"
    )
    api_database_user: str = Field(
        default="", description="the PostgreSQL role the HTTP API connects as (empty: the URL's user)"
    )
    api_database_password_file: Path | None = Field(
        default=None, description="a file holding that role's password"
    )

    def api_credentials(self) -> ServiceCredentials:
        return ServiceCredentials(
            "api",
            self.api_kafka_username,
            self.api_kafka_password_file,
            self.api_database_user,
            self.api_database_password_file,
        )

    @field_validator("api_addr")
    @classmethod
    def _addr(cls, value: str) -> str:
        split_addr(value)
        return value

    @model_validator(mode="after")
    def _jwt(self) -> Self:
        if self.api_jwks_file is not None and not (self.api_jwt_issuer and self.api_jwt_audience):
            raise ValueError(
                "TEPHRA_API_JWKS_FILE needs TEPHRA_API_JWT_ISSUER and TEPHRA_API_JWT_AUDIENCE:"
                " a JWT is accepted only from a named issuer, for a named audience"
            )
        return self
