"""Where the stores are: DATABASE_URL / VALKEY_URL, or on AWS a Secrets Manager secret
(fetched through Powertools parameters, cached) plus the RDS Proxy endpoint."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from redis.credentials import CredentialProvider

from tierq.config import Settings
from tierq.dal.valkey_auth import iam_provider
from tierq.extras import MissingExtraError

SECRET_MAX_AGE_SECONDS = 300

# Where operating systems keep their bundle of trusted roots: Amazon Linux (Lambda, Glue)
# and RHEL, Debian and Ubuntu, Alpine and macOS.
SYSTEM_CA_BUNDLES = (
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/cert.pem",
)


def database_url(settings: Settings, *, fresh: bool = False) -> str:
    """The URL of the database: built from the secret DB_SECRET_ARN names (on AWS; cached,
    or ``fresh`` from Secrets Manager), or DATABASE_URL as it is."""
    if settings.db_secret_arn:
        return secret_database_url(settings, fetch_secret(settings.db_secret_arn, fresh=fresh))
    if settings.database_url:
        return settings.database_url
    raise RuntimeError("set DATABASE_URL (or DB_SECRET_ARN and DB_HOST on AWS)")


def fetch_secret(arn: str, *, fresh: bool = False) -> dict[str, Any]:
    """A Secrets Manager secret's JSON, cached for a few minutes (``fresh``: fetched now).

    An alternating-user rotation changes the username as well: RDS Proxy then knows only
    the new login, so a connection that failed is retried with the secret fetched fresh
    (``Database(resolve_url=...)``)."""
    # Powertools parameters imports boto3: Lambda's runtime ships it, elsewhere the 'aws'
    # extra installs it.
    try:
        from aws_lambda_powertools.utilities import parameters
    except ModuleNotFoundError as error:
        raise MissingExtraError.from_error(
            error, "aws", "DB_SECRET_ARN (a Secrets Manager secret)") from error

    raw: Any = parameters.get_secret(arn, max_age=SECRET_MAX_AGE_SECONDS, force_fetch=fresh)
    secret = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
    if not isinstance(secret, dict) or "username" not in secret or "password" not in secret:
        raise RuntimeError(f"the secret {arn} is not a JSON object with username and password")
    return secret


def secret_database_url(settings: Settings, secret: Mapping[str, Any]) -> str:
    """The URL for a database login kept in a secret, through DB_HOST (the proxy) when set.

    Only TLS settings go into the URL: no startup ``options`` (RDS Proxy refuses them;
    tierq sets its timeouts per transaction instead)."""
    host = settings.db_host or secret.get("host")
    if not host:
        raise RuntimeError("DB_SECRET_ARN is set but neither DB_HOST nor the secret's host is")
    port = secret.get("port") or settings.db_port
    name = settings.db_name or secret.get("dbname") or "tierq"
    user = quote(str(secret["username"]), safe="")
    password = quote(str(secret["password"]), safe="")
    return (f"postgresql://{user}:{password}@{host}:{port}/{quote(str(name), safe='')}"
            f"?{urlencode(tls_parameters(settings))}")


def tls_parameters(settings: Settings) -> dict[str, str]:
    """libpq's TLS parameters for these settings. ``sslrootcert=system`` (libpq 16 or
    later) verifies against the operating system's trusted roots."""
    params: dict[str, str] = {"sslmode": settings.db_sslmode}
    if settings.db_sslmode in ("verify-ca", "verify-full"):
        params["sslrootcert"] = settings.db_sslrootcert
        if settings.db_sslrootcert == "system":
            use_system_trust_store()
    return params


def use_system_trust_store(environ: MutableMapping[str, str] | None = None,
                           candidates: tuple[str, ...] = SYSTEM_CA_BUNDLES) -> str | None:
    """Make ``sslrootcert=system`` find the system's roots; returns the bundle chosen.

    libpq loads "system" roots from its OpenSSL's default locations. The OpenSSL bundled in
    the psycopg-binary wheels looks in a folder of its own build (/usr/lib/psycopg-openssl)
    that no host has, so without help every verification would fail. OpenSSL honours
    SSL_CERT_FILE / SSL_CERT_DIR: when neither is set, point SSL_CERT_FILE at the first
    system bundle found (or certifi's, if installed).

    These two are OpenSSL's own variables, read by OpenSSL inside libpq, not settings of
    tierq: this function reads and sets them in the process environment for OpenSSL to find
    (a documented exception to reading the environment through tierq.config.Settings)."""
    env = os.environ if environ is None else environ
    if env.get("SSL_CERT_FILE") or env.get("SSL_CERT_DIR"):
        return env.get("SSL_CERT_FILE") or env.get("SSL_CERT_DIR")
    for candidate in candidates:
        if Path(candidate).is_file():
            env["SSL_CERT_FILE"] = candidate
            return candidate
    try:
        import certifi
    except ImportError:
        return None
    env["SSL_CERT_FILE"] = certifi.where()
    return env["SSL_CERT_FILE"]


def valkey_url(settings: Settings) -> str:
    if settings.valkey_url:
        return settings.valkey_url
    raise RuntimeError("set VALKEY_URL, e.g. redis://127.0.0.1:6379/0")


def valkey_credentials(settings: Settings) -> CredentialProvider | None:
    """The IAM credentials of tierq's ElastiCache user (``VALKEY_IAM_USER``), or None: then
    a user and password, if any, come in ``VALKEY_URL`` (tierq.dal.valkey_auth)."""
    return iam_provider(settings.valkey_iam_user, settings.valkey_cache_name,
                        settings.valkey_iam_region or settings.region)
