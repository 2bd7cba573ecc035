"""Schedules are named per tenant (migration 0009): a schedule is (tenant, name), a PUT writes
only its caller's tenant's row in the statement that decides it (no takeover, not even by a
race), schedules of existing databases keep working after the migration, and
``GET /v1/schedules`` pages under Lambda's response limit with a ``next`` cursor."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import orjson
import psycopg
import pytest

from tests.integration.helpers import http_event
from tests.support.stores import scratch_database
from tierq.core.sizing import LAMBDA_PAYLOAD_LIMIT, runtime_encoded_size
from tierq.dal import migrate as migrations
from tierq.engine import Tierq
from tierq.local.services import LocalServices

Call = Callable[..., tuple[int, Any]]
EVERY_MINUTE = {"every_seconds": 60, "horizon": 2}


@pytest.fixture
def api(tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> Call:
    """The admin function's resolver over this test's engine; ``claims`` default to an
    admin's. Thread-safe: the resolver keeps its request state per thread."""
    from tierq.aws import runtime
    from tierq.aws.http.resolver import build_resolver

    monkeypatch.setattr(runtime, "_engine", tq)
    app = build_resolver("admin")
    returned: list[dict[str, Any]] = []

    def call(method: str, target: str, body: Any = None,
             claims: dict[str, str] | None = None) -> tuple[int, Any]:
        response = app.resolve(http_event(method, target, body, claims), None)  # type: ignore[arg-type]
        returned.append(response)
        return response["statusCode"], orjson.loads(response["body"])

    call.returned = returned  # type: ignore[attr-defined]
    return call


def schedule_rows(pg: psycopg.Connection[Any], name: str) -> list[tuple[Any, ...]]:
    return pg.execute("SELECT tenant, queue, payload FROM tierq_schedules WHERE name = %s "
                      "ORDER BY tenant", (name,)).fetchall()


def live_occurrences(pg: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """(schedule's tenant, schedule, task's tenant, task's queue, task's payload) of every
    installed occurrence whose task is live."""
    return pg.execute(
        "SELECT o.tenant, o.schedule, t.tenant, t.queue, t.payload "
        "FROM tierq_schedule_occurrences o JOIN tierq_tasks t ON t.id = o.task_id "
        "WHERE t.state IN ('delayed', 'cold', 'warm')").fetchall()


# ------------------------------------------------------------------- no takeover


def test_the_same_name_in_two_tenants_is_two_schedules(api: Call,
                                                        pg: psycopg.Connection[Any]) -> None:
    acme, globex = {"tenant": "acme"}, {"tenant": "globex"}
    status, mine = api("PUT", "/v1/schedules/nightly",
                       {"queue": "reports", "payload": "acme's", **EVERY_MINUTE}, acme)
    assert status == 200 and mine["tenant"] == "acme"
    # another tenant's PUT of the name creates its own schedule, and leaves acme's alone
    status, theirs = api("PUT", "/v1/schedules/nightly",
                         {"queue": "reports", "payload": "globex's", **EVERY_MINUTE}, globex)
    assert status == 200 and theirs["tenant"] == "globex"
    assert schedule_rows(pg, "nightly") == [("acme", "reports", "acme's"),
                                            ("globex", "reports", "globex's")]
    assert api("GET", "/v1/schedules/nightly", claims=acme)[1]["payload"] == "acme's"
    # globex removes its own; acme's and its occurrences stay
    status, removed = api("DELETE", "/v1/schedules/nightly", claims=globex)
    assert (status, removed["tenant"], removed["removed_occurrences"]) == (200, "globex", 2)
    assert schedule_rows(pg, "nightly") == [("acme", "reports", "acme's")]
    assert {(o[0], o[2], o[4]) for o in live_occurrences(pg)} == {("acme", "acme", "acme's")}
    assert api("DELETE", "/v1/schedules/nightly", claims=globex)[0] == 404
    # an admin names the tenant
    assert api("GET", "/v1/schedules/nightly?tenant=acme")[1]["payload"] == "acme's"
    assert api("GET", "/v1/schedules/nightly")[0] == 404  # (tenant _ has none)


def test_concurrent_puts_of_one_name_by_two_tenants_never_cross(
        api: Call, pg: psycopg.Connection[Any]) -> None:
    """The takeover race: two tenants PUT the same name at the same moment, round after
    round (threads, one real database). Every PUT succeeds and writes its own tenant's
    schedule; neither ever sees or changes the other's, and every installed occurrence is
    a task of its own schedule's tenant with that tenant's latest payload."""
    rounds = 12
    barrier = threading.Barrier(2)
    seen: dict[str, list[tuple[int, Any, Any]]] = defaultdict(list)
    failures: list[BaseException] = []

    def put(tenant: str) -> None:
        try:
            for i in range(rounds):
                barrier.wait(timeout=30)
                status, body = api("PUT", "/v1/schedules/nightly",
                                   {"queue": "reports", "payload": {"owner": tenant, "round": i},
                                    **EVERY_MINUTE}, {"tenant": tenant})
                seen[tenant].append((status, body.get("tenant"), body.get("payload")))
        except BaseException as exc:  # reported below
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=put, args=(t,)) for t in ("acme", "globex")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for tenant in ("acme", "globex"):
        assert seen[tenant] == [(200, tenant, {"owner": tenant, "round": i})
                                for i in range(rounds)]
    last = rounds - 1
    assert schedule_rows(pg, "nightly") == [
        ("acme", "reports", {"owner": "acme", "round": last}),
        ("globex", "reports", {"owner": "globex", "round": last})]
    occurrences = live_occurrences(pg)
    assert len(occurrences) == 4  # horizon 2 each: the older configs' were withdrawn
    for schedule_tenant, name, task_tenant, queue, payload in occurrences:
        assert (name, queue) == ("nightly", "reports")
        assert task_tenant == schedule_tenant
        assert payload == {"owner": schedule_tenant, "round": last}


