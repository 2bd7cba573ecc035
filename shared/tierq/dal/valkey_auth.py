"""How tierq authenticates to Valkey: ElastiCache IAM tokens on AWS, a password elsewhere.

On AWS the serverless cache has a user group (template.yaml, ``CacheUserGroup``): its
``default`` user is off, so a client that does not authenticate can do nothing, and tierq's
user authenticates with IAM. The functions and the Glue job sign a token with their role's
credentials (``elasticache:Connect`` on the cache and the user) and present it as the
password of ``AUTH <user> <token>``. A token is good for 15 minutes, for opening connections;
a connection authenticated with one stays open for up to 12 hours, then the client opens a
new one with a fresh token. Nothing is stored and nothing needs rotating: the role's own
credentials are what Lambda and Glue rotate.

A token is handed to new connections for :data:`TOKEN_REUSE_SECONDS` after it was signed.
The wall clock times it: a monotonic clock may stand still while a Lambda environment is
frozen between invocations, so a token hours old would pass for fresh. A token is dropped at
once when Valkey refuses a connection's credentials (``forget``, called by the warm tier).
The credentials that signed it may have expired or been rotated since, and the next
connection signs a new token with the current ones.

Elsewhere (``tierq dev --valkey-cluster``, a password-protected server) the user and
password come in ``VALKEY_URL`` (``redis://user:password@host:port/0``), as redis-py reads
them.

| setting | meaning |
| --- | --- |
| ``VALKEY_IAM_USER`` | the user, by its id (IAM needs it equal to its name); unset: no IAM |
| ``VALKEY_CACHE_NAME`` | the serverless cache's name, which the token is signed for |
| ``VALKEY_IAM_REGION`` | the cache's region (default ``AWS_REGION``, else ``AWS_DEFAULT_REGION``) |
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from redis.credentials import CredentialProvider

# What tierq's user may do, on AWS (template.yaml's CacheAppUser) and on the local cluster
# alike: tierq's keys only (every key it writes starts with "tq:"), any channel, every
# command but the dangerous ones (FLUSHALL, KEYS, CONFIG, DEBUG, INFO, MONITOR, ...).
ACCESS_STRING = "on ~tq:* &* +@all -@dangerous"

TOKEN_SECONDS = 900  # what ElastiCache accepts at most
# A token is handed to new connections for this long after it was signed, well inside its
# 15 minutes: a connection opened with it still authenticates in time.
TOKEN_REUSE_SECONDS = 300.0


class ElastiCacheIAMProvider(CredentialProvider):
    """redis-py's credentials for each new connection: ``(user, token)``, the token a SigV4
    pre-signed ``connect`` request for the serverless cache, without its scheme."""

    def __init__(self, user: str, cache_name: str, region: str, *,
                 credentials: Callable[[], Any] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        """``credentials()``: botocore credentials to sign with (default: the session's, as
        boto3 finds them: the function's or the job's role); ``clock``: epoch seconds
        (default: the wall clock, ``time.time``)."""
        if not user or not cache_name or not region:
            raise ValueError("an IAM token needs the user, the cache's name and its region")
        self.user = user
        self.cache_name = cache_name
        self.region = region
        self._credentials = credentials
        self._clock = clock or (lambda: time.time())
        self._lock = threading.Lock()
        self._token: tuple[float, str] | None = None

    def get_credentials(self) -> tuple[str, str]:
        now = self._clock()
        with self._lock:
            # (a clock set back since the signing: sign again)
            if self._token is None or not 0 <= now - self._token[0] < TOKEN_REUSE_SECONDS:
                self._token = (now, self.token())
            return self.user, self._token[1]

    def forget(self) -> None:
        """Drop the token: Valkey refused it; the next connection signs a new one."""
        with self._lock:
            self._token = None

    def token(self) -> str:
        """A new token: ``<cache>/?Action=connect&User=<user>&ResourceType=ServerlessCache``
        with the query's SigV4 signature, valid ``TOKEN_SECONDS``."""
        import botocore.session
        from botocore.auth import SigV4QueryAuth
        from botocore.awsrequest import AWSRequest

        credentials = (self._credentials or botocore.session.get_session().get_credentials)()
        if credentials is None:
            raise RuntimeError("no AWS credentials to sign a Valkey IAM token with")
        query = urlencode({"Action": "connect", "User": self.user,
                           "ResourceType": "ServerlessCache"})
        request = AWSRequest(method="GET", url=f"https://{self.cache_name}/?{query}")
        SigV4QueryAuth(credentials, "elasticache", self.region,
                       expires=TOKEN_SECONDS).add_auth(request)
        return str(request.url).removeprefix("https://")


def iam_provider(user: str | None, cache_name: str | None,
                 region: str | None) -> ElastiCacheIAMProvider | None:
    """The IAM credentials of these settings (None without a user: no IAM); ``region`` is
    the cache's (VALKEY_IAM_REGION, else the process's: Settings.region)."""
    if not user:
        return None
    if not cache_name or not region:
        raise ValueError("VALKEY_IAM_USER needs VALKEY_CACHE_NAME and a region "
                         "(VALKEY_IAM_REGION or AWS_REGION)")
    return ElastiCacheIAMProvider(user, cache_name, region)
