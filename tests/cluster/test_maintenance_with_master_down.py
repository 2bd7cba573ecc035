"""One master of the cluster is down: the maintenance passes skip only the pairs it served.

Each (queue, tenant) lives on one master. With the master of the first pair in walk order
stopped for real (SIGKILL), a reaper pass still expires the leases of the pairs on the other
masters, a cold -> warm pass still promotes their cold work, and a delayed-mover pass still
makes their due tasks ready; each pass lists the failed pair in its summary, and a second
pass does the same (the failing pair does not pin the walk). A cron tick installs every
schedule, the stopped master's pair's too (occurrences are delayed rows), and one that must
withdraw an occurrence from that master's ready set is rolled back and listed alone; a hung
master (SIGSTOP: each call waits the socket timeout) is asked once for all of a pass's
withdrawals from it, and not again for a minute. Once the cache is back (empty, the worst
case), the failed pair is served again and every committed task is delivered.

The surviving masters keep serving their own slots (``cluster-require-full-coverage no``,
as a cache whose failed shard is being replaced keeps the others available); with full
coverage required the whole cluster refuses, which test_master_crash_on_cluster covers.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.every_task import EVERY_TASK
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.dal.warm_tier import WarmTier
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock
from tierq.maintenance import cron_tick, delayed_mover

QUEUE = "mfail"
WARM_MAX = 5
READY = 12  # per tenant: WARM_MAX warm, the rest cold
DELAYED = 3  # per tenant, due after DELAY seconds
DELAY = 60
LEASE = 30
CLAIMED = 4  # per tenant: the first ACKED acked, the rest left to expire
ACKED = 2


def _states(pg: psycopg.Connection[Any], tenant: str) -> dict[str, int]:
    rows = pg.execute(f"SELECT state, count(*) FROM {EVERY_TASK} WHERE queue = %s"
                      " AND tenant = %s GROUP BY state", (QUEUE, tenant)).fetchall()
    return {state: int(n) for state, n in rows}


def _expired_leases(pg: psycopg.Connection[Any], tenant: str) -> int:
    return int(pg.execute(
        "SELECT count(*) FROM tierq_tasks WHERE queue = %s AND tenant = %s AND attempts = 1"
        " AND last_error LIKE 'lease expired%%'", (QUEUE, tenant)).fetchone()[0])


def _refused(tq: Tierq, tenant: str, queue: str = QUEUE) -> bool:
    try:
        tq.claim(queue, tenant=tenant, max=1)
    except Unavailable:
        return True
    return False


def _stop_master(cluster: Any, port: int, refused: Callable[[], bool]) -> None:
    """Stop the master on ``port`` for real (SIGKILL), the others serving their own slots,
    and wait until ``refused`` (a pair of that master refuses)."""
    serve_own_slots(cluster)
    pid = cluster.node_pids()[cluster.ports.index(port)]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert wait_pid_gone(pid, 10)
    eventually(refused, timeout=20, what="the stopped master's pair still answers")


def _stopped(pid: int) -> bool:
    """Whether the process ``pid`` is stopped (state T), as SIGSTOP leaves it."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