def test_concurrent_puts_by_one_tenant_leave_one_schedule(
        api: Call, pg: psycopg.Connection[Any]) -> None:
    """Two PUTs of one tenant's schedule at once are serialised by the schedule's lock: one
    row, the winner's occurrences only."""
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def put(queue: str) -> None:
        barrier.wait(timeout=30)
        statuses.append(api("PUT", "/v1/schedules/nightly",
                            {"queue": queue, "payload": queue, **EVERY_MINUTE},
                            {"tenant": "acme"})[0])

    threads = [threading.Thread(target=put, args=(q,)) for q in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200, 200]
    [(tenant, queue, payload)] = schedule_rows(pg, "nightly")
    assert tenant == "acme" and queue == payload
    assert {(o[3], o[4]) for o in live_occurrences(pg)} == {(queue, payload)}
    assert len(live_occurrences(pg)) == 2


def test_a_pinned_caller_cannot_name_another_tenant(api: Call,
                                                    pg: psycopg.Connection[Any]) -> None:
    body = {"queue": "q", "payload": 1, **EVERY_MINUTE}
    assert api("PUT", "/v1/schedules/x", {**body, "tenant": "globex"},
               {"tenant": "acme"})[0] == 403
    assert api("GET", "/v1/schedules/x?tenant=globex", claims={"tenant": "acme"})[0] == 403
    assert api("DELETE", "/v1/schedules/x?tenant=globex", claims={"tenant": "acme"})[0] == 403
    assert api("GET", "/v1/schedules?tenant=globex", claims={"tenant": "acme"})[0] == 403
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)


# ------------------------------------------------------------------- the migration


@pytest.fixture
def database_before_0009(services: LocalServices) -> Iterator[str]:
    with scratch_database(services.postgres.url, "tierq_m9") as url:
        before = [m for m in migrations.available() if m.version < "0009"]
        with mock.patch.object(migrations, "available", return_value=before):
            migrations.migrate(url)
        yield url


