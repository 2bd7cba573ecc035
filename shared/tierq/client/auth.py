"""How the client authenticates: a bearer token (a JWT-authorised API) or AWS Signature
Version 4 (an IAM-authorised API, service ``execute-api``), as httpx ``Auth`` flows.

What the API makes of each: a JWT is the way in. Its claims say who the caller is — a
tenant (the tenant claim) or an admin (the admin scope) — and a token with neither is 403.
An IAM-authorised (SigV4) request reaches tierq's functions without any JWT claims, so tierq
refuses it (403) on every route but the public ones: there is no mapping from IAM principals
to tenants, and an IAM identity is never taken for an admin. (template.yaml's API has only
the JWT authoriser, so API Gateway itself turns SigV4 requests away with 401.) Use a bearer
token with tierq's API; the SigV4 signer serves IAM-authorised endpoints of your own.

Each attempt of a request is signed afresh (the client's retries go through the flow again),
so a retried request never carries a stale ``X-Amz-Date``, and refreshable credentials (an
assumed role, instance or container credentials) are read at signing time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import httpx

from tierq.client.errors import AuthConfigError
from tierq.extras import MissingExtraError

_EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class BearerAuth(httpx.Auth):
    """``Authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        if not token:
            raise AuthConfigError("the bearer token is empty")
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


def region_from_url(url: str) -> str | None:
    """The region of an ``https://<id>.execute-api.<region>.amazonaws.com`` URL."""
    host = httpx.URL(url).host
    match = _EXECUTE_API_HOST.search(host)
    return match.group(1) if match else None


class SigV4Auth(httpx.Auth):
    """Signs requests with AWS Signature Version 4 through botocore.

    ``credentials``: botocore credentials (anything with ``get_frozen_credentials()``);
    default: botocore's chain (environment, shared config and profiles, SSO, container and
    instance metadata). ``region``: default ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` / the
    profile's region.

    Signed headers: ``host``, ``content-type`` when present, and the ``x-amz-*`` headers the
    signature adds — never hop-by-hop headers a proxy may rewrite. The payload hash covers
    the body.
    """

    requires_request_body = True

    def __init__(self, region: str | None = None, *, credentials: Any = None,
                 service: str = "execute-api") -> None:
        try:
            import botocore.session
        except ModuleNotFoundError as error:
            raise MissingExtraError.from_error(
                error, "aws", "SigV4 signing (tierq.client.SigV4Auth)") from error

        session = None
        if credentials is None or region is None:
            session = botocore.session.get_session()
        if credentials is None:
            assert session is not None
            credentials = session.get_credentials()
            if credentials is None:
                raise AuthConfigError(
                    "SigV4 signing needs AWS credentials: none found in the environment, "
                    "the shared config files or instance/container metadata")
        region = (region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                  or (session.get_config_variable("region") if session else None))
        if not region:
            raise AuthConfigError("SigV4 signing needs a region: pass aws_region or set "
                                  "AWS_REGION")
        self.region = region
        self.service = service
        self._credentials = credentials

    def _frozen(self) -> Any:
        getter = getattr(self._credentials, "get_frozen_credentials", None)
        return getter() if getter is not None else self._credentials

    def sign(self, request: httpx.Request) -> None:
        """Add ``Authorization``, ``X-Amz-Date`` (and ``X-Amz-Security-Token``) to
        ``request``."""
        from botocore.auth import SigV4Auth as BotocoreSigV4
        from botocore.awsrequest import AWSRequest

        headers = {"host": request.headers["host"]}
        if "content-type" in request.headers:
            headers["content-type"] = request.headers["content-type"]
        for name in ("x-amz-date", "x-amz-security-token", "authorization"):
            request.headers.pop(name, None)
        aws_request = AWSRequest(method=request.method, url=str(request.url),
                                 data=request.content or b"", headers=headers)
        BotocoreSigV4(self._frozen(), self.service, self.region).add_auth(aws_request)
        for name, value in aws_request.headers.items():
            lower = name.lower()
            if lower == "authorization" or lower.startswith("x-amz-"):
                request.headers[name] = value

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self.sign(request)
        yield request
