"""The local cluster authenticates its clients, as ElastiCache with tierq's user group does:
a client without the user's password can do nothing; tierq's user may touch tierq's keys
(``tq:*``) with every command but the dangerous ones, and tierq works with it."""

from __future__ import annotations

import stat
from urllib.parse import urlsplit

import pytest
import redis
from redis.cluster import RedisCluster
from redis.credentials import CredentialProvider
from redis.exceptions import RedisClusterException

from tierq.dal.valkey_auth import ACCESS_STRING, TOKEN_REUSE_SECONDS, ElastiCacheIAMProvider
from tierq.dal.warm_tier import WarmTier
from tierq.errors import WarmTierUnavailable
from tierq.local.services import PrivateValkeyCluster
from tierq.local.services.valkey_cluster import APP_USER


def test_a_client_that_does_not_authenticate_is_refused(cluster: PrivateValkeyCluster) -> None:
    for port in cluster.ports:
        anonymous = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        try:
            with pytest.raises(redis.AuthenticationError):
                anonymous.ping()
            with pytest.raises(redis.AuthenticationError):
                anonymous.set("tq:{x}:anything", "1")
        finally:
            anonymous.close()
    wrong = redis.Redis(host="127.0.0.1", port=cluster.ports[0], username=APP_USER,
                        password="not-the-password", socket_timeout=5)
    try:
        with pytest.raises(redis.AuthenticationError):
            wrong.ping()
    finally:
        wrong.close()
    with pytest.raises(RedisClusterException, match="authenticated"):
        RedisCluster(host="127.0.0.1", port=cluster.ports[0], socket_timeout=5)


def test_tierqs_user_touches_only_tierqs_keys_and_no_dangerous_command(
        cluster: PrivateValkeyCluster) -> None:
    assert urlsplit(cluster.url).username == APP_USER
    client = RedisCluster.from_url(cluster.url)
    try:
        client.set("tq:{auth}:probe", "1")
        assert client.get("tq:{auth}:probe") == b"1"
        client.delete("tq:{auth}:probe")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.set("someone-else:key", "1")  # not tierq's key
        for command in (("FLUSHALL",), ("CONFIG", "GET", "maxmemory"), ("KEYS", "tq:*"),
                        ("CLIENT", "LIST"), ("SLOWLOG", "GET"), ("INFO",)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command, target_nodes=RedisCluster.RANDOM)
    finally:
        client.close()


def test_the_passwords_are_the_clusters_own_and_stored_hashed(
        cluster: PrivateValkeyCluster) -> None:
    passwords = cluster.passwords()
    assert len(set(passwords.values())) == 2
    assert stat.S_IMODE(cluster.credentials_file.stat().st_mode) == 0o600
    acl = cluster.acl_file.read_text()
    assert not any(password in acl for password in passwords.values())
    assert "user default off" in acl
    assert f"user {APP_USER} on #" in acl and acl.splitlines()[1].endswith(
        ACCESS_STRING.removeprefix("on "))


class FixedCredentials(CredentialProvider):
    """The user and password of every new connection, as the IAM provider hands them."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self.asked = 0

    def get_credentials(self) -> tuple[str, str]:
        self.asked += 1
        return self.user, self.password


def test_every_node_connection_asks_the_credential_provider(
        cluster: PrivateValkeyCluster) -> None:
    """How the IAM tokens reach the cluster's nodes: the warm tier's client asks the
    provider for each new connection (here with the local user's password)."""
    provider = FixedCredentials(APP_USER, cluster.passwords()[APP_USER])
    anonymous_url = f"redis://127.0.0.1:{cluster.ports[0]}/0"
    warm = WarmTier.from_url(anonymous_url, cluster=True, credential_provider=provider)
    try:
        for i in range(30):  # keys on every master
            warm.client.set(f"tq:{{auth{i}}}:probe", "1")
        assert provider.asked >= len(cluster.ports)
        assert warm.ping()
    finally:
        for i in range(30):
            warm.client.delete(f"tq:{{auth{i}}}:probe")
        warm.close()


def test_tierq_works_as_its_user(tq) -> None:
    assert urlsplit(tq.settings.valkey_url or "").username == APP_USER
    tq.enqueue("auth-q", [{"payload": i, "tenant": "acme"} for i in range(5)])
    tasks = tq.claim("auth-q", tenant="acme", max=5)
    assert [t.payload for t in tasks] == [0, 1, 2, 3, 4]
    tq.ack("auth-q", tasks)
    tq.run_reaper()
    assert tq.claim("auth-q", tenant="acme", max=5) == []


class Signed(ElastiCacheIAMProvider):
    """The IAM provider, its tokens taken from a list in turn (what ElastiCache would accept
    or refuse: a token signed with credentials that expired meanwhile is refused)."""

    def __init__(self, tokens: list[str]) -> None:
        self.now = 1_000_000.0
        super().__init__(APP_USER, "local-cluster", "eu-west-1", clock=lambda: self.now)
        self.tokens = tokens

    def token(self) -> str:
        return self.tokens.pop(0)


def test_a_refused_token_is_dropped_and_the_next_connection_signs_a_new_one(
        cluster: PrivateValkeyCluster) -> None:
    good = cluster.passwords()[APP_USER]
    signed = Signed([good, "signed-with-expired-credentials", good])
    warm = WarmTier.from_url(f"redis://127.0.0.1:{cluster.ports[0]}/0", cluster=True,
                             credential_provider=signed)
    try:
        assert warm.server_time("tq:{auth}:probe") > 0
        signed.now += TOKEN_REUSE_SECONDS  # the next connection signs a new token
        warm.client.disconnect_connection_pools()  # (connections end: new ones needed)
        with pytest.raises(WarmTierUnavailable, match="refused the connection's credentials"):
            warm.server_time("tq:{auth}:probe")
        # dropped at once: not reused for the next 5 minutes of new connections
        assert warm.server_time("tq:{auth}:probe") > 0
        assert signed.tokens == []
    finally:
        warm.close()
