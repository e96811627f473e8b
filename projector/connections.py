"""How every Tephra process reaches Kafka and PostgreSQL: transport security and credentials, in one place.

The settings of the transport (:class:`~projector.connection_settings.ConnectionSettings`: SASL, TLS,
``sslmode``) are the deployment's; the credentials are each service's own
(``TEPHRA_<SERVICE>_KAFKA_USERNAME``, ``..._DATABASE_USER``, and their
``..._PASSWORD_FILE``), falling back to the common ones.  ``api`` composes
them once per service into a :class:`KafkaAccess` (:func:`kafka_access`) and a
:class:`DatabaseAccess` (:func:`database_access`), and every Kafka client and
PostgreSQL connection of the services is made here, from those
(:func:`new_producer`, :func:`new_consumer`, :func:`new_admin`,
:func:`connect`, :func:`create_pool`): no client can be made without the
transport settings (tests/projector/test_connections.py holds that no
other module builds one).

A client that cannot connect as configured fails with
:class:`KafkaAccessError`, naming the settings it used (never the password).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError

from projector.connection_settings import (
    ConnectionSettings,
    SaslMechanism,
    SecurityProtocol,
    ServiceCredentials,
    SslMode,
)

__all__ = [
    "DatabaseAccess",
    "KafkaAccess",
    "KafkaAccessError",
    "KafkaClientKwargs",
    "SecretFileError",
    "connect",
    "create_pool",
    "database_access",
    "kafka_access",
    "new_admin",
    "new_consumer",
    "new_producer",
    "read_secret",
    "start_client",
]


class SecretFileError(ValueError):
    """A password file that cannot be read; the message names its setting."""


def read_secret(path: Path, setting: str) -> str:
    """The secret a file holds, without its trailing newline (``echo pw > file`` adds one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretFileError(f"{setting}: cannot read {path} ({exc.strerror or exc})") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise SecretFileError(f"{setting}: {path} is empty")
    return secret


# --------------------------------------------------------------------------- Kafka


class KafkaClientKwargs(TypedDict):
    """The connection arguments every aiokafka client is made with."""

    bootstrap_servers: str
    security_protocol: str
    sasl_mechanism: str
    sasl_plain_username: str | None
    sasl_plain_password: str | None
    ssl_context: ssl.SSLContext | None


class KafkaAccessError(KafkaConnectionError):  # type: ignore[misc]  # aiokafka has no type information
    """A Kafka client could not connect as configured; the message names the settings (a KafkaError)."""


@dataclass(frozen=True)
class KafkaAccess:
    """Where and how one service reaches Kafka."""

    bootstrap: str
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    mechanism: SaslMechanism = SaslMechanism.SCRAM_SHA_512
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    #: The settings the credentials came from, for error messages.
    username_setting: str = "TEPHRA_KAFKA_USERNAME"

    def kwargs(self) -> KafkaClientKwargs:
        sasl = self.protocol.sasl
        return KafkaClientKwargs(
            bootstrap_servers=self.bootstrap,
            security_protocol=self.protocol.value,
            sasl_mechanism=self.mechanism.value,
            sasl_plain_username=self.username if sasl else None,
            sasl_plain_password=self.password if sasl else None,
            ssl_context=self.ssl_context,
        )

    def describe(self) -> str:
        """How this access connects, for an error message (never the password)."""
        text = f"{self.bootstrap} with TEPHRA_KAFKA_SECURITY_PROTOCOL={self.protocol.value}"
        if self.protocol.sasl:
            text += (
                f", TEPHRA_KAFKA_SASL_MECHANISM={self.mechanism.value}"
                f" as {self.username!r} ({self.username_setting})"
            )
        return text


def kafka_access(
    settings: ConnectionSettings, bootstrap: str, credentials: ServiceCredentials | None = None
) -> KafkaAccess:
    """The one way a Kafka access is built: the transport settings plus the service's credentials.

    ``credentials``: the service's own (``TEPHRA_<SERVICE>_KAFKA_...``; None or empty: the common
    ones).  Raises :class:`SecretFileError` or ValueError naming the setting at fault.
    """
    protocol = settings.kafka_security_protocol
    user, password, user_setting = None, None, "TEPHRA_KAFKA_USERNAME"
    if protocol.sasl:
        user, password, user_setting = _sasl_credentials(settings, credentials or ServiceCredentials())
    context = _kafka_ssl_context(settings) if protocol.tls else None
    return KafkaAccess(
        bootstrap=bootstrap,
        protocol=protocol,
        mechanism=settings.kafka_sasl_mechanism,
        username=user,
        password=password,
        ssl_context=context,
        username_setting=user_setting,
    )


def _sasl_credentials(settings: ConnectionSettings, own: ServiceCredentials) -> tuple[str, str, str]:
    """(user, password, the user's setting): the service's own, else the common ones."""
    protocol, prefix = settings.kafka_security_protocol.value, own.prefix
    user, user_setting = own.kafka_username, f"{prefix}KAFKA_USERNAME"
    if not user:
        user, user_setting = settings.kafka_username, "TEPHRA_KAFKA_USERNAME"
    if not user:
        raise ValueError(
            f"TEPHRA_KAFKA_SECURITY_PROTOCOL={protocol} needs a user: set {prefix}KAFKA_USERNAME"
            " (or TEPHRA_KAFKA_USERNAME for every service)"
        )
    if own.kafka_password_file is not None:
        password = read_secret(own.kafka_password_file, f"{prefix}KAFKA_PASSWORD_FILE")
    elif own.kafka_username:
        raise ValueError(f"{prefix}KAFKA_USERNAME is set: set {prefix}KAFKA_PASSWORD_FILE as well")
    elif settings.kafka_password_file is not None:
        password = read_secret(settings.kafka_password_file, "TEPHRA_KAFKA_PASSWORD_FILE")
    else:
        password = settings.kafka_password
    if not password:
        raise ValueError(
            f"TEPHRA_KAFKA_SECURITY_PROTOCOL={protocol} needs a password: set"
            f" {prefix}KAFKA_PASSWORD_FILE (or TEPHRA_KAFKA_PASSWORD_FILE, TEPHRA_KAFKA_PASSWORD)"
        )
    return user, password, user_setting


def _kafka_ssl_context(settings: ConnectionSettings) -> ssl.SSLContext:
    context = _tls_context(
        settings.kafka_ssl_cafile,
        settings.kafka_ssl_certfile,
        settings.kafka_ssl_keyfile,
        "TEPHRA_KAFKA_SSL_CAFILE/CERTFILE/KEYFILE",
    )
    context.check_hostname = settings.kafka_ssl_check_hostname
    return context


def _tls_context(
    cafile: Path | None, certfile: Path | None, keyfile: Path | None, settings: str
) -> ssl.SSLContext:
    """A client context trusting ``cafile`` (None: the system's CAs), with a client certificate if given."""
    try:
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        if certfile is not None and keyfile is not None:
            context.load_cert_chain(str(certfile), str(keyfile))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{settings}: cannot load ({exc}); expected PEM files") from None
    return context


#: What callers may add to the connection arguments (aiokafka's own options).
ClientOption = int | str | bool | None


def new_producer(access: KafkaAccess, **options: ClientOption) -> AIOKafkaProducer:
    return AIOKafkaProducer(**access.kwargs(), **options)


def new_consumer(access: KafkaAccess, **options: ClientOption) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(**access.kwargs(), **options)


def new_admin(access: KafkaAccess) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**access.kwargs())


