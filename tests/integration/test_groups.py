"""Groups: ordered work per key, on the real stores. A group's tasks are claimed in enqueue
order, at most group_max_leased at once; the others are held in PostgreSQL until a
finishing transaction (ack, dead, cancel, purge) releases the next; a retried head keeps
its place; a replayed dead letter joins its group's back (logic/groups.py)."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from typing import Any

import orjson
import psycopg
import pytest
from pydantic import ValidationError

from tests.integration.helpers import count_rows, drain, http_event
from tests.support.stores import scratch_database
from tierq.errors import InvalidInput
from tierq.logic import flows, groups
from tierq.logic.context import OffsetClock


def _states(pg: Any, queue: str) -> dict[str, int]:
    rows = pg.execute("SELECT state, count(*) FROM tierq_tasks WHERE queue = %s GROUP BY state",
                      (queue,)).fetchall()
    return {state: n for state, n in rows}


def _group_row(pg: Any, queue: str, grp: str) -> tuple[int, int] | None:
    row = pg.execute("SELECT active, held FROM tierq_groups WHERE queue = %s AND grp = %s",
                     (queue, grp)).fetchone()
    return None if row is None else (row[0], row[1])


def test_a_group_runs_one_at_a_time_in_enqueue_order_whatever_the_priority(tq, pg):
    made = tq.enqueue("q", [{"payload": i, "group": "g", "priority": 9 - i} for i in range(4)]
                      + [{"payload": "free"}])
    assert [o.state for o in made] == ["warm", "held", "held", "held", "warm"]
    assert _group_row(pg, "q", "g") == (1, 3)
    claimed = tq.claim("q", max=10)
    assert sorted(str(t.payload) for t in claimed) == ["0", "free"]
    assert {str(t.payload): t.group for t in claimed} == {"0": "g", "free": None}
    assert tq.get_task("q", made[1].id).state == "held"
    assert tq.get_task("q", made[1].id).group == "g"
    seen = [t.payload for t in claimed if t.payload != "free"]
    tq.ack("q", claimed)
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        assert len(got) == 1
        seen.append(got[0].payload)
        tq.ack("q", got)
    assert seen == [0, 1, 2, 3]


def test_acks_release_the_next_task_and_the_group_row_goes_when_done(tq, pg):
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    order = []
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        assert len(got) == 1  # never two of the group at once
        order.append(got[0].payload)
        tq.ack("q", [{"id": got[0].id, "lease_token": got[0].lease_token,
                      **({"result": {"n": 1}} if got[0].payload == 1 else {})}])
    assert order == [0, 1, 2]
    assert _group_row(pg, "q", "g") is None  # nothing active, nothing held: gone
    assert _states(pg, "q") == {"done": 1}


def test_group_is_refused_with_after_and_when_malformed(tq, pg):
    [a] = tq.enqueue("q", [{"payload": 0}])
    with pytest.raises(InvalidInput) as caught:
        tq.enqueue("q", [{"payload": 1, "group": "g", "after": [a.id]}])
    assert caught.value.details[0]["field"] == "task.group"
    with pytest.raises((InvalidInput, ValidationError)) as bad:
        tq.enqueue("q", [{"payload": 1, "group": "x" * 129}])
    assert "group" in str(bad.value)
    assert count_rows(pg) == 1
    assert pg.execute("SELECT count(*) FROM tierq_groups").fetchone()[0] == 0


def test_group_max_leased_is_validated_and_three_run_at_once_in_order(tq, pg):
    for bad in (0, 1001):
        with pytest.raises((InvalidInput, ValidationError)) as caught:
            tq.put_queue("q", {"group_max_leased": bad})
        assert "group_max_leased" in str(caught.value)
    assert tq.queue_settings("q").group_max_leased == 1
    tq.put_queue("q", {"group_max_leased": 3})
    assert tq.queue_settings("q").group_max_leased == 3
    made = tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(10)])
    assert [o.state for o in made].count("held") == 7
    order: list[int] = []
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        assert len(got) <= 3
        leased = pg.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'warm'").fetchone()[0]
        assert leased <= 3
        order.extend(t.payload for t in got)
        tq.ack("q", got[:1])  # one acked: the next is released
        if len(got) > 1:
            tq.release("q", got[1:])  # given back: still active, claimed again
    # each task claimed first in enqueue order, acked once
    assert list(dict.fromkeys(order)) == list(range(10))
    tq.put_queue("q", {"group_max_leased": None})
    assert tq.queue_settings("q").group_max_leased == 1


def _finished(pg: Any, ids: list[str]) -> bool:
    """Whether none of these tasks is active or held any more."""
    return pg.execute(
        "SELECT count(*) FROM tierq_tasks WHERE id = ANY(%s::uuid[]) "
        "AND state IN ('held', 'delayed', 'cold', 'warm')", (ids,)).fetchone()[0] == 0


def test_strict_order_one_at_a_time_under_eight_claimers_with_failures(make_tq, database_url):
    """8 claimer threads over 24 groups of 8 tasks (warm_max 4: most ready work starts
    cold, the mover brings it warm), nacking, dead-lettering and abandoning leases at
    random while a maintenance thread expires leases (the clock moves), moves cold work
    warm and sweeps: each group's tasks are first claimed in enqueue order, a task is
    claimed only once every earlier one of its group is finished, and a group never has
    two tasks active."""
    clock = OffsetClock()
    setup = make_tq(clock=clock, warm_max=4, lease_seconds=30, max_attempts=3)
    index: dict[str, tuple[str, int]] = {}
    by_group: dict[str, list[str]] = defaultdict(list)
    for g in range(24):
        made = setup.enqueue("race", [{"payload": [g, i], "group": f"g{g}",
                                       "priority": random.randint(0, 9)} for i in range(8)])
        for i, o in enumerate(made):
            index[str(o.id)] = (f"g{g}", i)
            by_group[f"g{g}"].append(str(o.id))
    everything = list(index)
    # the groups' heads past warm_max wait cold: each is claimed only after a cold -> warm
    # move (the mover's or a claim's refill)
    with psycopg.connect(database_url, autocommit=True) as pg:
        assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'cold'"
                          ).fetchone()[0] == 20
    lock = threading.Lock()
    highest: dict[str, int] = defaultdict(lambda: -1)
    first_claims: dict[str, list[int]] = defaultdict(list)
    errors: list[str] = []
    seen: dict[str, int] = defaultdict(int)  # what happened, by kind
    stop = threading.Event()

    def claimer(seed: int) -> None:
        rng = random.Random(seed)
        tq = make_tq(clock=clock, warm_max=4, lease_seconds=30, max_attempts=3)
        with psycopg.connect(database_url, autocommit=True) as pg:
            while not stop.is_set():
                got = tq.claim("race", max=3)
                if not got:
                    stop.wait(0.01)
                    continue
                for t in got:
                    grp, i = index[str(t.id)]
                    if t.group != grp:  # (from the warm blob, whichever path pushed it)
                        errors.append(f"{t.id} claimed with group {t.group!r}, not {grp!r}")
                    earlier = by_group[grp][:i]
                    with lock:
                        if i < highest[grp]:
                            errors.append(f"{grp}: task {i} claimed after {highest[grp]}")
                        if i > highest[grp]:
                            first_claims[grp].append(i)
                        highest[grp] = max(highest[grp], i)
                    if earlier and not _finished(pg, earlier):
                        errors.append(f"{grp}: task {i} claimed before an earlier finished")
                    roll = rng.random()
                    kind = ("ack" if roll < 0.6 else "nack" if roll < 0.8
                            else "dead" if roll < 0.85 else "abandoned")
                    with lock:
                        seen[kind] += 1
                    if kind == "ack":
                        tq.ack("race", [t])
                    elif kind == "nack":
                        tq.nack("race", [{"id": t.id, "lease_token": t.lease_token,
                                          "error": "again", "retry_in_seconds": 0}])
                    elif kind == "dead":
                        tq.nack("race", [{"id": t.id, "lease_token": t.lease_token,
                                          "error": "dead", "dead": True}])
                    # else: abandoned, its lease expires

    def maintenance() -> None:
        tq = make_tq(clock=clock, warm_max=4, lease_seconds=30, max_attempts=3)
        with psycopg.connect(database_url, autocommit=True) as pg:
            while not stop.is_set():
                stop.wait(0.2)
                clock.advance(31)
                seen["expired"] += tq.run_reaper().expired
                tq.run_delayed_mover()
                seen["promoted"] += tq.run_cold_to_warm().promoted
                active = pg.execute(
                    "SELECT grp, count(*) FROM tierq_tasks WHERE queue = 'race' AND "
                    "state IN ('delayed', 'cold', 'warm') GROUP BY grp HAVING count(*) > 1"
                ).fetchall()
                if active:
                    errors.append(f"groups with two active tasks: {active}")
                if _finished(pg, everything):
                    stop.set()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    threads.append(threading.Thread(target=maintenance))
    for t in threads:
        t.start()
    stop.wait(120)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors[:5]
    with psycopg.connect(database_url, autocommit=True) as pg:
        assert _finished(pg, everything)
        assert pg.execute("SELECT count(*) FROM tierq_groups").fetchone()[0] == 0
    for grp, firsts in first_claims.items():
        assert firsts == sorted(firsts), grp
    assert sum(len(f) for f in first_claims.values()) == len(everything)
    assert all(seen[k] > 0 for k in ("ack", "nack", "dead", "abandoned", "expired")), \
        dict(seen)
    print(f"\n{len(everything)} tasks in 24 groups, 8 claimers: {dict(seen)}")


def test_a_retried_head_keeps_its_place_through_its_backoff(make_tq, pg):
    tq = make_tq(lease_seconds=30)
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    [head] = tq.claim("q")
    tq.nack("q", [{"id": head.id, "lease_token": head.lease_token, "error": "x",
                   "retry_in_seconds": 60}])
    assert tq.claim("q", max=10) == []  # the group waits for its head's backoff
    tq.ctx.clock.advance(61)
    tq.run_delayed_mover()
    [again] = tq.claim("q", max=10)
    assert again.id == head.id and again.attempt == 2
    tq.ctx.clock.advance(31)  # its lease expires: still the head
    tq.run_reaper()
    tq.run_delayed_mover()
    got = drain(tq, "q", batch=10)
    assert [t.payload for t in got] == [0, 1, 2]
    assert got[0].attempt == 3


def test_a_busy_group_beside_a_hundred_quiet_ones_starves_none(tq, pg):
    tq.enqueue("q", [{"payload": ["busy", i], "group": "busy", "priority": 9}
                     for i in range(200)])
    tq.enqueue("q", [{"payload": ["quiet", g], "group": f"quiet{g}"} for g in range(100)])
    seen: list[Any] = []
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        seen.extend(t.payload for t in got)
        tq.ack("q", got)
        if len([p for p in seen if p[0] == "quiet"]) == 100:
            break
    busy = [p for p in seen if p[0] == "busy"]
    # every quiet head was claimed while the busy group moved on one task per ack
    assert len([p for p in seen if p[0] == "quiet"]) == 100
    assert busy == [["busy", i] for i in range(len(busy))]
    assert len(busy) <= len(seen) // 10 + 1  # one busy task per claim at most


def test_a_dead_head_releases_the_next_and_its_replay_joins_the_back(make_tq, pg):
    tq = make_tq(max_attempts=1)
    made = tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    [head] = tq.claim("q")
    tq.nack("q", [{"id": head.id, "lease_token": head.lease_token, "error": "boom"}])
    assert tq.get_task("q", made[0].id).state == "dead"
    [nxt] = tq.claim("q")
    assert nxt.payload == 1
    replayed = tq.dlq_replay("q", ids=[made[0].id])
    assert replayed[0] == [made[0].id]
    assert tq.get_task("q", made[0].id).state == "held"  # behind task 2
    tq.ack("q", [nxt])
    got = drain(tq, "q", batch=10)
    assert [t.payload for t in got] == [2, 0]
    # a replay into a group with room is active at once
    [t] = tq.enqueue("q", [{"payload": "x", "group": "h"}])
    [c] = tq.claim("q")
    tq.nack("q", [{"id": c.id, "lease_token": c.lease_token, "error": "boom"}])
    tq.dlq_replay("q", ids=[t.id])
    assert tq.get_task("q", t.id).state == "warm"
    assert _group_row(pg, "q", "h") == (1, 0)


def test_an_expired_lease_at_its_last_attempt_releases_the_next(make_tq, pg):
    tq = make_tq(max_attempts=1, lease_seconds=10)
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(2)])
    [_head] = tq.claim("q")
    tq.ctx.clock.advance(11)
    assert tq.run_reaper().dead == 1
    [nxt] = tq.claim("q")
    assert nxt.payload == 1


def test_cancel_of_a_held_task_and_of_the_head(tq, pg):
    made = tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(4)])
    assert tq.cancel_task("q", made[2].id).state == "held"
    assert _group_row(pg, "q", "g") == (1, 2)
    tq.cancel_task("q", made[0].id)  # the head, not yet claimed
    assert tq.get_task("q", made[1].id).state == "warm"
    got = drain(tq, "q", batch=10)
    assert [t.payload for t in got] == [1, 3]
    assert _group_row(pg, "q", "g") is None


def test_a_key_held_in_a_group_is_live_and_replaced_in_place(tq, pg):
    made = tq.enqueue("q", [{"payload": 0, "group": "g"},
                            {"payload": 1, "group": "g", "key": "k"}])
    assert made[1].state == "held"
    [again] = tq.enqueue("q", [{"payload": "new", "group": "g", "key": "k",
                                "on_conflict": "replace"}])
    assert again.id == made[1].id and again.outcome == "updated" and again.state == "held"
    got = drain(tq, "q", batch=10)
    assert [t.payload for t in got] == [0, "new"]


def test_a_purge_drops_the_groups_and_the_sweep_releases_a_stalled_group(tq, pg):
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    tq.purge_queue("q")
    assert pg.execute("SELECT count(*) FROM tierq_groups").fetchone()[0] == 0
    made = tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    [head] = tq.claim("q")
    # a crash between an ack's commit and its release: the row gone, nothing released
    pg.execute("DELETE FROM tierq_tasks WHERE id = %s", (str(head.id),))
    assert tq.claim("q") == []
    assert tq.run_reaper().groups_released == 1
    assert tq.get_task("q", made[1].id).state == "warm"
    assert groups.sweep_all(tq.ctx) == 0  # nothing stalled any more
    assert [t.payload for t in drain(tq, "q", batch=10)] == [1, 2]


def test_enqueue_racing_ack_on_one_group_never_stalls(make_tq, pg):
    """One thread enqueues into a group while another claims and acks it, many rounds:
    after both end, every task was claimed (a held task with nothing active would be
    left behind)."""
    producer, consumer = make_tq(), make_tq()
    total = 300
    done = threading.Event()
    acked: list[Any] = []

    def produce() -> None:
        for i in range(0, total, 3):
            producer.enqueue("race", [{"payload": i + j, "group": "g"} for j in range(3)])
        done.set()

    def consume() -> None:
        idle = 0
        while len(acked) < total and idle < 500:
            got = consumer.claim("race", max=5)
            if not got:
                idle = idle + 1 if done.is_set() else 0
                continue
            idle = 0
            assert len(got) == 1
            acked.append(got[0].payload)
            consumer.ack("race", got)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert acked == list(range(total))
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == 0


def test_over_http_a_task_names_its_group_and_bad_values_are_422(tq, pg, monkeypatch):
    from tierq.aws import runtime
    from tierq.aws.http.resolver import build_resolver

    monkeypatch.setattr(runtime, "_engine", tq)

    def call(function: str, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        response = build_resolver(function).resolve(http_event(method, target, body), None)
        return response["statusCode"], orjson.loads(response["body"])

    status, body = call("enqueue", "POST", "/v1/queues/q/tasks",
                        {"tasks": [{"payload": 1, "group": "order-7"},
                                   {"payload": 2, "group": "order-7"}]})
    assert status == 200, body
    assert [t["state"] for t in body["tasks"]] == ["warm", "held"]
    status, view = call("admin", "GET", f"/v1/queues/q/tasks/{body['tasks'][1]['id']}")
    assert status == 200 and view["group"] == "order-7" and view["state"] == "held"
    status, bad = call("enqueue", "POST", "/v1/queues/q/tasks",
                       {"payload": 3, "group": "x" * 129})
    assert status == 422 and "group" in orjson.dumps(bad).decode()
    status, bad = call("admin", "PUT", "/v1/queues/q", {"group_max_leased": 1001})
    assert status == 422 and "group_max_leased" in orjson.dumps(bad).decode()
    status, ok = call("admin", "PUT", "/v1/queues/q", {"group_max_leased": 2})
    assert status == 200 and ok["settings"]["group_max_leased"] == 2
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == 2


def test_migration_0019_upgrades_a_populated_database(services, monkeypatch):
    """A database at migration 0018 with tasks in every state (keyed live ones among them)
    takes 0019: the rows stay as they were, without a group, their keys still one live task
    each, and a grouped task can be written beside them."""
    from tierq.dal import migrate as migrations
    from tierq.dal.migrate import migrate

    every = migrations.available()
    at = [m.version for m in every].index("0019")
    with scratch_database(services.postgres.url, "groups_upgrade") as url:
        monkeypatch.setattr(migrations, "available", lambda: every[:at])
        migrate(url)
        monkeypatch.setattr(migrations, "available", lambda: every)
        with psycopg.connect(url, autocommit=True) as conn:
            for i, state in enumerate(("waiting", "delayed", "cold", "warm", "dead", "done")):
                conn.execute(
                    "INSERT INTO tierq_tasks (id, queue, tenant, key, payload, state, run_at, "
                    "run_at_initially, max_attempts, seq, created_at, state_since) VALUES "
                    "(gen_random_uuid(), 'q', '_', %s, %s, %s, now(), now(), 3, %s, now(), "
                    "now())", (f"k{i}" if state != "waiting" else None,
                               orjson.dumps(i).decode(), state, i))
            assert migrate(url) == [m.version for m in every[at:]]
            rows = conn.execute("SELECT state, key, grp FROM tierq_tasks ORDER BY seq").fetchall()
            assert rows == [("waiting", None, None), ("delayed", "k1", None),
                            ("cold", "k2", None), ("warm", "k3", None), ("dead", "k4", None),
                            ("done", "k5", None)]
            with pytest.raises(psycopg.errors.UniqueViolation):  # k2 is still live
                conn.execute(
                    "INSERT INTO tierq_tasks (id, queue, tenant, key, payload, state, run_at, "
                    "run_at_initially, max_attempts, seq, created_at, state_since, grp) VALUES "
                    "(gen_random_uuid(), 'q', '_', 'k2', '0', 'held', now(), now(), 3, 9, "
                    "now(), now(), 'g')")
            conn.execute(
                "INSERT INTO tierq_tasks (id, queue, tenant, key, payload, state, run_at, "
                "run_at_initially, max_attempts, seq, created_at, state_since, grp) VALUES "
                "(gen_random_uuid(), 'q', '_', 'k4', '0', 'held', now(), now(), 3, 9, now(), "
                "now(), 'g')")  # k4's task is dead: its key is free
            assert conn.execute("SELECT count(*) FROM tierq_queue_limits").fetchone()[0] == 0


def test_a_release_that_fails_after_the_ack_committed_answers_the_ack_and_the_sweep_releases(
        make_tq: Any, pg: Any, database_url: str) -> None:
    """The release runs after the ack's commit: when it fails (here its group's row is held
    by another transaction past the lock timeout) the ack still answers acked, and the
    reaper's sweep releases the group's next task."""
    tq = make_tq(lock_timeout_ms=200)
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(2)])
    [head] = tq.claim("q", max=10)
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM tierq_groups WHERE queue = 'q' AND grp = 'g' FOR UPDATE")
        answer = tq.ack("q", [head])
        assert [str(i) for i in answer.acked] == [str(head.id)] and not answer.rejected
    assert _states(pg, "q") == {"held": 1}  # nothing released yet
    tq.run_reaper()
    [second] = tq.claim("q", max=10)
    assert second.payload == 1


def test_a_release_pushes_what_an_enqueue_would_have_pushed(tq, pg):
    """release_group_heads builds each released task's blob in SQL (as promote_cold does);
    the push item made of it must be exactly what logic/admission builds from the same row
    (row_push_item): a claim decodes either."""
    from psycopg.rows import dict_row

    from tierq.core.ordering import place
    from tierq.dal.store.rows import RestoreRow
    from tierq.logic.admission import row_push_item
    from tierq.logic.context import to_datetime

    odd = ['quote " and \\ backslash', "non-ascii é ✓", "del\u007f and /", None]
    trace = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "tracestate": "k=v"}
    tq.enqueue("q", [{"payload": {"n": i, "text": odd[i % 4] or "", "nested": [1.5, None]},
                      "key": odd[i % 4] and f"{odd[i % 4]}-{i}", "priority": i % 10,
                      "max_attempts": 1 + i, "group": f"g-{i % 6}",
                      **({"trace": trace} if i % 5 == 0 else {}),
                      **({"timeout_seconds": 30 + i} if i % 4 < 2 else {})}
                     for i in range(24)])
    heads = [r[0] for r in pg.execute(
        "DELETE FROM tierq_tasks WHERE queue = 'q' AND state = 'warm' RETURNING grp")]
    assert len(heads) == 6
    rows = tq.ctx.store.release_groups(
        "q", to_datetime(tq.ctx.now()), 1, [(["_"] * 6, sorted(heads), ["warm"] * 6)])
    assert len(rows) == 6 and {r.state for r in rows} == {"warm"}
    with pg.cursor(row_factory=dict_row) as cur:
        stored = {str(r["id"]): RestoreRow(**r) for r in cur.execute(
            "SELECT id, key, seq, priority, payload::text AS payload, attempts, "
            "max_attempts, created_at, parents::text AS parents, grp, timeout_seconds, trace "
            "FROM tierq_tasks WHERE state = 'warm'").fetchall()}
    assert sum(1 for r in stored.values() if r.trace) >= 1
    assert sum(1 for r in stored.values() if r.timeout_seconds) >= 1
    for row in rows:
        assert (row.id, place(row.priority, row.seq, row.id), row.blob.encode()) \
            == row_push_item(stored[row.id])


def test_a_release_past_one_block_of_seqs_keeps_the_line_order(tq, pg):
    """A release numbers its tasks from one nextval per 512 (tierq_task_seq steps by 512):
    700 released at once take distinct seqs in their line's order."""
    tasks = [{"payload": i, "group": g} for i in range(350) for g in "ab"]
    made = tq.enqueue("q", tasks[:350]) + tq.enqueue("q", tasks[350:])
    assert [o.state for o in made].count("held") == 698
    tq.put_queue("q", {"group_max_leased": 1000})
    heads = tq.claim("q", max=10)
    assert sorted(t.payload for t in heads) == [0, 0]
    tq.ack("q", heads)
    rows = pg.execute("SELECT grp, payload::int, seq FROM tierq_tasks WHERE queue = 'q' "
                      "ORDER BY seq").fetchall()
    assert len(rows) == 698 and len({seq for _, _, seq in rows}) == 698
    assert [(g, n) for g, n, _ in rows] == [(g, n) for g in "ab" for n in range(1, 350)]
    assert set(_states(pg, "q")) <= {"warm", "cold"}


