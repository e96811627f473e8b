"""Kafka and PostgreSQL transport settings: built once into every client's arguments, and held to it.

The embedded broker (Tansu 0.6.0) offers no SASL PLAIN, provisions SCRAM users
only through AlterUserScramCredentials (which aiokafka cannot send), and its
``--cert``/``--key`` cannot be given together: a SASL or TLS handshake cannot
succeed against it.  So the arguments are checked as built, and a client
configured for SASL is shown to fail against the plaintext broker with an
error naming the settings it used, over a real connection.
"""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

import pytest

from projector.connection_settings import ConnectionSettings, SecurityProtocol, ServiceCredentials, SslMode
from projector.connections import (
    KafkaAccess,
    KafkaAccessError,
    SecretFileError,
    database_access,
    kafka_access,
    new_producer,
    start_client,
)

ROOT = Path(__file__).resolve().parents[2]


def test_plaintext_carries_no_credentials() -> None:
    kwargs = kafka_access(ConnectionSettings(kafka_username="u", kafka_password="p"), "k:9092").kwargs()  # noqa: S106 - a test's
    assert kwargs == {
        "bootstrap_servers": "k:9092",
        "security_protocol": "PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": None,
        "sasl_plain_password": None,
        "ssl_context": None,
    }


def test_sasl_ssl_with_a_services_own_credentials_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "projector-kafka"
    secret.write_text("pr0jector\n", encoding="utf-8")  # echo adds a newline: not part of the password
    settings = ConnectionSettings(
        kafka_security_protocol=SecurityProtocol.SASL_SSL,
        kafka_sasl_mechanism="SCRAM-SHA-256",  # type: ignore[arg-type]  # as the environment gives it
        kafka_username="common",
        kafka_password="common-password",  # noqa: S106 - a test's
        kafka_ssl_check_hostname=False,
    )
    own = ServiceCredentials("projector", kafka_username="projector", kafka_password_file=secret)
    access = kafka_access(settings, "k:9093", own)
    kwargs = access.kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("projector", "pr0jector")
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert not context.check_hostname
    assert "pr0jector" not in repr(access)
    # Without its own, a service uses the common credentials.
    common = kafka_access(settings, "k:9093", ServiceCredentials("scheduler")).kwargs()
    assert (common["sasl_plain_username"], common["sasl_plain_password"]) == ("common", "common-password")


def test_missing_credentials_and_unreadable_secrets_name_their_setting(tmp_path: Path) -> None:
    sasl = ConnectionSettings(kafka_security_protocol=SecurityProtocol.SASL_PLAINTEXT)
    with pytest.raises(ValueError, match="TEPHRA_SCHEDULER_KAFKA_USERNAME"):
        kafka_access(sasl, "k:1", ServiceCredentials("scheduler"))
    with pytest.raises(ValueError, match="TEPHRA_API_KAFKA_PASSWORD_FILE"):
        kafka_access(sasl, "k:1", ServiceCredentials("api", kafka_username="api"))
    missing = tmp_path / "nope"
    with pytest.raises(SecretFileError, match="TEPHRA_PROJECTOR_KAFKA_PASSWORD_FILE: cannot read"):
        kafka_access(sasl, "k:1", ServiceCredentials("projector", "p", missing))
    with pytest.raises(SecretFileError, match="TEPHRA_SIM_DATABASE_PASSWORD_FILE: cannot read"):
        database_access(sasl, "postgresql://h/d", ServiceCredentials("sim", database_password_file=missing))


def test_database_access_carries_the_services_role_password_and_tls(tmp_path: Path) -> None:
    secret = tmp_path / "pg"
    secret.write_text("pw", encoding="utf-8")
    own = ServiceCredentials("scheduler", database_user="tephra_scheduler", database_password_file=secret)
    plain = database_access(ConnectionSettings(), "postgresql://h/d", own)
    assert plain.options() == {"user": "tephra_scheduler", "password": "pw"}
    required = database_access(ConnectionSettings(database_sslmode=SslMode.VERIFY_FULL), "postgresql://h/d")
    assert required.options() == {"ssl": "verify-full"}
    with pytest.raises(ValueError, match="TEPHRA_DATABASE_SSLMODE"):
        database_access(ConnectionSettings(database_sslrootcert=secret), "postgresql://h/d")


async def test_a_sasl_client_against_a_plaintext_broker_fails_naming_its_settings(
    kafka_bootstrap: str,
) -> None:
    access = KafkaAccess(
        kafka_bootstrap,
        protocol=SecurityProtocol.SASL_PLAINTEXT,
        username="projector",
        password="secret-never-shown",  # noqa: S106 - a test's
        username_setting="TEPHRA_PROJECTOR_KAFKA_USERNAME",
    )
    producer = new_producer(access, request_timeout_ms=5000)
    try:
        with pytest.raises(KafkaAccessError) as failure:
            await start_client(producer, access)
    finally:
        await producer.stop()
    message = str(failure.value)
    assert "TEPHRA_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" in message
    assert "'projector' (TEPHRA_PROJECTOR_KAFKA_USERNAME)" in message
    assert "secret-never-shown" not in message


# --------------------------------------------------------------------------- no client without them

_KAFKA_CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}
_POSTGRES = {"connect", "create_pool"}
#: Command-line readers that connect with the URL alone (libpq's sslmode etc. in its query string).
_URL_READERS = {"api/views.py", "api/demo.py", "replay/store.py"}


def _calls(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in _KAFKA_CLIENTS:
            found.add(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.attr in _KAFKA_CLIENTS or (func.value.id == "asyncpg" and func.attr in _POSTGRES):
                found.add(f"{func.value.id}.{func.attr}")
    return found


def test_only_projector_connections_makes_kafka_clients_and_service_connections() -> None:
    offenders = {}
    for package in ("events", "projector", "scheduler", "replay", "api", "kube"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == "projector/connections.py":
                continue
            calls = _calls(ast.parse(path.read_text(encoding="utf-8")))
            if relative in _URL_READERS:
                calls = {call for call in calls if not call.startswith("asyncpg.")}
            if calls:
                offenders[relative] = sorted(calls)
    assert offenders == {}, "build clients with projector.connections (new_producer, connect, ...)"


def test_the_checker_finds_a_direct_client() -> None:
    source = "p = AIOKafkaProducer(bootstrap_servers='x')\nc = await asyncpg.connect(url)\n"
    assert _calls(ast.parse(source)) == {"AIOKafkaProducer", "asyncpg.connect"}