@contextmanager
def _hung_master(cluster: Any, port: int) -> Iterator[None]:
    """The master on ``port`` hung (SIGSTOP: its connections accept and never answer, so
    each call to it waits the client's socket timeout) for the block, the others serving
    their own slots; it goes on (SIGCONT) on every way out."""
    serve_own_slots(cluster)
    pid = cluster.node_pids()[cluster.ports.index(port)]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        eventually(lambda: _stopped(pid), timeout=10, what="the master stopped",
                   interval=0.01)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_passes_go_on_past_the_pairs_of_a_stopped_master(partial_cluster, app_database_url,
                                                          clean_stores, pg, caplog):
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, warm_max=WARM_MAX, reconcile_grace_seconds=30,
                        settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        tenants = tenants_on_every_node(tq.warm.client, QUEUE, per_node=2)  # type: ignore[arg-type]
        down = tenants[0]  # first in walk order: every pass meets it before the others
        port = int(node_of(tq.warm.client, QUEUE, down).split(":")[1])  # type: ignore[arg-type]
        on_down = {t for t in tenants
                   if node_of(tq.warm.client, QUEUE, t) == f"127.0.0.1:{port}"}  # type: ignore[arg-type]
        live = [t for t in tenants if t not in on_down]
        assert len(on_down) == 2 and len(live) == 4
        failed = [f"{QUEUE}|{t}" for t in tenants if t in on_down]  # in walk order
        tq.enqueue(QUEUE, [{"payload": [t, i], "tenant": t}
                           for t in tenants for i in range(READY)])
        tq.enqueue(QUEUE, [{"payload": [t, READY + i], "tenant": t, "delay_seconds": DELAY}
                           for t in tenants for i in range(DELAYED)])
        acked: set[tuple[str, int]] = set()
        for tenant in tenants:
            claimed = tq.claim(QUEUE, tenant=tenant, max=CLAIMED, lease_seconds=LEASE)
            assert len(claimed) == CLAIMED
            tq.ack(QUEUE, claimed[:ACKED])
            acked.update((t.payload[0], t.payload[1]) for t in claimed[:ACKED])
        cold_before = {t: _states(pg, t).get("cold", 0) for t in tenants}
        assert all(n > 0 for n in cold_before.values()), cold_before

        _stop_master(partial_cluster, port, lambda: _refused(tq, down))
        tq.ctx.clock.advance(DELAY + 1)  # past the leases and the delays

        caplog.clear()
        reaped = tq.run_reaper()
        assert reaped.failed == failed
        # one call found the master down; its other pair was passed over without a call
        warned = [r for r in caplog.records if r.name == "tierq.maintenance.pair_failures"
                  and r.levelname == "WARNING"]
        assert len(warned) == 1
        assert "127.0.0.1" in warned[0].getMessage()  # the detail is in the log
        assert reaped.expired == (CLAIMED - ACKED) * len(live)
        again = tq.run_reaper()  # the next pass is not pinned to the failed pair either
        assert again.failed == failed
        assert again.pairs == reaped.pairs == len(tenants)
        for tenant in tenants:  # the expired leases are back in line, attempt counted
            assert _expired_leases(pg, tenant) == (0 if tenant in on_down
                                                   else CLAIMED - ACKED), tenant

        # batches of 2: the stopped master's due rows come first and would fill each batch
        moved = delayed_mover.run(tq.ctx, batch=2)
        assert moved.failed == failed
        assert moved.moved == DELAYED * len(live)
        for tenant in live:
            assert _states(pg, tenant).get("delayed", 0) == 0, tenant
        for tenant in on_down:  # left in place for a later pass
            assert _states(pg, tenant)["delayed"] == DELAYED, tenant

        cold_before = {t: _states(pg, t).get("cold", 0) for t in tenants}
        promoted = tq.run_cold_to_warm()
        assert promoted.failed == failed
        assert promoted.promoted > 0
        for tenant in live:
            assert _states(pg, tenant).get("cold", 0) < cold_before[tenant], tenant
        for tenant in on_down:
            assert _states(pg, tenant).get("cold", 0) == cold_before[tenant], tenant

        for tenant in live:  # the live pairs serve right away
            got = tq.claim(QUEUE, tenant=tenant, max=1)
            assert got, tenant
            tq.ack(QUEUE, got)
            acked.update((t.payload[0], t.payload[1]) for t in got)

        partial_cluster.restart()  # the master back, the cache empty, on the same ports
        assert partial_cluster.url == settings.valkey_url
        tq.ctx.clock.advance(31)  # past the reconcile grace period
        delivered: list[tuple[str, int]] = []
        for _ in range(20):
            reaped = tq.run_reaper()
            assert not reaped.failed
            assert not tq.run_delayed_mover().failed
            assert not tq.run_cold_to_warm().failed
            while got := tq.claim(QUEUE, max=50):
                delivered.extend((t.payload[0], t.payload[1]) for t in got)
                assert not tq.ack(QUEUE, got).rejected
            if not pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND state <> "
                              "'done'", (QUEUE,)).fetchone()[0]:
                break
            tq.ctx.clock.advance(31)
        expected = {(t, i) for t in tenants for i in range(READY + DELAYED)}
        assert set(delivered) | acked == expected  # nothing lost
        assert not set(delivered) & acked
        assert len(delivered) == len(set(delivered))  # once each


