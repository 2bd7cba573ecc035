"""Where the stores are: DATABASE_URL / VALKEY_URL, or on AWS a Secrets Manager secret
(fetched through Powertools parameters, cached) plus the RDS Proxy endpoint."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson

from tierq.config import Settings

SECRET_MAX_AGE_SECONDS = 300


def database_url(settings: Settings) -> str:
    if settings.db_secret_arn:
        from aws_lambda_powertools.utilities import parameters

        raw: Any = parameters.get_secret(settings.db_secret_arn, max_age=SECRET_MAX_AGE_SECONDS)
        secret = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
        host = settings.db_host or secret.get("host")
        if not host:
            raise RuntimeError("DB_SECRET_ARN is set but neither DB_HOST nor the secret's host is")
        port = secret.get("port") or settings.db_port
        name = settings.db_name or secret.get("dbname") or "tierq"
        user = quote(str(secret["username"]), safe="")
        password = quote(str(secret["password"]), safe="")
        return f"postgresql://{user}:{password}@{host}:{port}/{name}?sslmode={settings.db_sslmode}"
    if settings.database_url:
        return settings.database_url
    raise RuntimeError("set DATABASE_URL (or DB_SECRET_ARN and DB_HOST on AWS)")


def valkey_url(settings: Settings) -> str:
    if settings.valkey_url:
        return settings.valkey_url
    raise RuntimeError("set VALKEY_URL, e.g. redis://127.0.0.1:6379/0")
