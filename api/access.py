"""Each service's own access to Kafka and PostgreSQL: the deployment's transport settings, its credentials.

``api`` composes the services, so it builds their accesses
(:func:`projector.connections.kafka_access`, :func:`~projector.connections.database_access`)
from :class:`~api.settings.TephraSettings` and the resolved endpoints; the services take them
as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.endpoints import Endpoints
from api.settings import CommonSettings
from projector.connection_settings import ServiceCredentials
from projector.connections import DatabaseAccess, KafkaAccess, database_access, kafka_access

__all__ = ["ServiceAccess", "service_access"]


@dataclass(frozen=True)
class ServiceAccess:
    kafka: KafkaAccess
    database: DatabaseAccess


def service_access(
    settings: CommonSettings, endpoints: Endpoints, credentials: ServiceCredentials
) -> ServiceAccess:
    """How one service connects: its own credentials where it has them, else the common ones.

    Raises ValueError (a :class:`~projector.connections.SecretFileError` among them) naming the
    setting at fault.
    """
    return ServiceAccess(
        kafka_access(settings, endpoints.kafka_bootstrap, credentials),
        database_access(settings, endpoints.database_url, credentials),
    )
