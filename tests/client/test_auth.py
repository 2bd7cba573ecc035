"""Bearer tokens and AWS SigV4: the signature the client sends is checked by an independent
implementation of the SigV4 algorithm (AWS General Reference, "Create a signed AWS API
request"), not by botocore, which signs."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote, urlsplit

import pytest
from botocore.credentials import Credentials

from tests.client.scripted_server import Received, Reply, ScriptedServer
from tierq.client import AuthConfigError, Client, RetryPolicy
from tierq.client.auth import region_from_url

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "session-token-example"


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def expected_signature(request: Received, host: str, secret: str, region: str,
                       service: str = "execute-api") -> tuple[str, str]:
    """(signature, signed headers) for a received request, recomputed from scratch."""
    authorization = request.headers["authorization"]
    algorithm, _, rest = authorization.partition(" ")
    assert algorithm == "AWS4-HMAC-SHA256"
    parts = dict(p.strip().split("=", 1) for p in rest.split(","))
    signed = parts["SignedHeaders"].split(";")
    amz_date = request.headers["x-amz-date"]
    date = amz_date[:8]
    url = urlsplit(request.path)
    query = "&".join(sorted(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
        for k, _, v in (pair.partition("=") for pair in url.query.split("&") if pair)))
    headers = {**request.headers, "host": host}
    canonical_headers = "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed)
    canonical_request = "\n".join([
        request.method, quote(url.path, safe="/-_.~"), query, canonical_headers,
        ";".join(signed), hashlib.sha256(request.body).hexdigest(),
    ])
    scope = f"{date}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                                hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), date), region), service),
                "aws4_request")
    assert parts["Credential"] == f"{ACCESS_KEY}/{scope}"
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest(), parts[
        "SignedHeaders"]


def signature_of(request: Received) -> str:
    return request.headers["authorization"].rsplit("Signature=", 1)[1]


def test_sigv4_signature_verifies_independently(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(503, {"error": {"code": "unavailable", "message": "x", "details": []}},
                          headers={"Retry-After": "0"}),
                    Reply(200, {"tasks": [], "next_cursor": None}))
    credentials = Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)
    api = client_class(scripted.url, sigv4=True, aws_region="eu-west-1",
                       aws_credentials=credentials, retry=RetryPolicy(max_retries=1))
    with api:
        api.dlq_list("emails", tenant="acme", limit=5)
    host = urlsplit(scripted.url).netloc
    assert len(scripted.received) == 2  # a retried request is signed again
    for request in scripted.received:
        assert request.headers["x-amz-security-token"] == SESSION_TOKEN
        signature, signed = expected_signature(request, host, SECRET_KEY, "eu-west-1")
        assert signature_of(request) == signature
        assert signed == "host;x-amz-date;x-amz-security-token"


def test_sigv4_covers_the_body(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(200, {"tasks": []}))
    api = client_class(scripted.url, sigv4=True, aws_region="us-east-1",
                       aws_credentials=Credentials(ACCESS_KEY, SECRET_KEY))
    with api:
        api.enqueue("emails", [{"payload": {"to": "a@example.com"}, "key": "welcome-1"}])
    request = scripted.received[0]
    host = urlsplit(scripted.url).netloc
    signature, signed = expected_signature(request, host, SECRET_KEY, "us-east-1")
    assert signature_of(request) == signature
    assert "content-type" in signed.split(";")
    assert "x-amz-security-token" not in request.headers
    tampered = Received(request.method, request.path, request.headers,
                        request.body.replace(b"welcome-1", b"welcome-2"))
    assert expected_signature(tampered, host, SECRET_KEY, "us-east-1")[0] != signature
    wrong_secret = expected_signature(request, host, SECRET_KEY + "x", "us-east-1")[0]
    assert wrong_secret != signature


def test_bearer_token_is_sent(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(200, {"queues": []}))
    with client_class(scripted.url, token="eyJ.example.jwt") as api:
        api.list_queues()
    assert scripted.received[0].headers["authorization"] == "Bearer eyJ.example.jwt"


def test_region_comes_from_an_execute_api_url() -> None:
    assert region_from_url("https://a1b2c3.execute-api.eu-west-1.amazonaws.com") == "eu-west-1"
    assert region_from_url("http://127.0.0.1:3000") is None


def test_sigv4_without_credentials_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path, client_class: type[Client]
                                                    ) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(AuthConfigError, match="credentials"):
        client_class("https://x.execute-api.eu-west-1.amazonaws.com", sigv4=True)
    with pytest.raises(AuthConfigError, match="region"):
        client_class("http://127.0.0.1:3000", sigv4=True,
                     aws_credentials=Credentials(ACCESS_KEY, SECRET_KEY))


def test_token_and_sigv4_together_is_refused(client_class: type[Client]) -> None:
    with pytest.raises(ValueError, match="not both"):
        client_class("http://127.0.0.1:3000", token="t", sigv4=True,
               aws_credentials=Credentials(ACCESS_KEY, SECRET_KEY), aws_region="eu-west-1")
