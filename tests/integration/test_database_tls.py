"""TLS to the database as tierq configures it on AWS, against a real PostgreSQL serving a
certificate from a CA of the test's own: ``sslmode=verify-full`` with
``sslrootcert=system`` trusts what the system's trust store trusts (here SSL_CERT_FILE,
standing in for the Amazon roots that sign RDS Proxy's ACM certificate), checks the host
name, and refuses a certificate from another CA.

The session's private server gets TLS for the duration of the module (ALTER SYSTEM, then a
reload); the test skips on a shared server."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tierq.config import Settings
from tierq.dal import connect
from tierq.dal.postgres import Database, execute_text
from tierq.local.services import LocalServices

CERT, KEY = "tierq_test_server.crt", "tierq_test_server.key"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def make_server_cert(ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate
                     ) -> tuple[bytes, bytes]:
    """A certificate for the name "localhost" only (not 127.0.0.1): verify-full must
    refuse the address."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()))


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def on_host(url: str, host: str, **params: str) -> str:
    parts = urlsplit(url)
    query = "&".join(f"{k}={v}" for k, v in params.items())
    netloc = f"{parts.username}@{host}:{parts.port}"
    return parts._replace(netloc=netloc, query=query).geturl()


@pytest.fixture(scope="module")
def tls_server(services: LocalServices, database_url: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The session's server with TLS on; the paths of the right and of a wrong CA."""
    data_dir = getattr(services.postgres, "data_dir", None)
    if not services.postgres.private or data_dir is None:
        pytest.skip("changes the server's configuration: only on the session's own server")
    folder = tmp_path_factory.mktemp("tls")
    ca_key, ca = make_ca("tierq test CA")
    _, other_ca = make_ca("someone else's CA")
    cert, key = make_server_cert(ca_key, ca)
    owner = os.stat(data_dir)
    for name, content, mode in ((CERT, cert, 0o644), (KEY, key, 0o600)):
        path = Path(data_dir) / name
        path.write_bytes(content)
        os.chown(path, owner.st_uid, owner.st_gid)
        path.chmod(mode)
    (folder / "ca.pem").write_bytes(pem(ca))
    (folder / "other-ca.pem").write_bytes(pem(other_ca))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET ssl_cert_file = '{CERT}'")
        conn.execute(f"ALTER SYSTEM SET ssl_key_file = '{KEY}'")
        conn.execute("ALTER SYSTEM SET ssl = on")
        conn.execute("SELECT pg_reload_conf()")
    try:
        deadline = time.monotonic() + 10
        while True:  # the reload is asynchronous
            try:
                with psycopg.connect(on_host(database_url, "127.0.0.1", sslmode="require")):
                    break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield {"ca": folder / "ca.pem", "other_ca": folder / "other-ca.pem"}
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for setting in ("ssl", "ssl_cert_file", "ssl_key_file"):
                conn.execute(f"ALTER SYSTEM RESET {setting}")
            conn.execute("SELECT pg_reload_conf()")
        for name in (CERT, KEY):
            (Path(data_dir) / name).unlink(missing_ok=True)


@pytest.fixture
def trust(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Set what the system's trust store holds (OpenSSL reads SSL_CERT_FILE)."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)

    def use(path: Path) -> None:
        monkeypatch.setenv("SSL_CERT_FILE", str(path))

    yield use


def test_verify_full_with_the_system_roots_connects(tls_server: dict[str, Path],
                                                    trust: object,
                                                    database_url: str) -> None:
    trust(tls_server["ca"])  # type: ignore[operator]
    url = on_host(database_url, "localhost", sslmode="verify-full", sslrootcert="system")
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                            ).fetchone() == (True,)


def test_a_certificate_from_another_ca_is_refused(tls_server: dict[str, Path], trust: object,
                                                  database_url: str) -> None:
    trust(tls_server["other_ca"])  # type: ignore[operator]
    url = on_host(database_url, "localhost", sslmode="verify-full", sslrootcert="system")
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(url)


def test_a_host_name_the_certificate_does_not_name_is_refused(
        tls_server: dict[str, Path], trust: object, database_url: str) -> None:
    trust(tls_server["ca"])  # type: ignore[operator]
    url = on_host(database_url, "127.0.0.1", sslmode="verify-full", sslrootcert="system")
    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        psycopg.connect(url)


def test_the_url_tierq_builds_from_a_secret_connects_verified(
        tls_server: dict[str, Path], trust: object, database_url: str) -> None:
    """The AWS path end to end, but for Secrets Manager: the URL from a secret's login and
    DB_HOST, with the default TLS settings."""
    trust(tls_server["ca"])  # type: ignore[operator]
    parts = urlsplit(database_url)
    settings = Settings(DB_SECRET_ARN="arn:unused", DB_HOST="localhost",
                        DB_PORT=parts.port or 5432, DB_NAME=parts.path.lstrip("/"))
    url = connect.secret_database_url(settings, {"username": parts.username or "postgres",
                                                 "password": "unused-locally"})
    assert "sslmode=verify-full" in url and "sslrootcert=system" in url
    db = Database(url, max_size=1)
    try:
        with db.connection() as conn:
            row = execute_text(conn, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                               ).fetchone()
        assert row == {"ssl": True}
    finally:
        db.close()