def test_a_push_that_fails_after_the_commit_leaves_the_rows_to_the_reconciler(
        partial_cluster, app_database_url, clean_stores, pg):
    """Pairs in warm mode need no Valkey call before the delayed mover's commit: the push
    after it is what fails. The rows stay warm in PostgreSQL, the other pairs' tasks are
    pushed, and once the cache is back the reconciler pushes the failed pair's rows in
    their place in line."""
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, reconcile_grace_seconds=30,
                        settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        tenants = tenants_on_every_node(tq.warm.client, QUEUE)  # type: ignore[arg-type]
        down = tenants[0]
        port = int(node_of(tq.warm.client, QUEUE, down).split(":")[1])  # type: ignore[arg-type]
        tq.enqueue(QUEUE, [{"payload": [t, 0], "tenant": t} for t in tenants])
        tq.enqueue(QUEUE, [{"payload": [t, 1 + i], "tenant": t, "delay_seconds": DELAY}
                           for t in tenants for i in range(DELAYED)])
        assert all(tq.ctx.modes.get((QUEUE, t)) == "warm" for t in tenants)

        serve_own_slots(partial_cluster)
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(port)]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)
        tq.ctx.clock.advance(DELAY + 1)

        moved = tq.run_delayed_mover()
        assert moved.failed == [f"{QUEUE}|{down}"]
        assert moved.moved == DELAYED * len(tenants)
        for tenant in tenants:  # committed ready: nothing waits delayed any more
            assert _states(pg, tenant) == {"warm": 1 + DELAYED}, tenant
        for tenant in tenants[1:]:
            got = tq.claim(QUEUE, tenant=tenant, max=10)
            assert [t.payload[1] for t in got] == list(range(1 + DELAYED)), tenant
            tq.ack(QUEUE, got)

        partial_cluster.restart()
        tq.ctx.clock.advance(31)  # past the reconcile grace period
        reaped = tq.run_reaper()
        assert not reaped.failed
        assert reaped.restored == 1 + DELAYED
        got = tq.claim(QUEUE, tenant=down, max=10)
        assert [t.payload[1] for t in got] == list(range(1 + DELAYED))  # in line, none lost
        tq.ack(QUEUE, got)


def _occurrences(pg: psycopg.Connection[Any]) -> dict[str, int]:
    """Occurrences installed so far, by schedule."""
    return dict(pg.execute("SELECT schedule, count(*) FROM tierq_schedule_occurrences"
                           " GROUP BY schedule").fetchall())


def test_a_cron_tick_installs_every_schedule_while_a_master_is_down(
        partial_cluster, app_database_url, clean_stores, pg, caplog):
    """A process new to the pairs (a new Lambda container) registers each schedule's pair
    before installing it: the pairs of the stopped master do not end the pass, and their
    schedules are installed too (occurrences are delayed rows, PostgreSQL alone); that
    master is asked once, not once a pair, and not again for a minute."""
    queue = "crondown"
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    clock = OffsetClock()
    with Tierq(settings=settings, clock=clock) as tq:
        tenants = tenants_on_every_node(tq.warm.client, queue, per_node=2)  # type: ignore[arg-type]
        # not the master the URL names, which a new process's client starts from
        down = next(t for t in tenants if node_of(tq.warm.client, queue, t)  # type: ignore[arg-type]
                    != f"127.0.0.1:{partial_cluster.port}")
        port = int(node_of(tq.warm.client, queue, down).split(":")[1])  # type: ignore[arg-type]
        on_down = [t for t in tenants if node_of(tq.warm.client, queue, t)  # type: ignore[arg-type]
                   == f"127.0.0.1:{port}"]
        assert len(on_down) == 2
        tenants.sort(key=lambda t: t not in on_down)  # their schedules the soonest due
        for tenant in tenants:
            tq.put_schedule(f"s-{tenant}", {"queue": queue, "tenant": tenant,
                                            "payload": tenant, "every_seconds": 1})
        _stop_master(partial_cluster, port, lambda: _refused(tq, down, queue))
    clock.advance(10)  # each schedule has 10 occurrences more to install
    before = _occurrences(pg)
    with Tierq(settings=settings, clock=clock) as fresh:
        caplog.clear()
        ticked = cron_tick.run(fresh.ctx, budget_seconds=60)
        assert ticked.failed == []
        assert ticked.schedules == len(tenants)
        now = _occurrences(pg)
        for tenant in tenants:
            assert now[f"s-{tenant}"] >= before[f"s-{tenant}"] + 10, tenant
        warned = [r.getMessage() for r in caplog.records
                  if r.name == "tierq.maintenance.cron_tick" and r.levelname == "WARNING"]
        assert len(warned) == 1, warned  # (the other pair of that master: not asked)
        # (nor for a minute after: a master that times out costs a pass's budget a pair)
        assert list(fresh.ctx.warm_down_until) == [f"127.0.0.1:{port}"]
        assert any(f"'{t}'" in warned[0] for t in on_down), warned


