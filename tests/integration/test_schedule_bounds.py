"""What a schedule may cost: the cron tick visits the schedules due (``tick_at_ms``, migration
0016) and never the idle ones; a tenant has at most TIERQ_MAX_SCHEDULES_PER_TENANT schedules,
even when two PUTs race; one schedule's installed occurrences hold at most
TIERQ_SCHEDULE_MAX_INSTALLED_BYTES of payload and none lies beyond MAX_DELAY_SECONDS."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.integration.test_schedules import Factory, clock_at, move_to, ms, utc
from tierq.errors import InvalidInput, QuotaExceeded
from tierq.maintenance import cron_tick
from tierq.models.tasks import MAX_DELAY_SECONDS

START = utc(2026, 5, 1, 9, 0)
IDLE = 2_000


def tick_at(pg: psycopg.Connection[Any], name: str, tenant: str = "_") -> int | None:
    row = pg.execute("SELECT tick_at_ms FROM tierq_schedules WHERE tenant = %s AND name = %s",
                     (tenant, name)).fetchone()
    assert row is not None
    return None if row[0] is None else int(row[0])


def seed_idle(pg: psycopg.Connection[Any], count: int, at_ms: int | None) -> None:
    """``count`` schedules of tenant 'idle' that are not due (next tick at ``at_ms``)."""
    pg.execute(
        "INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, config_hash, "
        "installed_hash, installed_through_ms, tick_at_ms, created_at, updated_at) "
        "SELECT 'idle-' || g, 'q', 'idle', '{}', 86400000, 'h', 'h', %s, %s, now(), now() "
        "FROM generate_series(1, %s) AS g", (at_ms, at_ms, count))


def future_bytes(pg: psycopg.Connection[Any], name: str, now: datetime) -> tuple[int, int]:
    """(count, payload bytes) of a schedule's installed occurrences not due yet."""
    row = pg.execute(
        "SELECT count(*), coalesce(sum(octet_length(t.payload::text)), 0) "
        "FROM tierq_schedule_occurrences o JOIN tierq_tasks t ON t.id = o.task_id "
        "WHERE o.schedule = %s AND o.fire_at_ms > %s", (name, ms(now))).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# -- the tick visits the schedules due ----------------------------------------------------------


def test_the_tick_visits_only_the_schedules_due(make_tq: Factory,
                                                pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START))
    seed_idle(pg, IDLE, ms(START + timedelta(days=1)))
    pg.execute("UPDATE tierq_schedules SET tick_at_ms = NULL WHERE name = 'idle-1'")
    tq.put_schedule("minutely", {"queue": "q", "payload": 1, "every_seconds": 60})
    tq.put_schedule("hourly", {"queue": "q", "payload": 2, "every_seconds": 3600})
    # an install records the next instant as the next tick
    assert tick_at(pg, "minutely") == ms(START + timedelta(minutes=1))
    assert tick_at(pg, "hourly") == ms(START + timedelta(hours=1))
    assert cron_tick.run(tq.ctx).schedules == 0  # nothing due: nothing visited
    move_to(tq, START + timedelta(seconds=61))
    summary = cron_tick.run(tq.ctx)
    assert (summary.schedules, summary.installed, summary.failed) == (1, 1, [])
    assert tick_at(pg, "minutely") == ms(START + timedelta(minutes=2))
    # the idle ones were never written
    assert pg.execute("SELECT count(*) FROM tierq_schedules WHERE tenant = 'idle' "
                      "AND last_tick_at IS NOT NULL").fetchone() == (0,)
    move_to(tq, START + timedelta(hours=1, seconds=1))
    assert cron_tick.run(tq.ctx).schedules == 2


def test_a_pass_reads_slices_up_to_its_bound_soonest_due_first(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START))
    for i in range(7):
        tq.put_schedule(f"s{i}", {"queue": "q", "payload": i, "every_seconds": 3600})
    move_to(tq, START + timedelta(hours=1, seconds=1))
    first = cron_tick.run(tq.ctx, slice_size=2, max_schedules=5, budget_seconds=60)
    assert first.schedules == 5
    left = pg.execute("SELECT name FROM tierq_schedules WHERE tick_at_ms <= %s ORDER BY name",
                      (ms(START + timedelta(hours=1, seconds=1)),)).fetchall()
    assert left == [("s5",), ("s6",)]  # the soonest due (then by name) went first
    assert cron_tick.run(tq.ctx, slice_size=2, max_schedules=5).schedules == 2
    assert cron_tick.run(tq.ctx, slice_size=2, max_schedules=5).schedules == 0


def test_a_disabled_schedule_is_never_due(make_tq: Factory,
                                          pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START))
    tq.put_schedule("off", {"queue": "q", "payload": 1, "every_seconds": 60,
                            "enabled": False})
    assert tick_at(pg, "off") is None
    move_to(tq, START + timedelta(days=3))
    assert cron_tick.run(tq.ctx).schedules == 0


