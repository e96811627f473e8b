"""The simulated cluster's settings: ``TEPHRA_<FIELD>`` variables, ``--<field>`` on ``tephra sim-cluster``.

Where it connects (Kafka, PostgreSQL, topics, cluster) is not here: ``api``
resolves the endpoints and passes them to
:func:`~kube.sim_service.run_sim_service` alongside these.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from projector.connection_settings import ServiceCredentials

__all__ = ["SimClusterSettings"]


class SimClusterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEPHRA_", extra="ignore", frozen=True, allow_inf_nan=False)

    sim_bind_delay: float = Field(default=0.5, ge=0, description="seconds from binding to TaskStarted")
    sim_evict_delay: float = Field(default=0.5, ge=0, description="seconds from eviction to TaskFinished")
    sim_poll_interval: float = Field(
        default=0.1, gt=0, description="seconds between two reads of the tasks it has work for"
    )

    sim_kafka_username: str = Field(
        default="", description="the simulated cluster's own SASL user (empty: TEPHRA_KAFKA_USERNAME)"
    )
    sim_kafka_password_file: Path | None = Field(
        default=None, description="a file holding the simulated cluster's SASL password"
    )
    sim_database_user: str = Field(
        default="",
        description="the PostgreSQL role the simulated cluster connects as (empty: the URL's user)",
    )
    sim_database_password_file: Path | None = Field(
        default=None, description="a file holding that role's password"
    )

    def sim_credentials(self) -> ServiceCredentials:
        return ServiceCredentials(
            "sim",
            self.sim_kafka_username,
            self.sim_kafka_password_file,
            self.sim_database_user,
            self.sim_database_password_file,
        )