def test_a_cron_tick_withdrawing_from_a_stopped_master_fails_that_schedule_alone(
        partial_cluster, app_database_url, clean_stores, pg):
    """A schedule whose old occurrence still waits in the ready set of the stopped master
    (it was held when its config changed, so the tick comes back to withdraw it): that
    schedule is rolled back and listed, the others are installed in the same slice."""
    queue = "crondraw"
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        tenants = tenants_on_every_node(tq.warm.client, queue)  # type: ignore[arg-type]
        down = next(t for t in tenants if node_of(tq.warm.client, queue, t)  # type: ignore[arg-type]
                    != f"127.0.0.1:{partial_cluster.port}")
        port = int(node_of(tq.warm.client, queue, down).split(":")[1])  # type: ignore[arg-type]
        tenants.sort(key=lambda t: t != down)  # its schedule the soonest due: met first
        for tenant in tenants:
            tq.put_schedule(f"s-{tenant}", {"queue": queue, "tenant": tenant,
                                            "payload": "old", "every_seconds": 1})
        tq.ctx.clock.advance(2)
        tq.run_delayed_mover()  # the first occurrences are due: warm, in the ready sets
        [[held_id]] = pg.execute(
            "SELECT t.id FROM tierq_tasks t JOIN tierq_schedule_occurrences o"
            " ON o.task_id = t.id WHERE o.tenant = %s AND t.state = 'warm' LIMIT 1",
            (down,)).fetchall()
        with psycopg.connect(app_database_url) as holder:
            holder.execute("SELECT 1 FROM tierq_tasks WHERE id = %s FOR UPDATE", (held_id,))
            tq.put_schedule(f"s-{down}", {"queue": queue, "tenant": down,
                                          "payload": "new", "every_seconds": 1})
            holder.rollback()
        _stop_master(partial_cluster, port, lambda: _refused(tq, down, queue))
        tq.ctx.clock.advance(10)
        before = _occurrences(pg)
        ticked = cron_tick.run(tq.ctx, budget_seconds=60)
        assert ticked.failed == [f"{down}/s-{down}"]
        now = _occurrences(pg)
        for tenant in tenants:
            if tenant != down:
                assert now[f"s-{tenant}"] >= before[f"s-{tenant}"] + 10, tenant
        # the old occurrence is still a warm row, left for the next tick
        assert pg.execute("SELECT state FROM tierq_tasks WHERE id = %s",
                          (held_id,)).fetchone()[0] == "warm"


# the socket timeout of the hung-master test's client: the cluster client tries a call
# that times out 11 times in all (redis-py's retries), so one call to that master waits
# about 11 of them
HUNG_TIMEOUT = 0.2
WITHDRAWING = 3  # schedules with an occurrence to withdraw from the hung master


