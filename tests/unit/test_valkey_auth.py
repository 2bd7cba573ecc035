"""tierq's ElastiCache user authenticates with IAM tokens: a SigV4 pre-signed ``connect``
request for the serverless cache, signed with the role's credentials, handed to each new
connection (tierq.dal.valkey_auth). The tokens are built here as ElastiCache documents them;
checking one takes ElastiCache itself (the local cluster checks passwords: tests/cluster)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.credentials import Credentials

from tierq.config import Settings, SettingsError
from tierq.dal import connect
from tierq.dal.valkey_auth import (
    TOKEN_REUSE_SECONDS,
    ElastiCacheIAMProvider,
    iam_provider,
)
from tierq.dal.warm_tier import WarmTier, client_options

KEYS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider(clock: Clock | None = None) -> ElastiCacheIAMProvider:
    return ElastiCacheIAMProvider("tierq-3f2a1b4c-app", "tierq-dev-valkey", "eu-west-1",
                                  credentials=lambda: KEYS, clock=clock or Clock())


class RoleKeys:
    """The role's credentials as Lambda hands them out: replaced now and then (each signing
    here gets the next session), so a token signed again differs from the last one."""

    def __init__(self) -> None:
        self.sessions = 0

    def __call__(self) -> Credentials:
        self.sessions += 1
        return Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                           f"session-{self.sessions}")


def session_of(token: str) -> str:
    return parse_qs(urlsplit(f"https://{token}").query)["X-Amz-Security-Token"][0]


def test_a_token_is_a_presigned_connect_request_for_the_serverless_cache() -> None:
    user, token = provider().get_credentials()
    assert user == "tierq-3f2a1b4c-app"
    assert not token.startswith("https://")  # ElastiCache takes it without the scheme
    parts = urlsplit(f"https://{token}")
    assert parts.hostname == "tierq-dev-valkey" and parts.path == "/"
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query["Action"] == "connect"
    assert query["User"] == user  # the user's id, which IAM auth needs equal to its name
    assert query["ResourceType"] == "ServerlessCache"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "900"  # 15 minutes, ElastiCache's most
    assert query["X-Amz-Credential"].startswith("AKIDEXAMPLE/")
    assert query["X-Amz-Credential"].endswith("/eu-west-1/elasticache/aws4_request")
    assert query["X-Amz-Security-Token"] == "session-token"
    assert len(query["X-Amz-Signature"]) == 64


def test_a_token_is_reused_for_new_connections_then_signed_again() -> None:
    clock, keys = Clock(), RoleKeys()
    iam = ElastiCacheIAMProvider("tierq-x-app", "tierq-dev-valkey", "eu-west-1",
                                 credentials=keys, clock=clock)
    first = iam.get_credentials()
    clock.now += TOKEN_REUSE_SECONDS - 1
    assert iam.get_credentials() == first
    clock.now += 2
    again = iam.get_credentials()
    assert again[0] == first[0]
    assert again[1] != first[1]  # signed again, with the role's current credentials
    assert (session_of(first[1]), session_of(again[1])) == ("session-1", "session-2")
    clock.now -= 3600  # a clock set back: signed again rather than trusted
    assert session_of(iam.get_credentials()[1]) == "session-3"


def test_reuse_is_timed_by_the_wall_clock_which_runs_while_lambda_is_frozen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen Lambda environment's monotonic clock may stand still: timed by it, a token
    signed before an hour-long freeze would still pass for fresh after it."""
    wall = [1_000_000.0]
    monkeypatch.setattr("tierq.dal.valkey_auth.time.time", lambda: wall[0])
    monkeypatch.setattr("tierq.dal.valkey_auth.time.monotonic", lambda: 5.0)  # frozen
    keys = RoleKeys()
    iam = ElastiCacheIAMProvider("tierq-x-app", "tierq-dev-valkey", "eu-west-1",
                                 credentials=keys)
    first = iam.get_credentials()
    wall[0] += 3600  # thawed an hour later
    assert session_of(iam.get_credentials()[1]) == "session-2" != session_of(first[1])


def test_a_refused_token_is_dropped_and_the_next_connection_signs_a_new_one() -> None:
    keys = RoleKeys()
    iam = ElastiCacheIAMProvider("tierq-x-app", "tierq-dev-valkey", "eu-west-1",
                                 credentials=keys, clock=Clock())
    first = iam.get_credentials()
    assert iam.get_credentials() == first  # reused
    iam.forget()  # (the warm tier, told by Valkey that the credentials were refused)
    assert session_of(iam.get_credentials()[1]) == "session-2"


def test_settings_name_the_user_the_cache_and_the_region() -> None:
    assert connect.valkey_credentials(Settings(valkey_url="rediss://c:6379/0")) is None
    settings = Settings(valkey_url="rediss://c:6379/0", valkey_iam_user="tierq-x-app",
                        valkey_cache_name="tierq-dev-valkey", valkey_iam_region="eu-west-1")
    made = connect.valkey_credentials(settings)
    assert isinstance(made, ElastiCacheIAMProvider)
    assert (made.user, made.cache_name, made.region) == ("tierq-x-app", "tierq-dev-valkey",
                                                         "eu-west-1")
    with pytest.raises(SettingsError, match="VALKEY_CACHE_NAME"):
        Settings(valkey_iam_user="tierq-x-app")
    # the region: the setting, else Lambda's AWS_REGION, else AWS_DEFAULT_REGION
    iam = {"VALKEY_URL": "rediss://c:6379/0", "VALKEY_IAM_USER": "u", "VALKEY_CACHE_NAME": "c"}
    for environ, region in (({"AWS_DEFAULT_REGION": "us-west-2"}, "us-west-2"),
                            ({"AWS_REGION": "eu-north-1", "AWS_DEFAULT_REGION": "us-west-2"},
                             "eu-north-1"),
                            ({"AWS_REGION": "eu-north-1", "VALKEY_IAM_REGION": "ap-south-1"},
                             "ap-south-1")):
        found = connect.valkey_credentials(Settings.from_environ({**iam, **environ}))
        assert isinstance(found, ElastiCacheIAMProvider) and found.region == region
    with pytest.raises(ValueError, match="region"):
        connect.valkey_credentials(Settings.from_environ(iam))
    with pytest.raises(ValueError, match="region"):
        iam_provider("u", "c", None)


def test_the_warm_tiers_client_asks_the_provider_for_its_connections() -> None:
    iam = provider()
    assert client_options("rediss://c:6379/0", iam)["credential_provider"] is iam
    assert "credential_provider" not in client_options("rediss://c:6379/0")
    tier = WarmTier.from_url("rediss://cache.example.internal:6379/0", credential_provider=iam)
    try:
        assert tier.client.connection_pool.connection_kwargs["credential_provider"] is iam
    finally:
        tier.close()