def test_a_removed_schedule_with_a_running_occurrence_stays_due_until_it_ends(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START))
    tq.put_schedule("job", {"queue": "jobs", "payload": 1, "every_seconds": 60})
    move_to(tq, START + timedelta(seconds=61))
    tq.run_delayed_mover()
    [running] = tq.claim("jobs", max=1)
    assert tq.delete_schedule("job").removed_occurrences >= 1
    assert pg.execute("SELECT tenant, name FROM tierq_schedule_remnants").fetchall() == \
        [("_", "job")]
    assert cron_tick.run(tq.ctx).schedules == 1  # still running: the remnant stays
    assert pg.execute("SELECT count(*) FROM tierq_schedule_remnants").fetchone() == (1,)
    tq.ack("jobs", [{"id": running.id, "lease_token": running.lease_token}])
    assert cron_tick.run(tq.ctx).schedules == 1
    assert pg.execute("SELECT count(*) FROM tierq_schedule_remnants").fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_schedule_occurrences").fetchone() == (0,)
    assert cron_tick.run(tq.ctx).schedules == 0


def test_a_put_takes_over_a_remnant_of_the_same_name(make_tq: Factory,
                                                     pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START))
    tq.put_schedule("job", {"queue": "jobs", "payload": 1, "every_seconds": 60})
    move_to(tq, START + timedelta(seconds=61))
    tq.run_delayed_mover()
    [running] = tq.claim("jobs", max=1)
    tq.delete_schedule("job")
    tq.put_schedule("job", {"queue": "jobs", "payload": 2, "every_seconds": 60})
    assert pg.execute("SELECT count(*) FROM tierq_schedule_remnants").fetchone() == (0,)
    # the old config's occurrence still runs: the schedule is due at every tick until then
    assert tick_at(pg, "job") == ms(START + timedelta(seconds=61))
    tq.ack("jobs", [{"id": running.id, "lease_token": running.lease_token}])
    assert cron_tick.run(tq.ctx).schedules == 1
    assert tick_at(pg, "job") == ms(START + timedelta(minutes=2))


def test_migrated_schedules_are_due_once(make_tq: Factory,
                                         pg: psycopg.Connection[Any]) -> None:
    """A row without its next tick (as migration 0016 leaves every existing schedule) is
    visited by the next tick, which records it."""
    tq = make_tq(clock=clock_at(START))
    tq.put_schedule("old", {"queue": "q", "payload": 1, "every_seconds": 3600})
    pg.execute("UPDATE tierq_schedules SET tick_at_ms = DEFAULT")
    assert tick_at(pg, "old") == 0
    assert cron_tick.run(tq.ctx).schedules == 1
    assert tick_at(pg, "old") == ms(START + timedelta(hours=1))


# -- schedules per tenant -----------------------------------------------------------------------


def test_a_schedule_beyond_the_tenants_cap_is_refused_and_writes_nothing(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START), max_schedules_per_tenant=2)
    body = {"queue": "q", "payload": 1, "every_seconds": 60, "tenant": "acme"}
    tq.put_schedule("a", body)
    tq.put_schedule("b", body)
    with pytest.raises(QuotaExceeded, match=r"'acme' already has 2 schedules .*"
                       r"TIERQ_MAX_SCHEDULES_PER_TENANT.*'c' would be one more"):
        tq.put_schedule("c", {**body, "queue": "new-queue"})
    assert pg.execute("SELECT count(*) FROM tierq_schedules WHERE name = 'c'").fetchone() \
        == (0,)
    # nothing of it: no task, and its queue was not registered
    assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = 'new-queue'"
                      ).fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_queue_tenants WHERE queue = 'new-queue'"
                      ).fetchone() == (0,)
    # replacing one is not one more; another tenant has its own cap; a removal frees one
    tq.put_schedule("a", {**body, "payload": 2})
    tq.put_schedule("c", {**body, "tenant": "globex"})
    tq.delete_schedule("b", "acme")
    tq.put_schedule("c", body)


def test_two_puts_at_once_cannot_both_pass_the_cap(make_tq: Factory,
                                                   pg: psycopg.Connection[Any]) -> None:
    """A PUT that counted under the cap before another's new row committed waits for the
    tenant's lock, counts again and is refused."""
    tq = make_tq(clock=clock_at(START), max_schedules_per_tenant=1)
    outcome: list[BaseException | None] = []

    def put() -> None:
        try:
            tq.put_schedule("second", {"queue": "q", "payload": 1, "every_seconds": 60,
                                       "tenant": "acme"})
            outcome.append(None)
        except BaseException as exc:  # reported to the test
            outcome.append(exc)

    with pg.transaction():  # a first PUT, holding the tenant's lock, its row not committed
        pg.execute("SELECT pg_advisory_xact_lock("
                   "hashtextextended('tierq-schedules-of|' || 'acme', 11))")
        pg.execute("INSERT INTO tierq_schedules (name, queue, tenant, payload, every_ms, "
                   "config_hash, created_at, updated_at) "
                   "VALUES ('first', 'q', 'acme', '1', 60000, 'h', now(), now())")
        racer = threading.Thread(target=put)
        racer.start()
        racer.join(timeout=1.0)
        assert racer.is_alive()  # it passed the early count, and waits for the lock
    racer.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], QuotaExceeded), outcome
    assert pg.execute("SELECT name FROM tierq_schedules WHERE tenant = 'acme'").fetchall() \
        == [("first",)]