def test_migration_0009_keeps_existing_schedules_and_their_occurrences(
        database_before_0009: str, make_tq: Callable[..., Tierq]) -> None:
    url = database_before_0009
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, config_hash, "
            "created_at, updated_at) VALUES "
            "('nightly', 'q', 'acme', '1', 60000, 'h1', now(), now()), "
            "('hourly', 'q', '_', '2', 3600000, 'h2', now(), now())")
        conn.execute(
            "INSERT INTO tierq_schedule_occurrences (schedule, config_hash, fire_at_ms, "
            "task_id, queue, tenant) VALUES "
            "('nightly', 'h1', 1, gen_random_uuid(), 'q', 'acme'), "
            # an occurrence of an older config whose tenant was another (before 0009 a PUT
            # could move a schedule to another tenant)
            "('nightly', 'h0', 1, gen_random_uuid(), 'q', 'globex')")
        assert migrations.migrate(url)[0] == "0009"  # and any later ones
        keys = conn.execute(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'p' AND conrelid::regclass::text IN "
            "('tierq_schedules', 'tierq_schedule_occurrences') ORDER BY 1").fetchall()
        assert keys == [
            ("tierq_schedule_occurrences",
             "PRIMARY KEY (tenant, schedule, fire_at_ms, config_hash)"),
            ("tierq_schedules", "PRIMARY KEY (tenant, name)")]
        assert conn.execute("SELECT tenant, name FROM tierq_schedules ORDER BY 1, 2"
                            ).fetchall() == [("_", "hourly"), ("acme", "nightly")]
        # the stale occurrence now belongs to (globex, nightly), which does not exist: the
        # tick visits it (and would withdraw its task, were it still pending)
        due = conn.execute(
            "SELECT o.tenant, o.schedule FROM tierq_schedule_occurrences o "
            "LEFT JOIN tierq_schedules s ON s.tenant = o.tenant AND s.name = o.schedule "
            "WHERE s.name IS NULL").fetchall()
        assert due == [("globex", "nightly")]
        # (migration 0016 records it as a remnant, and every schedule, due at once)
        assert conn.execute("SELECT tenant, name, tick_at_ms FROM tierq_schedule_remnants"
                            ).fetchall() == [("globex", "nightly", 0)]
        assert conn.execute("SELECT DISTINCT tick_at_ms FROM tierq_schedules").fetchall() \
            == [(0,)]
        # the same name may now exist in another tenant
        conn.execute("INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, "
                     "config_hash, created_at, updated_at) VALUES "
                     "('nightly', 'q', 'globex', '3', 60000, 'h3', now(), now())")


# ------------------------------------------------------------------- paging by size


@pytest.mark.slow
def test_list_pages_fit_a_lambda_response(api: Call) -> None:
    """30 schedules with 240 KB payloads of 4-byte characters, quotes and backslashes: more
    than one response can carry. Every page's return value fits 6 MB as the runtime encodes
    it (UTF-8 or ASCII escapes), and the pages hold every schedule once, in order."""
    heavy = "😀" * 40_000 + '"\\' * 20_000  # 160 KB + 40 KB, and 40,000 bytes to escape
    for i in range(30):
        tenant = "acme" if i % 2 else "globex"
        status, _ = api("PUT", f"/v1/schedules/s{i:02d}",
                        {"queue": "q", "payload": heavy, "tenant": tenant,
                         "every_seconds": 3600, "horizon": 1})
        assert status == 200
    names: list[tuple[str, str]] = []
    pages = 0
    after = None
    api.returned.clear()  # type: ignore[attr-defined]
    while True:
        status, page = api("GET", "/v1/schedules" + (f"?after={after}" if after else ""))
        assert status == 200, page
        pages += 1
        names.extend((s["tenant"], s["name"]) for s in page["schedules"])
        after = page["next"]
        if after is None:
            break
    assert pages >= 2
    assert names == sorted(("acme" if i % 2 else "globex", f"s{i:02d}") for i in range(30))
    sizes = [runtime_encoded_size(r) for r in api.returned]  # type: ignore[attr-defined]
    assert max(sizes) <= LAMBDA_PAYLOAD_LIMIT
    assert sum(sizes) > LAMBDA_PAYLOAD_LIMIT  # (one response could not have held them all)
    # a pinned caller pages through its own only
    own: list[str] = []
    after = None
    while True:
        status, page = api("GET", "/v1/schedules?limit=4" + (f"&after={after}" if after else ""),
                           claims={"tenant": "acme"})
        assert status == 200 and len(page["schedules"]) <= 4
        own.extend(s["tenant"] for s in page["schedules"])
        after = page["next"]
        if after is None:
            break
    assert own == ["acme"] * 15


def test_a_malformed_cursor_is_422(api: Call) -> None:
    status, error = api("GET", "/v1/schedules?after=not-a-cursor")
    assert status == 422 and error["error"]["details"][0]["field"] == "after"
