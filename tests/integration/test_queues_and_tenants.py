"""Tenants (fair rotation, isolation), queue settings, counts and running leases, migrations."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import drain
from tierq.dal.migrate import available, migrate


def test_claims_without_tenant_rotate_fairly_across_tenants(tq):
    for tenant, n in (("a", 60), ("b", 60), ("c", 6)):
        tq.enqueue("f", [{"payload": [tenant, i], "tenant": tenant} for i in range(n)])
    first_rounds = []
    for _ in range(6):
        got = tq.claim("f", max=9)
        first_rounds.append(Counter(t.tenant for t in got))
        tq.ack("f", [{"id": t.id, "lease_token": t.lease_token} for t in got])
    # while every tenant has work, each round serves each of them equally
    assert all(r == Counter({"a": 3, "b": 3, "c": 3}) for r in first_rounds[:2])
    # once c is empty, its share goes to the others
    later = tq.claim("f", max=9)
    assert sum(1 for t in later if t.tenant == "c") == 0 and len(later) == 9
    # within a tenant, FIFO holds
    rest = drain(tq, "f")
    for tenant in ("a", "b"):
        order = [t.payload[1] for t in rest if t.tenant == tenant]
        assert order == sorted(order)


def test_a_tenant_claim_only_sees_its_tenant(tq):
    tq.enqueue("t", [{"payload": 1, "tenant": "acme"}, {"payload": 2, "tenant": "other"}])
    got = tq.claim("t", max=5, tenant="acme")
    assert [(t.tenant, t.payload) for t in got] == [("acme", 1)]
    assert got[0].lease_token.startswith("acme~")


def test_warm_max_is_per_tenant(make_tq, valkey):
    from tests.integration.helpers import ready_size

    tq = make_tq(warm_max=5)
    tq.enqueue("w", [{"payload": i, "tenant": "a"} for i in range(8)])
    out = tq.enqueue("w", [{"payload": i, "tenant": "b"} for i in range(3)])
    assert {o.state for o in out} == {"warm"}
    assert ready_size(valkey, "w", "a") == 5 and ready_size(valkey, "w", "b") == 3


def test_settings_put_get_and_defaults(tq):
    defaults = tq.queue_settings("s")
    assert (defaults.warm_max, defaults.lease_seconds, defaults.max_attempts) == (50_000, 300, 5)
    updated = tq.put_queue("s", {"warm_max": 10, "backoff": {"kind": "linear",
                                                             "base_seconds": 1,
                                                             "cap_seconds": 5, "jitter": 0}})
    assert updated.warm_max == 10 and updated.backoff.kind == "linear"
    again = tq.put_queue("s", {"lease_seconds": 30})
    assert (again.warm_max, again.lease_seconds) == (10, 30)  # unchanged fields stay


def test_invalid_settings_are_refused(tq):
    from pydantic import ValidationError

    for bad in ({"warm_max": 0}, {"backoff": {"kind": "fixed", "base_seconds": 10,
                                              "cap_seconds": 1}}, {"nope": 1}):
        with pytest.raises(ValidationError):
            tq.put_queue("s", bad)
    assert tq.queue_settings("s").warm_max == 50_000


def test_counts_detailed_and_running(make_tq):
    tq = make_tq(warm_max=4)
    tq.enqueue("m", [{"payload": i} for i in range(6)])
    tq.enqueue("m", [{"payload": "later", "delay_seconds": 60}])
    tq.enqueue("m", [{"payload": "x", "tenant": "acme"}])
    got = tq.claim("m", max=2, tenant="_", worker="w-1")
    [dead] = tq.claim("m", max=1, tenant="acme")
    tq.nack("m", [{"id": dead.id, "lease_token": dead.lease_token, "dead": True}])
    view = tq.get_queue("m")
    assert view.counts.model_dump() == {"warm": 2, "waiting": 0, "held": 0, "cold": 2, "delayed": 1,
                                        "leased": 2, "dead": 1}
    assert view.mode == "cold"
    rows = {r.tenant: r for r in tq.detailed_counts()}
    assert rows["_"].cold == 2 and rows["acme"].dead == 1
    assert rows["_"].oldest_ready_at is not None
    running = tq.running("m")
    assert sorted(str(r.id) for r in running) == sorted(str(t.id) for t in got)
    assert {r.worker for r in running} == {"w-1"}
    assert [q.queue for q in tq.list_queues()] == ["m"]


def test_two_migration_runners_at_once_apply_each_migration_once(services):
    """Both runners return: the one that waits for the other's lock holds no snapshot
    meanwhile, which the other's CREATE INDEX CONCURRENTLY (a migration outside a
    transaction) would wait for while it waits for the lock: a deadlock PostgreSQL ends by
    failing one of them."""
    admin = services.postgres.url
    name = "tierq_migrate_race"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    from tests.support.stores import with_database

    url = with_database(admin, name)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(url))
        except BaseException as exc:  # (a thread's exception would only be a warning)
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 2
    applied = sorted(v for r in results for v in r)
    assert applied == [m.version for m in available()]  # each applied by exactly one runner
    with psycopg.connect(url) as conn:
        recorded = conn.execute("SELECT version FROM tierq_schema_migrations ORDER BY 1")
        assert [r[0] for r in recorded] == [m.version for m in available()]
    assert migrate(url) == []
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_purge_queue_deletes_every_task_in_every_state(make_tq, valkey):
    from tests.integration.helpers import ready_size

    tq = make_tq(warm_max=3)
    tq.enqueue("x", [{"payload": i} for i in range(5)] + [{"payload": "d", "delay_seconds": 9}])
    [leased] = tq.claim("x")
    tq.enqueue_one("y", "other queue")
    assert tq.purge_queue("x") == 6
    assert tq.claim("x", max=10) == []
    # (the tenant's own claim finds its pair's keys gone, reads it as cold and, with no cold
    # row left, returns it to warm mode; a queue-wide claim visits no tenant: the purge
    # deleted the queue's ready-tenant index)
    assert tq.claim("x", max=10, tenant="_") == []
    assert ready_size(valkey, "x") == 0
    assert tq.ack("x", [{"id": leased.id, "lease_token": leased.lease_token}]).rejected
    assert tq.enqueue_one("x", "fresh").state == "warm"
    assert len(tq.claim("y")) == 1


def test_the_settings_cache_keeps_a_refused_row_as_its_refusal(make_tq, pg):
    """A stored row the settings model refuses (written by hand) is read once while
    cached: each get raises the model's error again without reading the row, so a pass
    over the queue's many pairs costs one read."""
    from pydantic import ValidationError

    from tierq.logic.context import QueueSettingsCache

    tq = make_tq(settings_cache_seconds=3600)
    tq.put_queue("bad", {"max_attempts": 5})
    pg.execute("UPDATE tierq_queues SET max_attempts = 5000 WHERE queue = 'bad'")
    reads: list[str] = []
    store = tq.ctx.store

    class CountingStore:  # (the real store, its reads of a settings row counted)
        def queue_settings_row(self, queue: str, **kwargs: Any) -> Any:
            reads.append(queue)
            return store.queue_settings_row(queue, **kwargs)

    cache = QueueSettingsCache(CountingStore(), tq.ctx.settings)  # type: ignore[arg-type]
    for _ in range(3):
        with pytest.raises(ValidationError, match="max_attempts"):
            cache.get("bad")
    assert reads == ["bad"]