def test_a_cron_tick_asks_a_hung_master_once_for_every_withdrawal_from_it(
        partial_cluster, app_database_url, clean_stores, pg):
    """Several schedules whose old occurrences wait in the ready set of a hung master
    (SIGSTOP: not dead, each call waits the socket timeout): the first withdrawal asks it
    and fails, and it is remembered down, so the others fail at once without a call; each
    is rolled back and listed, and the schedule of another master is installed. Until its
    time is up the master is not asked again, back or not; then the withdrawals are done."""
    queue = "crondraws"
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    short = (f"{partial_cluster.url}?socket_timeout={HUNG_TIMEOUT}"
             f"&socket_connect_timeout={HUNG_TIMEOUT}")
    with Tierq(settings=settings, clock=OffsetClock(),
               warm=WarmTier.from_url(short, cluster=True)) as tq:
        tenants = tenants_on_every_node(tq.warm.client, queue)  # type: ignore[arg-type]
        down, live = [t for t in tenants if node_of(tq.warm.client, queue, t)  # type: ignore[arg-type]
                      != f"127.0.0.1:{partial_cluster.port}"]
        master = node_of(tq.warm.client, queue, down)  # type: ignore[arg-type]
        names = [f"s-{i}" for i in range(WITHDRAWING)]
        for name in names:
            tq.put_schedule(name, {"queue": queue, "tenant": down, "payload": "old",
                                   "every_seconds": 1})
        tq.put_schedule("s-live", {"queue": queue, "tenant": live, "payload": "old",
                                   "every_seconds": 1})
        tq.ctx.clock.advance(2)
        tq.run_delayed_mover()  # the first occurrences are due: warm, in the ready sets
        held = [r[0] for r in pg.execute(
            "SELECT DISTINCT ON (o.schedule) t.id FROM tierq_tasks t"
            " JOIN tierq_schedule_occurrences o ON o.task_id = t.id"
            " WHERE o.tenant = %s AND t.state = 'warm' ORDER BY o.schedule, t.id",
            (down,)).fetchall()]
        assert len(held) == WITHDRAWING
        with psycopg.connect(app_database_url) as holder:
            # each schedule's PUT passes over its held occurrence: the tick withdraws it
            holder.execute("SELECT 1 FROM tierq_tasks WHERE id = ANY(%s) FOR UPDATE", (held,))
            for name in names:
                tq.put_schedule(name, {"queue": queue, "tenant": down, "payload": "new",
                                       "every_seconds": 1})
            holder.rollback()
        asked: list[str] = []  # the tenants whose pair's master a withdrawal called
        remove_ready = tq.warm.remove_ready

        def counted(queue: str, tenant: str, places: Any) -> list[str]:
            asked.append(tenant)
            return remove_ready(queue, tenant, places)

        tq.warm.remove_ready = counted  # type: ignore[method-assign]
        tq.ctx.clock.advance(10)
        before = _occurrences(pg)
        failed = [f"{down}/{name}" for name in names]
        with _hung_master(partial_cluster, int(master.split(":")[1])):
            started = time.monotonic()
            ticked = cron_tick.run(tq.ctx, budget_seconds=60)
            took = time.monotonic() - started
        assert sorted(ticked.failed) == failed
        assert asked.count(down) == 1, (asked, f"{took:.1f} s")  # (the others: no call)
        assert list(tq.ctx.warm_down_until) == [master]
        assert _occurrences(pg)["s-live"] >= before["s-live"] + 10
        # the old occurrences are still warm rows, left for a later tick
        states = "SELECT state FROM tierq_tasks WHERE id = ANY(%s)"
        assert [r[0] for r in pg.execute(states, (held,))] == ["warm"] * WITHDRAWING

        # back, but remembered down for a minute: not asked
        assert sorted(cron_tick.run(tq.ctx, budget_seconds=60).failed) == failed
        assert asked.count(down) == 1
        # its time is up: asked again, the old occurrences withdrawn (the first call's
        # script may have run as the master went on, after the client gave up: that
        # occurrence is out of the ready set, a warm row the reconciler pushes again)
        tq.ctx.warm_down_until[master] = time.monotonic()
        ticked = cron_tick.run(tq.ctx, budget_seconds=60)
        assert ticked.failed == []
        assert ticked.withdrawn in (WITHDRAWING - 1, WITHDRAWING)
        assert asked.count(down) == 1 + WITHDRAWING
        assert list(tq.ctx.warm_down_until) == []
        assert len(pg.execute(states, (held,)).fetchall()) == WITHDRAWING - ticked.withdrawn