def test_a_grouped_ack_pushes_the_next_tasks_in_the_round_trip_of_its_lease_drop(tq, pg):
    """The release of a grouped ack commits before its leases are dropped, and the tasks it
    released are pushed in the round trip of their pair's drop (admission.push_along): an
    ack of four groups' heads is two Valkey round trips (the token check, then the drop
    with the push), as an ack of ungrouped tasks is."""
    from bench.enqueue_round_trips import Wire

    tq.enqueue("q", [{"payload": i, "group": f"g{i % 5}"} for i in range(15)])
    first, *heads = sorted(tq.claim("q", max=10), key=lambda t: t.payload)
    assert [t.payload for t in heads] == [1, 2, 3, 4]
    tq.ack("q", [first])  # (not counted: it loads the scripts)
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        result = tq.ack("q", heads)
        wire.on = False
    assert len(result.acked) == 4
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    assert wire.commands["push_ready"] == 1
    assert sorted(t.payload for t in tq.claim("q", max=10)) == [5, 6, 7, 8, 9]
    assert _states(pg, "q") == {"warm": 5, "held": 5}


def test_a_push_sent_along_a_drop_whose_script_valkey_lost_is_pushed_on_its_own(tq, valkey):
    """Valkey that lost its scripts (a restart, SCRIPT FLUSH) answers the push sent in the
    drop's round trip with NOSCRIPT: the push is then sent on its own, and the next task of
    the group is claimed."""
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    [head] = tq.claim("q", max=10)
    valkey.script_flush()
    assert [str(i) for i in tq.ack("q", [head]).acked] == [str(head.id)]
    [second] = tq.claim("q", max=10)
    assert second.payload == 1