# -- what one schedule installs ---------------------------------------------------------------


def test_a_horizon_whose_payload_bytes_exceed_the_budget_is_refused(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    """The report's case: a 64 KiB payload and horizon 1,000 (66 MiB) is 422 naming the
    most that fits, writing nothing; horizon 16 (exactly 1 MiB) is installed."""
    tq = make_tq(clock=clock_at(START))
    payload = "x" * (64 * 1024 - 2)  # 65,536 bytes as JSON
    body = {"queue": "q", "payload": payload, "every_seconds": 3600, "horizon": 1000}
    with pytest.raises(InvalidInput, match=r"1000 occurrences .* 65536 bytes .*"
                       r"TIERQ_SCHEDULE_MAX_INSTALLED_BYTES.*at most 16 occurrences") as err:
        tq.put_schedule("big", body)
    assert err.value.details[0]["field"] == "horizon"
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)
    tq.put_schedule("big", {**body, "horizon": 16})
    assert future_bytes(pg, "big", START) == (16, 16 * 64 * 1024)


def test_a_frequent_schedule_whose_lookahead_exceeds_the_budget_is_refused(
        make_tq: Factory) -> None:
    tq = make_tq(clock=clock_at(START))
    body = {"queue": "q", "payload": "x" * (16 * 1024), "every_seconds": 1}
    with pytest.raises(InvalidInput, match=r"120 occurrences .* within the next 120 s") as err:
        tq.put_schedule("busy", body)
    assert err.value.details[0]["field"] == "payload"


def test_a_payload_larger_than_the_budget_is_refused_whatever_the_timing(
        make_tq: Factory) -> None:
    """Even a schedule whose first instant is beyond MAX_DELAY_SECONDS (nothing installed
    now) would install one occurrence later."""
    tq = make_tq(clock=clock_at(START), schedule_max_installed_bytes=2048)
    with pytest.raises(InvalidInput, match="the payload alone is larger") as err:
        tq.put_schedule("leap", {"queue": "q", "payload": "x" * 4096, "cron": "0 12 29 2 *"})
    assert err.value.details[0]["field"] == "payload"


def test_a_tick_installs_no_more_than_the_budget(make_tq: Factory,
                                                 pg: psycopg.Connection[Any]) -> None:
    """A cron whose burst (every second from 10:00) holds more than the PUT saw: the tick
    installs what fits, and later ticks the rest."""
    tq = make_tq(clock=clock_at(START), schedule_max_installed_bytes=100 * 1024)
    payload = "x" * (1024 - 2)  # 1 KiB as JSON: 100 fit
    tq.put_schedule("burst", {"queue": "q", "payload": payload, "cron": "* * 10 * * *",
                              "horizon": 4})
    assert future_bytes(pg, "burst", START) == (4, 4 * 1024)
    at = utc(2026, 5, 1, 9, 59, 50)
    move_to(tq, at)
    cron_tick.run(tq.ctx)
    count, size = future_bytes(pg, "burst", at)
    assert (count, size) == (100, 100 * 1024)
    move_to(tq, at + timedelta(seconds=30))
    cron_tick.run(tq.ctx)
    assert future_bytes(pg, "burst", at + timedelta(seconds=30))[1] <= 100 * 1024


def test_no_occurrence_is_installed_beyond_max_delay(make_tq: Factory,
                                                     pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(START))
    tq.put_schedule("daily", {"queue": "q", "payload": 1, "daily": ["06:00"],
                              "horizon": 1000})
    latest = pg.execute("SELECT count(*), max(fire_at_ms) FROM tierq_schedule_occurrences"
                        ).fetchone()
    assert latest is not None
    assert latest[0] == 366 and latest[1] <= ms(START) + MAX_DELAY_SECONDS * 1000
    assert tq.get_schedule("daily").installed_count == 366


def test_a_next_instant_beyond_max_delay_is_installed_when_it_comes_within(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    """A leap-day schedule put on 2026-05-01 fires first on 2028-02-29: nothing installed,
    its tick due when that instant comes within MAX_DELAY_SECONDS."""
    tq = make_tq(clock=clock_at(START))
    tq.put_schedule("leap", {"queue": "q", "payload": 1, "cron": "0 12 29 2 *"})
    assert pg.execute("SELECT count(*) FROM tierq_schedule_occurrences").fetchone() == (0,)
    fire = datetime(2028, 2, 29, 12, tzinfo=UTC)
    due = ms(fire) - MAX_DELAY_SECONDS * 1000
    assert tick_at(pg, "leap") == due
    move_to(tq, datetime.fromtimestamp(due / 1000 - 1, UTC))
    assert cron_tick.run(tq.ctx).schedules == 0
    move_to(tq, datetime.fromtimestamp(due / 1000, UTC))
    assert cron_tick.run(tq.ctx).installed == 1
    assert pg.execute("SELECT fire_at_ms FROM tierq_schedule_occurrences").fetchall() == \
        [(ms(fire),)]