async def start_client(
    client: AIOKafkaProducer | AIOKafkaConsumer | AIOKafkaAdminClient, access: KafkaAccess
) -> None:
    """``client.start()``; a failure to connect names the settings it connected with."""
    try:
        await client.start()
    except KafkaConnectionError as exc:
        hint = (
            " (is the broker's listener SASL? check the protocol, the mechanism and the credentials)"
            if access.protocol.sasl
            else " (is the broker up, and does its listener take this protocol?)"
        )
        raise KafkaAccessError(f"cannot connect to Kafka at {access.describe()}: {exc}{hint}") from exc


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class DatabaseAccess:
    """Where and how one service reaches PostgreSQL: the URL, its own user and password, TLS."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    #: asyncpg's ``ssl``: a mode, or a context built from the certificate settings; None: the URL's.
    tls: SslMode | ssl.SSLContext | None = field(default=None, repr=False)

    def options(self) -> dict[str, str | ssl.SSLContext]:
        found: dict[str, str | ssl.SSLContext] = {}
        if self.user is not None:
            found["user"] = self.user
        if self.password is not None:
            found["password"] = self.password
        if self.tls is not None:
            found["ssl"] = self.tls.value if isinstance(self.tls, SslMode) else self.tls
        return found


def database_access(
    settings: ConnectionSettings, url: str, credentials: ServiceCredentials | None = None
) -> DatabaseAccess:
    """The one way a PostgreSQL access is built: the URL, TLS, and the service's own credentials."""
    credentials = credentials or ServiceCredentials()
    prefix, password_file = credentials.prefix, credentials.database_password_file
    password = None
    if password_file is not None:
        password = read_secret(password_file, f"{prefix}DATABASE_PASSWORD_FILE")
    elif settings.database_password_file is not None:
        password = read_secret(settings.database_password_file, "TEPHRA_DATABASE_PASSWORD_FILE")
    return DatabaseAccess(
        url=url, user=credentials.database_user or None, password=password, tls=_database_ssl(settings)
    )


def _database_ssl(settings: ConnectionSettings) -> SslMode | ssl.SSLContext | None:
    mode = settings.database_sslmode
    files = settings.database_sslrootcert, settings.database_sslcert
    if all(f is None for f in files):
        return mode
    if mode in (None, SslMode.DISABLE, SslMode.ALLOW, SslMode.PREFER):
        raise ValueError(
            "TEPHRA_DATABASE_SSLROOTCERT/SSLCERT are set: set TEPHRA_DATABASE_SSLMODE to require,"
            " verify-ca or verify-full"
        )
    rootcert = settings.database_sslrootcert
    context = _tls_context(
        rootcert,
        settings.database_sslcert,
        settings.database_sslkey,
        "TEPHRA_DATABASE_SSLROOTCERT/SSLCERT/SSLKEY",
    )
    # libpq: require checks no certificate unless a root certificate is given (then as verify-ca).
    if mode is SslMode.REQUIRE and rootcert is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif mode is not SslMode.VERIFY_FULL:
        context.check_hostname = False
    return context


async def connect(access: DatabaseAccess | str, **options: object) -> asyncpg.Connection:
    """A connection; a bare URL (a command-line reader's, a test's) connects as it says."""
    access = access if isinstance(access, DatabaseAccess) else DatabaseAccess(access)
    return await asyncpg.connect(access.url, **access.options(), **options)


def create_pool(access: DatabaseAccess, **options: object) -> asyncpg.Pool:
    """A pool (await it, or use it as ``async with``)."""
    return asyncpg.create_pool(access.url, **access.options(), **options)