def _wait_for_a_lock_wait(pg: Any, timeout: float = 10.0) -> None:
    """Until another session of this database waits on a lock (a row lock here)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = pg.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()").fetchone()[0]
        if n:
            return
        time.sleep(0.01)
    raise AssertionError("no session came to wait on a lock")


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_cancel_of_the_first_held_task_inside_a_release_keeps_the_group_row(
        make_tq: Any, pg: Any, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A release (an ack's) that read the group's first held task in its snapshot while a
    cancel (or delete) of that task was not yet committed skips it once the cancel commits:
    it releases nothing, yet the group still holds tasks. Its row stays (the cancel's own
    release recounts it under the lock): the next task is released and the held count is
    exact. Deterministic: the cancel stops inside its transaction, after its change, until
    the ack's release waits on that task's row lock."""
    acker, canceller = make_tq(), make_tq()
    made = acker.enqueue("q", [{"payload": i, "group": "g"} for i in range(4)])
    assert _group_row(pg, "q", "g") == (1, 3)
    [head] = acker.claim("q")
    original = flows.settle
    acking: list[threading.Thread] = []

    def settle(ctx: Any, conn: Any, ids: Any, state: str) -> Any:
        if threading.current_thread() is threading.main_thread() and not acking:
            # the cancel's change made, not committed: the ack's release reads the held
            # task in its snapshot, then waits on its row
            t = threading.Thread(target=acker.ack, args=("q", [head]))
            acking.append(t)
            t.start()
            _wait_for_a_lock_wait(pg)
        return original(ctx, conn, ids, state)

    monkeypatch.setattr(flows, "settle", settle)
    if how == "cancel":
        assert canceller.cancel("q", made[1].id).state == "cancelled"
    else:
        assert canceller.cancel_task("q", made[1].id).state == "held"
    monkeypatch.setattr(flows, "settle", original)
    acking[0].join(30)
    assert acking and not acking[0].is_alive()
    assert tq_state(acker, made[2].id) == "warm"  # the next task was released
    assert tq_state(acker, made[3].id) == "held"
    assert _group_row(pg, "q", "g") == (1, 1)
    got = drain(acker, "q", batch=10)
    assert [t.payload for t in got] == [2, 3]
    assert _group_row(pg, "q", "g") is None


def tq_state(tq: Any, task_id: Any) -> str:
    return str(tq.get_task("q", task_id).state)