def test_the_settings_cache_keeps_the_queues_used_last_and_drops_the_others(make_tq):
    """The cache of queue settings holds at most ``max_entries`` queues, the least recently
    used dropped first (a long-lived Lambda environment sees every name callers use).
    Settings changed in the database behind its back show which entries it still holds."""
    from tierq.logic.context import QueueSettingsCache

    tq = make_tq(settings_cache_seconds=3600)
    assert tq.ctx.queue_settings.max_entries == QueueSettingsCache.MAX_ENTRIES == 10_000
    cache = QueueSettingsCache(tq.ctx.store, tq.ctx.settings, max_entries=3)
    for name in ("a", "b", "c"):
        tq.put_queue(name, {"lease_seconds": 10})
        assert cache.get(name).lease_seconds == 10
    assert cache.get("a").lease_seconds == 10  # a used last: b is the oldest now
    for name in ("a", "b", "c"):
        tq.put_queue(name, {"lease_seconds": 20})  # (tq's own cache, not this one)
    assert cache.get("d").lease_seconds == tq.ctx.settings.lease_seconds  # b dropped
    assert len(cache) == 3
    assert cache.get("a").lease_seconds == 10  # still held: cached
    assert cache.get("c").lease_seconds == 10
    assert cache.get("b").lease_seconds == 20  # read again; d dropped in its place
    assert len(cache) == 3
    with pytest.raises(ValueError, match="max_entries"):
        QueueSettingsCache(tq.ctx.store, tq.ctx.settings, max_entries=0)
