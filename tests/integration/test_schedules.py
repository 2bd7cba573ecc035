"""Cron schedules on real PostgreSQL and Valkey: occurrences are keyed delayed tasks
``name/config_hash/epoch_ms``; ticks install them without duplicates, a config change
replaces the pending ones and leaves claimed ones alone, DST follows the documented rule."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import psycopg
import pytest

from tests.integration.helpers import http_event
from tierq.engine import Tierq
from tierq.errors import InvalidInput, NotFound, PayloadTooLarge
from tierq.logic import schedules
from tierq.logic.schedules import Timing, local_to_instant, occurrences
from tierq.models.schedules import parse_daily_time

BERLIN = ZoneInfo("Europe/Berlin")
Factory = Callable[..., Tierq]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class FrozenClock:
    """Time that moves only when a test moves it, so how many occurrences fall inside a
    window never depends on how fast the machine is."""

    def __init__(self, at: float) -> None:
        self.at = at

    def now(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds


def clock_at(moment: datetime) -> FrozenClock:
    return FrozenClock(moment.timestamp())


def move_to(tq: Tierq, moment: datetime) -> None:
    clock = tq.ctx.clock
    assert isinstance(clock, FrozenClock)
    clock.at = moment.timestamp()


def occurrence_rows(pg: psycopg.Connection[Any], name: str) -> list[tuple[Any, ...]]:
    """(key, state, run_at, attempts) of every task of a schedule, by run_at."""
    return pg.execute(
        "SELECT key, state, run_at, attempts FROM tierq_tasks WHERE key LIKE %s "
        "ORDER BY run_at, key", (f"{name}/%",)
    ).fetchall()


def fire_ms(key: str) -> int:
    return int(key.rsplit("/", 1)[1])


def drain(tq: Tierq, queue: str) -> list[str]:
    """Make due tasks ready, claim and ack all of them; returns the claimed keys."""
    tq.run_delayed_mover()
    keys: list[str] = []
    while True:
        got = tq.claim(queue, max=50)
        if not got:
            return keys
        keys.extend(str(t.key) for t in got)
        result = tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token} for t in got])
        assert len(result.acked) == len(got)


# -- the timing rules, without the stores -------------------------------------------------------


def test_daylight_saving_rule_for_wall_clock_times() -> None:
    # spring forward 2026-03-29 in Berlin: 02:00 CET -> 03:00 CEST at 01:00Z
    assert local_to_instant(datetime(2026, 3, 29, 2, 30), BERLIN) == utc(2026, 3, 29, 1, 0)
    assert local_to_instant(datetime(2026, 3, 29, 2, 0), BERLIN) == utc(2026, 3, 29, 1, 0)
    assert local_to_instant(datetime(2026, 3, 29, 1, 59, 59), BERLIN) == \
        utc(2026, 3, 29, 0, 59, 59)
    assert local_to_instant(datetime(2026, 3, 29, 3, 0), BERLIN) == utc(2026, 3, 29, 1, 0)
    # fall back 2026-10-25: 03:00 CEST -> 02:00 CET at 01:00Z; 02:30 happens twice
    assert local_to_instant(datetime(2026, 10, 25, 2, 30), BERLIN) == utc(2026, 10, 25, 0, 30)
    assert local_to_instant(datetime(2026, 10, 25, 3, 0), BERLIN) == utc(2026, 10, 25, 2, 0)
    # New York: the gap is 02:00-03:00 local on 2026-03-08 (07:00Z)
    new_york = ZoneInfo("America/New_York")
    assert local_to_instant(datetime(2026, 3, 8, 2, 15), new_york) == utc(2026, 3, 8, 7, 0)


def test_daily_occurrences_across_both_changes() -> None:
    daily = Timing(daily=(parse_daily_time("02:30"),), timezone="Europe/Berlin")
    spring = occurrences(daily, ms(utc(2026, 3, 27, 12)), at_least=4)
    assert spring == [ms(utc(2026, 3, 28, 1, 30)), ms(utc(2026, 3, 29, 1, 0)),
                      ms(utc(2026, 3, 30, 0, 30)), ms(utc(2026, 3, 31, 0, 30))]
    autumn = occurrences(daily, ms(utc(2026, 10, 23, 12)), at_least=4)
    assert autumn == [ms(utc(2026, 10, 24, 0, 30)), ms(utc(2026, 10, 25, 0, 30)),
                      ms(utc(2026, 10, 26, 1, 30)), ms(utc(2026, 10, 27, 1, 30))]
    # asked during the repeated hour (02:15 CET, after 02:30 CEST ran): not again today
    assert occurrences(daily, ms(utc(2026, 10, 25, 1, 15)), at_least=1) == \
        [ms(utc(2026, 10, 26, 1, 30))]
    # two times inside the gap collapse into one run when the clocks jump
    both = Timing(daily=(parse_daily_time("02:10"), parse_daily_time("02:50")),
                  timezone="Europe/Berlin")
    assert occurrences(both, ms(utc(2026, 3, 28, 23)), at_least=2) == \
        [ms(utc(2026, 3, 29, 1, 0)), ms(utc(2026, 3, 30, 0, 10))]


def test_cron_and_period_occurrences() -> None:
    every = Timing(every_ms=60_000)
    start = ms(utc(2026, 5, 1, 10, 0, 30))
    assert occurrences(every, start, at_least=2) == [ms(utc(2026, 5, 1, 10, 1)),
                                                     ms(utc(2026, 5, 1, 10, 2))]
    # "at least" and "everything up to": a short period fills the lookahead window
    assert len(occurrences(Timing(every_ms=1000), start, at_least=4,
                           through_ms=start + 120_000)) == 120
    # six fields put the seconds first
    seconds = Timing(cron="15 30 2 * * *")
    assert occurrences(seconds, ms(utc(2026, 5, 1)), at_least=1) == \
        [ms(utc(2026, 5, 1, 2, 30, 15))]
    berlin_cron = Timing(cron="30 2 * * *", timezone="Europe/Berlin")
    assert occurrences(berlin_cron, ms(utc(2026, 3, 28, 12)), at_least=2) == \
        [ms(utc(2026, 3, 29, 1, 0)), ms(utc(2026, 3, 30, 0, 30))]


# -- installing ---------------------------------------------------------------------------------


def test_put_installs_keyed_delayed_occurrences(make_tq: Factory,
                                                pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0)))
    view = tq.put_schedule("report", {"queue": "reports", "tenant": "acme",
                                      "payload": {"kind": "daily"}, "priority": 7,
                                      "cron": "30 2 * * *"})
    assert [o for o in view.next_occurrences] == [utc(2026, 5, d, 2, 30) for d in (2, 3, 4, 5)]
    rows = pg.execute(
        "SELECT queue, tenant, key, state, run_at, priority, payload FROM tierq_tasks "
        "ORDER BY run_at").fetchall()
    assert [r[4] for r in rows] == view.next_occurrences
    for queue, tenant, key, state, run_at, priority, payload in rows:
        assert (queue, tenant, state, priority, payload) == \
            ("reports", "acme", "delayed", 7, {"kind": "daily"})
        assert key == f"report/{view.config_hash}/{ms(run_at)}"
    assert [o.key for o in view.installed] == [r[2] for r in rows]
    assert all(o.current and o.state == "delayed" for o in view.installed)
    # the (queue, tenant) pair is registered like an enqueue's
    assert pg.execute("SELECT 1 FROM tierq_queue_tenants WHERE queue = 'reports' "
                      "AND tenant = 'acme'").fetchone()
    assert tq.list_schedules()[0].name == "report"


def test_ticks_top_up_and_never_reinstall(make_tq: Factory,
                                          pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 0)))
    tq.put_schedule("hourly", {"queue": "q", "payload": 1, "every_seconds": 3600,
                               "horizon": 3})
    assert len(occurrence_rows(pg, "hourly")) == 3
    assert tq.run_cron_tick().schedules == 0  # nothing to do: no write at all
    move_to(tq, utc(2026, 5, 1, 9, 59, 59))
    assert tq.run_cron_tick().schedules == 0
    # an hour and a bit later the first has run: one more is installed, the ran one is not
    move_to(tq, utc(2026, 5, 1, 10, 0, 5))
    assert drain(tq, "q") == [f"hourly/{tq.get_schedule('hourly').config_hash}/"
                              f"{ms(utc(2026, 5, 1, 10))}"]
    summary = tq.run_cron_tick()
    assert (summary.schedules, summary.installed, summary.withdrawn) == (1, 1, 0)
    assert tq.run_cron_tick().schedules == 0
    assert [r[2] for r in occurrence_rows(pg, "hourly")] == \
        [utc(2026, 5, 1, h) for h in (11, 12, 13)]


def test_period_shorter_than_the_tick_is_installed_ahead(make_tq: Factory,
                                                          pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 0)), cron_every=10.0)
    tq.put_schedule("fast", {"queue": "q", "payload": None, "every_seconds": 1})
    assert len(occurrence_rows(pg, "fast")) == 120  # the lookahead: 120 s of occurrences
    move_to(tq, utc(2026, 5, 1, 9, 0, 10))
    assert tq.run_cron_tick().installed == 10
    firing = [fire_ms(r[0]) for r in occurrence_rows(pg, "fast")]
    assert firing == list(range(ms(utc(2026, 5, 1, 9, 0, 1)), ms(utc(2026, 5, 1, 9, 2, 11)),
                                1000))


def test_occurrences_fire_through_the_delayed_path(make_tq: Factory) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 30)))
    view = tq.put_schedule("minutely", {"queue": "jobs", "payload": {"n": 1},
                                        "every_seconds": 60, "horizon": 2})
    assert tq.claim("jobs", max=10) == []  # not before their time
    assert tq.run_delayed_mover().moved == 0
    move_to(tq, utc(2026, 5, 1, 9, 1, 0))
    assert tq.claim("jobs", max=10) == []  # due, but only the delayed mover makes it ready
    assert tq.run_delayed_mover().moved == 1
    claimed = tq.claim("jobs", max=10)
    assert len(claimed) == 1
    task = claimed[0]
    assert task.key == f"minutely/{view.config_hash}/{ms(utc(2026, 5, 1, 9, 1))}"
    assert task.payload == {"n": 1}
    assert tq.ack("jobs", [{"id": task.id, "lease_token": task.lease_token}]).acked == [task.id]
    assert tq.get_schedule("minutely").installed[0].at == utc(2026, 5, 1, 9, 2)


# -- concurrency --------------------------------------------------------------------------------


def test_two_ticks_at_once_create_no_duplicate(make_tq: Factory,
                                               pg: psycopg.Connection[Any]) -> None:
    start = utc(2026, 5, 1, 9, 0, 0)
    setup = make_tq(clock=clock_at(start))
    for i in range(6):
        setup.put_schedule(f"s{i}", {"queue": "q", "payload": i, "every_seconds": 1})
    before = pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0]  # type: ignore[index]
    engines = [make_tq(clock=clock_at(start + timedelta(seconds=30))) for _ in range(4)]
    barrier = threading.Barrier(len(engines))
    summaries: list[Any] = []

    def tick(tq: Tierq) -> None:
        barrier.wait()
        summaries.append(tq.run_cron_tick())

    threads = [threading.Thread(target=tick, args=(tq,)) for tq in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = [r[0] for r in pg.execute("SELECT key FROM tierq_tasks").fetchall()]
    assert len(keys) == len(set(keys))
    assert len(keys) == before + 6 * 30  # each schedule: 30 more seconds of occurrences
    assert sum(s.installed for s in summaries) == 6 * 30
    assert not any(s.failed for s in summaries)


def test_concurrent_installs_without_the_schedule_lock_insert_each_key_once(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    """The lock only spares work: ON CONFLICT DO NOTHING on the live key is what keeps two
    installs of the same occurrences from duplicating them."""
    start = utc(2026, 5, 1, 9, 0, 0)
    tq = make_tq(clock=clock_at(start))
    tq.put_schedule("racy", {"queue": "q", "payload": 1, "every_seconds": 1,
                             "enabled": False})
    pg.execute("UPDATE tierq_schedules SET enabled = true WHERE name = 'racy'")
    barrier = threading.Barrier(2)
    results: list[schedules.InstallResult] = []

    def install() -> None:
        with tq.db.transaction() as conn:
            row = tq.ctx.store.schedule_by_name("_", "racy", conn=conn)
            assert row is not None
            barrier.wait()
            results.append(schedules.install(tq.ctx, conn, row, tq.ctx.now()))

    threads = [threading.Thread(target=install) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = [r[0] for r in occurrence_rows(pg, "racy")]
    assert len(keys) == 120 and len(set(keys)) == 120
    assert sorted(r.installed for r in results) == [0, 120]
    ledger = pg.execute("SELECT count(*) FROM tierq_schedule_occurrences").fetchone()
    assert ledger == (120,)


# -- config changes, disabling, removal ---------------------------------------------------------


def test_config_change_replaces_pending_and_leaves_claimed_alone(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 30)))
    tq.put_queue("jobs", {"warm_max": 2})
    old = tq.put_schedule("job", {"queue": "jobs", "payload": {"v": 1}, "every_seconds": 60,
                                  "horizon": 6})
    move_to(tq, utc(2026, 5, 1, 9, 3, 1))  # three are due: 2 go warm (warm_max), 1 cold
    assert tq.run_delayed_mover().moved == 3
    running = tq.claim("jobs", max=1)[0]  # the oldest; the second waits in the ready set
    states = Counter(r[1] for r in occurrence_rows(pg, "job"))
    assert states == {"warm": 2, "cold": 1, "delayed": 3}
    waiting = [str(r[0]) for r in pg.execute(
        "SELECT id FROM tierq_tasks WHERE state = 'warm' AND id <> %s", (running.id,))]
    assert tq.ctx.warm.is_ready("jobs", "_", waiting[0])

    new = tq.put_schedule("job", {"queue": "jobs", "payload": {"v": 2}, "every_seconds": 60,
                                  "horizon": 6})
    assert new.config_hash != old.config_hash
    rows = occurrence_rows(pg, "job")
    old_rows = [r for r in rows if f"/{old.config_hash}/" in r[0]]
    assert [r[0] for r in old_rows] == [running.key]  # only the claimed one is left
    assert not tq.ctx.warm.is_ready("jobs", "_", waiting[0])
    new_rows = [r for r in rows if f"/{new.config_hash}/" in r[0]]
    assert [r[2] for r in new_rows] == [utc(2026, 5, 1, 9, m) for m in range(4, 10)]
    assert {r[1] for r in new_rows} == {"delayed"}
    view = tq.get_schedule("job")
    assert (view.installed[0].key, view.installed[0].current) == (running.key, False)
    # the claimed occurrence runs to its end: its lease is intact
    assert tq.ack("jobs", [{"id": running.id, "lease_token": running.lease_token}]).acked \
        == [running.id]
    tq.run_cron_tick()
    assert all(o.current for o in tq.get_schedule("job").installed)
    assert pg.execute("SELECT count(*) FROM tierq_schedule_occurrences").fetchone() == (6,)


def test_changing_back_to_an_old_config_never_duplicates_a_claimed_occurrence(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 30)))
    body_a = {"queue": "jobs", "payload": "a", "every_seconds": 60, "horizon": 3}
    tq.put_schedule("flip", body_a)
    move_to(tq, utc(2026, 5, 1, 9, 1, 0))
    tq.run_delayed_mover()
    move_to(tq, utc(2026, 5, 1, 9, 0, 50))  # the worker's occurrence is still "ahead" of now
    running = tq.claim("jobs", max=1)[0]
    tq.put_schedule("flip", {**body_a, "payload": "b"})
    tq.put_schedule("flip", body_a)  # same hash as the running occurrence's
    keys = [r[0] for r in occurrence_rows(pg, "flip")]
    assert keys.count(running.key) == 1
    assert len(keys) == len(set(keys))


def test_an_occurrence_that_ran_is_not_installed_again_by_a_slower_clock(
        make_tq: Factory, pg: psycopg.Connection[Any]) -> None:
    due = utc(2026, 5, 1, 9, 1, 0)
    cron = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 30)))
    worker = make_tq(clock=clock_at(due + timedelta(seconds=2)))  # its clock runs ahead
    cron.put_schedule("skew", {"queue": "jobs", "payload": 1, "every_seconds": 60,
                               "horizon": 2})
    assert drain(worker, "jobs") == [f"skew/{cron.get_schedule('skew').config_hash}/{ms(due)}"]
    move_to(cron, due - timedelta(seconds=1))
    cron.run_cron_tick()
    assert ms(due) not in [fire_ms(r[0]) for r in occurrence_rows(pg, "skew")]


def test_disabled_schedule_installs_nothing(make_tq: Factory,
                                            pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0)))
    view = tq.put_schedule("off", {"queue": "q", "payload": 1, "daily": ["02:30"],
                                   "timezone": "Europe/Berlin", "enabled": False})
    assert (view.enabled, view.next_occurrences, view.installed) == (False, [], [])
    assert tq.run_cron_tick().installed == 0
    assert occurrence_rows(pg, "off") == []
    on = tq.put_schedule("off", {"queue": "q", "payload": 1, "daily": ["02:30"],
                                 "timezone": "Europe/Berlin"})
    assert len(on.installed) == 4
    tq.put_schedule("off", {"queue": "q", "payload": 1, "daily": ["02:30"],
                            "timezone": "Europe/Berlin", "enabled": False})
    assert occurrence_rows(pg, "off") == []
    assert tq.run_cron_tick().installed == 0


def test_delete_withdraws_pending_and_a_tick_finishes_what_was_locked(
        make_tq: Factory, pg: psycopg.Connection[Any], database_url: str) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 5, 1, 9, 0, 30)))
    tq.put_schedule("gone", {"queue": "jobs", "payload": 1, "every_seconds": 60,
                             "horizon": 4})
    move_to(tq, utc(2026, 5, 1, 9, 1, 1))
    tq.run_delayed_mover()
    running = tq.claim("jobs", max=1)[0]
    pending = occurrence_rows(pg, "gone")
    assert len(pending) == 4  # the claimed one and three delayed
    # another transaction holds one delayed occurrence (as the delayed mover would)
    with psycopg.connect(database_url) as other:
        other.execute("SELECT id FROM tierq_tasks WHERE key = %s FOR UPDATE",
                      (pending[-1][0],))
        removed = tq.delete_schedule("gone")
        other.rollback()
    assert removed.removed_occurrences == 2
    with pytest.raises(NotFound):
        tq.get_schedule("gone")
    assert [r[0] for r in occurrence_rows(pg, "gone")] == [running.key, pending[-1][0]]
    summary = tq.run_cron_tick()  # the leftovers of a removed schedule are still visited
    assert (summary.schedules, summary.withdrawn) == (1, 1)
    assert [r[0] for r in occurrence_rows(pg, "gone")] == [running.key]
    assert tq.ack("jobs", [{"id": running.id, "lease_token": running.lease_token}]).acked
    assert tq.run_cron_tick().schedules == 1  # prunes the ledger ...
    assert tq.run_cron_tick().schedules == 0  # ... and then there is nothing left to visit
    with pytest.raises(NotFound):
        tq.delete_schedule("gone")


# -- daylight saving, end to end ----------------------------------------------------------------


def simulate(tq: Tierq, queue: str, until: datetime, step: timedelta) -> list[datetime]:
    """Tick, move and claim every `step` of simulated time; returns when each run fired."""
    fired: list[datetime] = []
    now = datetime.fromtimestamp(tq.ctx.now(), UTC)
    while now < until:
        tq.run_cron_tick()
        now += step
        move_to(tq, now)
        fired.extend(datetime.fromtimestamp(fire_ms(k) / 1000, UTC) for k in drain(tq, queue))
    return fired


@pytest.mark.slow
def test_daily_berlin_0230_across_spring_forward(make_tq: Factory) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 3, 27, 12)))
    view = tq.put_schedule("nightly", {"queue": "night", "payload": {}, "daily": ["02:30"],
                                       "timezone": "Europe/Berlin"})
    assert view.next_occurrences == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0),
                                     utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]
    fired = simulate(tq, "night", utc(2026, 4, 1, 6), timedelta(minutes=20))
    # 02:30 CET, then 03:00 CEST (02:30 does not exist that night), then 02:30 CEST
    assert fired == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30),
                     utc(2026, 3, 31, 0, 30), utc(2026, 4, 1, 0, 30)]
    assert [f.astimezone(BERLIN).strftime("%d %H:%M") for f in fired] == \
        ["28 02:30", "29 03:00", "30 02:30", "31 02:30", "01 02:30"]


@pytest.mark.slow
def test_daily_berlin_0230_across_fall_back(make_tq: Factory) -> None:
    tq = make_tq(clock=clock_at(utc(2026, 10, 23, 12)))
    tq.put_schedule("nightly", {"queue": "night", "payload": {}, "daily": ["02:30"],
                                "timezone": "Europe/Berlin"})
    # steps of 15 minutes tick inside both passes of the repeated hour (00:00-02:00Z)
    fired = simulate(tq, "night", utc(2026, 10, 28, 6), timedelta(minutes=15))
    assert fired == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
                     utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30),
                     utc(2026, 10, 28, 1, 30)]
    assert [f.astimezone(BERLIN).strftime("%d %H:%M %Z") for f in fired] == \
        ["24 02:30 CEST", "25 02:30 CEST", "26 02:30 CET", "27 02:30 CET", "28 02:30 CET"]


# -- bad input writes nothing -------------------------------------------------------------------


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"cron": "61 * * * *"}, "cron", "'61 * * * *' is not a valid cron expression"),
    ({"cron": "* * * *"}, "cron", "4 fields"),
    ({"cron": "0 0 30 2 *"}, "cron", "never matches"),
    ({"every_seconds": 0.5}, "every_seconds", "at least 1 second"),
    ({"every_seconds": 0}, "every_seconds", "at least 1 second"),
    ({"daily": ["25:00"]}, "daily", "'25:00' is not a time of day"),
    ({"daily": []}, "daily", "at least one time"),
    ({"daily": ["02:30"], "timezone": "Europe/Atlantis"}, "timezone", "IANA"),
    ({"every_seconds": 60, "timezone": "UTC"}, "timezone", "cron and daily"),
    ({}, "body", "exactly one of cron, every_seconds or daily"),
    ({"cron": "* * * * *", "every_seconds": 5}, "body", "exactly one"),
    ({"cron": "* * * * *", "queue": "bad queue"}, "queue", "pattern"),
    ({"cron": "* * * * *", "tenant": "a|b"}, "tenant", "pattern"),
    ({"cron": "* * * * *", "priority": 10}, "priority", "less than or equal to 9"),
    ({"cron": "* * * * *", "horizon": 0}, "horizon", "greater than or equal to 1"),
    ({"cron": "* * * * *", "colour": "red"}, "colour", "Extra inputs"),
    ({"cron": "* * * * *", "payload": {"s": "a\x00"}}, "payload", "NUL character"),
])
def test_bad_input_is_rejected_naming_the_field(make_tq: Factory, pg: psycopg.Connection[Any],
                                                body: dict[str, Any], field: str,
                                                words: str) -> None:
    tq = make_tq()
    with pytest.raises(InvalidInput) as caught:
        tq.put_schedule("bad", {"queue": "q", "payload": 1, **body})
    assert caught.value.status == 422
    assert field in [d["field"] for d in caught.value.details]
    assert words in caught.value.message
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)


def test_bad_name_and_oversized_payload_write_nothing(make_tq: Factory,
                                                      pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(max_payload_bytes=100)
    with pytest.raises(InvalidInput) as caught:
        tq.put_schedule("no/slash", {"queue": "q", "payload": 1, "cron": "* * * * *"})
    assert caught.value.details[0]["field"] == "name"
    with pytest.raises(PayloadTooLarge):
        tq.put_schedule("big", {"queue": "q", "payload": "x" * 200, "cron": "* * * * *"})
    with pytest.raises(NotFound):
        tq.get_schedule("missing")
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)


def test_a_payload_may_hold_the_text_of_a_nul_escape(make_tq: Factory) -> None:
    tq = make_tq()
    view = tq.put_schedule("regex", {"queue": "q", "payload": {"re": "\\u0000"},
                                     "every_seconds": 3600})
    assert view.payload == {"re": "\\u0000"}


# -- the admin function's routes (API Gateway HTTP API events, real stores) ---------------------


@pytest.fixture
def admin(tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, Any]]:
    from tierq.aws import runtime
    from tierq.aws.http.resolver import build_resolver

    monkeypatch.setattr(runtime, "_engine", tq)
    app = build_resolver("admin")

    def call(method: str, path: str, body: Any = None,
             claims: dict[str, str] | None = None) -> tuple[int, Any]:
        response = app.resolve(http_event(method, path, body, claims), None)  # type: ignore[arg-type]
        return response["statusCode"], orjson.loads(response["body"])

    return call


def test_schedule_routes(admin: Callable[..., tuple[int, Any]],
                         pg: psycopg.Connection[Any]) -> None:
    status, body = admin("PUT", "/v1/schedules/nightly",
                         {"queue": "night", "payload": {"a": 1}, "daily": ["02:30", "14:00"],
                          "timezone": "Europe/Berlin", "horizon": 3})
    assert status == 200, body
    assert body["daily"] == ["02:30", "14:00"] and len(body["next_occurrences"]) == 3
    assert [o["key"].split("/")[0] for o in body["installed"]] == ["nightly"] * 3
    status, listed = admin("GET", "/v1/schedules")
    assert status == 200 and [s["name"] for s in listed["schedules"]] == ["nightly"]
    assert listed["schedules"][0]["next_occurrences"] == body["next_occurrences"]
    assert admin("GET", "/v1/schedules/nightly")[1]["config_hash"] == body["config_hash"]
    status, removed = admin("DELETE", "/v1/schedules/nightly")
    assert (status, removed) == (200, {"name": "nightly", "tenant": "_",
                                       "removed_occurrences": 3})
    status, missing = admin("GET", "/v1/schedules/nightly")
    assert status == 404 and missing["error"]["code"] == "not_found"
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"queue": "q", "payload": 1, "cron": "61 * * * *"}, "cron", "'61 * * * *'"),
    ({"queue": "q", "payload": 1, "every_seconds": 0.5}, "every_seconds", "at least 1"),
    ({"queue": "q", "payload": 1}, "body", "exactly one of cron"),
])
def test_schedule_routes_reject_bad_input(admin: Callable[..., tuple[int, Any]],
                                          pg: psycopg.Connection[Any], body: dict[str, Any],
                                          field: str, words: str) -> None:
    status, error = admin("PUT", "/v1/schedules/bad", body)
    assert status == 422, error
    assert error["error"]["code"] == "invalid_input"
    assert field in [d["field"] for d in error["error"]["details"]]
    assert words in error["error"]["message"]
    assert pg.execute("SELECT count(*) FROM tierq_schedules").fetchone() == (0,)
    status, error = admin("PUT", "/v1/schedules/no%20spaces", body)
    assert status == 422, error
    assert error["error"]["details"][0]["field"] == "name"


def test_schedule_routes_pin_the_tenant(admin: Callable[..., tuple[int, Any]]) -> None:
    body = {"queue": "q", "payload": 1, "every_seconds": 60}
    assert admin("PUT", "/v1/schedules/mine", body, {"tenant": "acme"})[1]["tenant"] == "acme"
    assert admin("PUT", "/v1/schedules/theirs", {**body, "tenant": "other"})[0] == 200
    status, error = admin("PUT", "/v1/schedules/x", {**body, "tenant": "other"},
                          {"tenant": "acme"})
    assert status == 403 and error["error"]["details"][0]["field"] == "tenant"
    listed = admin("GET", "/v1/schedules", claims={"tenant": "acme"})[1]
    assert [s["name"] for s in listed["schedules"]] == ["mine"]
    assert admin("GET", "/v1/schedules/theirs", claims={"tenant": "acme"})[0] == 404
    assert admin("DELETE", "/v1/schedules/theirs", claims={"tenant": "acme"})[0] == 404
    assert admin("GET", "/v1/schedules?tenant=other", claims={"tenant": "acme"})[0] == 403
    # names are per tenant: acme's own "theirs" is another schedule, other's stays as it was
    status, own = admin("PUT", "/v1/schedules/theirs", {**body, "every_seconds": 30},
                        {"tenant": "acme"})
    assert (status, own["tenant"], own["every_seconds"]) == (200, "acme", 30)
    status, others = admin("GET", "/v1/schedules/theirs?tenant=other")
    assert (status, others["tenant"], others["every_seconds"]) == (200, "other", 60)
    assert admin("GET", "/v1/schedules/theirs")[0] == 404  # the admin's default tenant is _


# -- the scheduled function ---------------------------------------------------------------------


class FakeLambdaContext:
    function_name = "tierq-cron-tick"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:tierq-cron-tick"
    aws_request_id = "test-request"

    def __init__(self, seconds_left: float) -> None:
        self.deadline = time.monotonic() + seconds_left

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


def test_cron_tick_function_ticks_inside_one_invocation(
        make_tq: Factory, pg: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    from pathlib import Path

    from tierq.aws import runtime

    start = utc(2026, 5, 1, 9, 0, 0)
    tq = make_tq(clock=clock_at(start))
    monkeypatch.setattr(runtime, "_engine", tq)
    tq.put_schedule("fast", {"queue": "q", "payload": 1, "every_seconds": 1})
    move_to(tq, start + timedelta(seconds=30))
    path = Path(__file__).parents[2] / "functions" / "cron_tick" / "app.py"
    spec = importlib.util.spec_from_file_location("cron_tick_app", path)
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    report = app.lambda_handler({"source": "tierq.scheduler", "job": "cron_tick",
                                 "max_seconds": 0.6, "every_seconds": 0.2},
                                FakeLambdaContext(seconds_left=60))
    assert report["job"] == "cron_tick" and report["ticks"] >= 2
    assert report["failed_ticks"] == 0
    assert report["totals"]["installed"] == 30  # the first tick; the others find it done
    assert len(occurrence_rows(pg, "fast")) == 150
    with pytest.raises(ValueError, match="names 'reaper'"):
        app.lambda_handler({"job": "reaper"}, FakeLambdaContext(seconds_left=60))


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_schedules(database_url: str, valkey_url: str, clean_stores: None,
                       monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                       pg: psycopg.Connection[Any]) -> None:
    from typer.testing import CliRunner

    from tierq.cli import app
    from tierq.config import get_settings

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    monkeypatch.setenv("COLUMNS", "200")  # the table on one line per schedule
    get_settings.cache_clear()
    runner = CliRunner()
    try:
        put = runner.invoke(app, ["schedules", "put", "nightly", "--queue", "reports",
                                  "--daily", "14:00", "--daily", "02:30", "--timezone",
                                  "Europe/Berlin", "--payload", '{"report": "sales"}'])
        assert put.exit_code == 0, put.output
        view = orjson.loads(put.stdout)
        assert view["daily"] == ["02:30", "14:00"] and len(view["installed"]) == 4
        body = tmp_path / "fast.json"
        body.write_text('{"queue": "q", "payload": null, "every_seconds": 3600, "horizon": 2}')
        from_file = runner.invoke(app, ["schedules", "put", "hourly", "-f", str(body),
                                        "--priority", "5"])
        assert from_file.exit_code == 0, from_file.output
        assert orjson.loads(from_file.stdout)["priority"] == 5
        listed = runner.invoke(app, ["schedules", "list", "--json"])
        assert [s["name"] for s in orjson.loads(listed.stdout)["schedules"]] == \
            ["hourly", "nightly"]
        table = runner.invoke(app, ["schedules", "list"])
        assert "nightly" in table.stdout and "daily 02:30, 14:00" in table.stdout
        tick = runner.invoke(app, ["schedules", "tick"])
        assert tick.exit_code == 0 and orjson.loads(tick.stdout)["installed"] == 0
        bad = runner.invoke(app, ["schedules", "put", "bad", "--queue", "q", "--payload", "1",
                                  "--cron", "61 * * * *"])
        assert bad.exit_code == 1 and "'61 * * * *' is not a valid cron" in bad.output
        removed = runner.invoke(app, ["schedules", "delete", "nightly"])
        assert orjson.loads(removed.stdout) == {"name": "nightly", "tenant": "_",
                                                "removed_occurrences": 4}
        assert runner.invoke(app, ["schedules", "get", "nightly"]).exit_code == 1
        assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (2,)
    finally:
        get_settings.cache_clear()
