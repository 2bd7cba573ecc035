"""Enqueue, claim, ack on the warm path; keys (ignore / replace); validation writes nothing."""

from __future__ import annotations

import pytest

from tests.integration.helpers import count_rows, drain
from tests.support.every_task import EVERY_TASK
from tierq import InvalidInput, PayloadTooLarge, TaskIn
from tierq.dal.postgres import execute_text
from tierq.errors import NotFound


def test_enqueue_commits_in_postgres_before_returning(tq, pg):
    out = tq.enqueue("emails", [{"payload": {"n": i}} for i in range(10)])
    assert [o.outcome for o in out] == ["created"] * 10
    ids = {str(o.id) for o in out}
    rows = pg.execute(f"SELECT id::text, state FROM {EVERY_TASK}").fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert {r[1] for r in rows} == {"warm"}


@pytest.mark.parametrize("keyed", [False, True])
def test_every_field_reaches_postgres_as_given(tq, pg, keyed):
    """The batch goes to Postgres as one array per column: names, keys and payloads that
    look like array syntax, JSON or SQL NULL must arrive unchanged, in batch order."""
    from datetime import UTC, datetime, timedelta

    odd_keys = ["NULL", "null", '{a,"b"}', 'quote " and \\ backslash', "non-ascii é ✓",
                "del\u007f and /", " spaced ", "[1, 2]"]
    odd_payloads = [None, "NULL", '{"a": 1}', {"nested": [1.5, None, "\\"]}, [], 0, -1.25,
                    "é ✓ \u007f"]
    tenants = ["_", "NULL", "null", "t.1-x"]
    at = datetime.now(UTC) + timedelta(hours=1)
    tasks = [{"payload": odd_payloads[i % len(odd_payloads)], "tenant": tenants[i % 4],
              "priority": i % 10, "max_attempts": 1 + i % 7,
              "key": odd_keys[i % len(odd_keys)] + f"-{i}" if keyed and i % 3 else None,
              **({"run_at": at} if i % 5 == 0 else {})} for i in range(40)]
    out = tq.enqueue("cols", tasks)
    assert [o.outcome for o in out] == ["created"] * 40
    rows = {r[0]: r[1:] for r in pg.execute(
        "SELECT id::text, tenant, key, priority, payload, max_attempts, state, run_at, seq"
        " FROM tierq_tasks").fetchall()}
    seqs = []
    for task, outcome in zip(tasks, out, strict=True):
        tenant, key, priority, payload, max_attempts, state, run_at, seq = rows[str(outcome.id)]
        assert (tenant, key, priority, payload, max_attempts) == (
            task["tenant"], task["key"], task["priority"], task["payload"],
            task["max_attempts"])
        if "run_at" in task:
            assert state == "delayed" and abs((run_at - at).total_seconds()) < 1e-3
        else:
            assert state == "warm"
        seqs.append(seq)
    assert seqs == list(range(seqs[0], seqs[0] + 40))


def test_claim_returns_payload_and_lease_then_ack_deletes(tq, pg):
    created = tq.enqueue_one("emails", {"to": "a@example.com"}, key="k1", priority=3)
    [task] = tq.claim("emails", max=10, worker="w1")
    assert task.id == created.id
    assert task.payload == {"to": "a@example.com"}
    assert (task.key, task.priority, task.attempt, task.redelivered) == ("k1", 3, 1, False)
    assert task.lease_token.startswith("_~")
    view = tq.get_task("emails", task.id)
    assert view.state == "leased" and view.worker == "w1"
    result = tq.ack("emails", [{"id": task.id, "lease_token": task.lease_token}])
    assert result.acked == [task.id] and not result.rejected
    assert count_rows(pg) == 0
    with pytest.raises(NotFound):
        tq.get_task("emails", task.id)


def test_ack_with_result_keeps_the_task_done(tq):
    tq.enqueue_one("jobs", {"x": 1})
    [task] = tq.claim("jobs")
    tq.ack("jobs", [{"id": task.id, "lease_token": task.lease_token, "result": {"ok": True}}])
    view = tq.get_task("jobs", task.id)
    assert view.state == "done" and view.result == {"ok": True} and view.attempts == 1


def test_wrong_token_is_rejected_as_not_owner(tq):
    tq.enqueue_one("jobs", {})
    [task] = tq.claim("jobs")
    bad = tq.ack("jobs", [{"id": task.id, "lease_token": task.lease_token + "x"},
                          {"id": task.id, "lease_token": "garbage"}])
    assert not bad.acked
    assert [r.reason for r in bad.rejected] == ["not_owner", "not_owner"]
    good = tq.ack("jobs", [{"id": task.id, "lease_token": task.lease_token}])
    assert good.acked == [task.id]
    again = tq.ack("jobs", [{"id": task.id, "lease_token": task.lease_token}])
    assert again.rejected[0].reason == "not_owner"


def test_priority_first_then_fifo(tq):
    out = tq.enqueue("q", [{"payload": i, "priority": p} for i, p in
                           enumerate([0, 5, 9, 5, 0, 9])])
    order = [t.payload for t in drain(tq, "q", batch=2)]
    assert order == [2, 5, 1, 3, 0, 4]
    assert len(out) == 6


def test_ignore_keeps_the_task_where_it_is(tq, pg):
    first = tq.enqueue("q", [{"payload": "a", "key": "A"}, {"payload": "b", "key": "B"}])
    again = tq.enqueue("q", [{"payload": "a2", "key": "A"}])
    assert again[0].outcome == "ignored" and again[0].id == first[0].id
    order = [t.payload for t in drain(tq, "q")]
    assert order == ["a", "b"]  # not moved to the back, payload unchanged


def test_replace_updates_in_place_without_moving(tq, pg):
    first = tq.enqueue("q", [{"payload": "a", "key": "A"}, {"payload": "b", "key": "B"}])
    seq_before = pg.execute("SELECT seq FROM tierq_tasks WHERE key = 'A'").fetchone()[0]
    out = tq.enqueue("q", [{"payload": "a2", "key": "A", "on_conflict": "replace"}])
    assert out[0].outcome == "updated" and out[0].id == first[0].id
    seq_after = pg.execute("SELECT seq FROM tierq_tasks WHERE key = 'A'").fetchone()[0]
    assert seq_after == seq_before
    same = tq.enqueue("q", [{"payload": "a2", "key": "A", "on_conflict": "replace"}])
    assert same[0].outcome == "ignored"  # identical content: nothing to update
    order = [t.payload for t in drain(tq, "q")]
    assert order == ["a2", "b"]


def test_replace_of_a_cold_task_keeps_its_place(make_tq, pg):
    tq = make_tq(warm_max=2)
    tq.enqueue("q", [{"payload": i, "key": f"k{i}"} for i in range(5)])
    out = tq.enqueue("q", [{"payload": "three", "key": "k3", "on_conflict": "replace"}])
    assert out[0].outcome == "updated" and out[0].state == "cold"
    order = [t.payload for t in drain(tq, "q", batch=1)]
    assert order == [0, 1, 2, "three", 4]


def test_replace_into_the_future_makes_a_ready_task_delayed(tq):
    tq.enqueue("q", [{"payload": "a", "key": "A"}, {"payload": "b", "key": "B"}])
    out = tq.enqueue("q", [{"payload": "a", "key": "A", "delay_seconds": 60,
                            "on_conflict": "replace"}])
    assert out[0].state == "delayed"
    assert [t.payload for t in drain(tq, "q")] == ["b"]
    tq.ctx.clock.advance(61)
    tq.run_delayed_mover()
    assert [t.payload for t in drain(tq, "q")] == ["a"]


def test_duplicate_keys_inside_one_request(tq):
    out = tq.enqueue("q", [{"payload": 1, "key": "K"}, {"payload": 2, "key": "K"},
                           {"payload": 3, "key": "K", "on_conflict": "replace"}])
    assert [o.outcome for o in out] == ["created", "ignored", "updated"]
    assert len({o.id for o in out}) == 1
    assert [t.payload for t in drain(tq, "q")] == [3]


def test_a_key_is_free_again_once_the_task_finished(tq):
    a = tq.enqueue_one("q", 1, key="K")
    drain(tq, "q")
    b = tq.enqueue_one("q", 2, key="K")
    assert b.outcome == "created" and b.id != a.id


def test_keys_are_per_tenant(tq):
    out = tq.enqueue("q", [{"payload": 1, "key": "K", "tenant": "a"},
                           {"payload": 2, "key": "K", "tenant": "b"}])
    assert [o.outcome for o in out] == ["created", "created"]


@pytest.mark.parametrize("bad", [
    {"payload": 1, "priority": 10},
    {"payload": 1, "priority": -1},
    {"payload": 1, "tenant": "has space"},
    {"payload": 1, "tenant": "a|b"},
    {"payload": 1, "delay_seconds": -1},
    {"payload": 1, "delay_seconds": 10 ** 9},
    {"payload": 1, "max_attempts": 0},
    {"payload": 1, "on_conflict": "overwrite"},
    {"payload": 1, "unknown_field": True},
    {"payload": 1, "delay_seconds": 5, "run_at": "2030-01-01T00:00:00Z"},
    {"priority": 1},
])
def test_invalid_task_fields_are_refused_before_any_write(tq, pg, bad):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        tq.enqueue("q", [{"payload": "fine"}, bad])
    assert count_rows(pg) == 0


def test_oversized_payload_is_refused_and_nothing_written(make_tq, pg):
    tq = make_tq(max_payload_bytes=1024)
    with pytest.raises(PayloadTooLarge) as err:
        tq.enqueue("q", [{"payload": "ok"}, {"payload": "x" * 2000}])
    assert "tasks[1].payload" in err.value.message
    assert count_rows(pg) == 0


def test_nul_characters_and_far_schedules_are_refused(tq, pg):
    with pytest.raises(InvalidInput, match="payload"):
        tq.enqueue("q", [TaskIn(payload={"s": "a\x00b"})])
    with pytest.raises(InvalidInput, match=r"tasks\[1\]\.payload"):
        tq.enqueue("q", [TaskIn(payload=1), TaskIn(payload={"key \x00": 1})])
    with pytest.raises(InvalidInput, match="payload"):
        tq.enqueue("q", [TaskIn(payload="backslash then NUL: \\\x00")])
    with pytest.raises(InvalidInput, match="run_at"):
        tq.enqueue("q", [TaskIn(payload=1, run_at="2999-01-01T00:00:00Z")])
    with pytest.raises(InvalidInput, match="at most 500"):
        tq.enqueue("q", [TaskIn(payload=i) for i in range(501)])
    assert count_rows(pg) == 0


def test_the_text_of_a_nul_escape_is_not_a_nul(tq):
    """A payload may hold the six characters \\u0000 (a regular expression, source code):
    JSON text writes them with the backslash escaped, which is not the NUL escape."""
    text = {"pattern": "\\u0000", "path": "C:\\\\u0000", "\\u0000 key": "x"}
    tq.enqueue("q", [TaskIn(payload=text)])
    [task] = tq.claim("q")
    assert task.payload == text


def test_a_failing_batch_insert_writes_nothing(tq, pg):
    """Invariant 6: one statement per batch, so a row the database refuses takes the whole
    batch with it."""
    import psycopg

    from tierq.logic.context import to_datetime
    from tierq.logic.enqueue import Prepared, row_columns

    now = to_datetime(tq.ctx.now())
    rows = [Prepared(0, "018f0000-0000-7000-8000-000000000001", "_", None, 1, b"1", False,
                     0.0, 3, "ignore", True, "cold"),
            Prepared(1, "018f0000-0000-7000-8000-000000000002", "_", None, 12, b"2", False,
                     0.0, 3, "ignore", True, "cold")]
    with pytest.raises(psycopg.errors.CheckViolation):
        tq.ctx.store.insert_tasks("q", now, row_columns(rows, keyed=True))
    assert count_rows(pg) == 0


def test_paused_queue_hands_out_nothing_until_resumed(tq):
    tq.enqueue_one("q", 1)
    tq.pause("q")
    assert tq.claim("q", max=5) == []
    tq.resume("q")
    assert len(tq.claim("q", max=5)) == 1


def test_cancel_removes_a_task_from_both_tiers(tq, valkey, pg):
    a = tq.enqueue_one("q", "a")
    b = tq.enqueue_one("q", "b")
    tq.cancel_task("q", a.id)
    with pytest.raises(NotFound):
        tq.cancel_task("q", a.id)
    assert [t.payload for t in drain(tq, "q")] == ["b"]
    assert b.outcome == "created" and count_rows(pg) == 0


def test_a_delete_naming_another_tenant_changes_nothing(tq, valkey, pg):
    """The tenant is checked before the task leaves its line, and again by the statement
    that deletes: another tenant's delete is NotFound, the task stays in both tiers."""
    a = tq.enqueue_one("q", "a", tenant="acme")
    with pytest.raises(NotFound):
        tq.cancel_task("q", a.id, tenant="evil")
    assert count_rows(pg) == 1
    assert [t.payload for t in drain(tq, "q")] == ["a"]
    b = tq.enqueue_one("q", "b", tenant="acme")
    assert tq.cancel_task("q", b.id, tenant="acme").id == b.id
    assert count_rows(pg) == 0


def test_the_delete_statement_checks_the_tenant_itself(tq, pg):
    a = tq.enqueue_one("q", "a", tenant="acme")
    assert tq.ctx.store.cancel_task("q", a.id, "evil") is None
    assert count_rows(pg) == 1
    row = tq.ctx.store.cancel_task("q", a.id, "acme")
    assert row is not None and row.tenant == "acme"


def test_cancel_of_a_leased_task_rejects_its_ack(tq):
    tq.enqueue_one("q", "a")
    [task] = tq.claim("q")
    tq.cancel_task("q", task.id)
    result = tq.ack("q", [{"id": task.id, "lease_token": task.lease_token}])
    assert not result.acked and result.rejected[0].reason == "not_owner"


def test_scripts_reload_after_script_flush(tq, valkey):
    tq.enqueue_one("q", 1)
    valkey.script_flush()
    assert len(tq.claim("q")) == 1  # EVALSHA → NOSCRIPT → loaded again


def test_acks_wait_for_the_flush_unless_told_otherwise(make_tq):
    strict = make_tq()
    strict.enqueue_one("s", 1)
    [task] = strict.claim("s")
    assert strict.ack("s", [{"id": task.id, "lease_token": task.lease_token}]).acked
    assert strict.db._relaxed is None  # the relaxed pool was never opened
    relaxed = make_tq(ack_synchronous_commit=False)
    relaxed.enqueue_one("s", 2)
    [task] = relaxed.claim("s")
    assert relaxed.ack("s", [{"id": task.id, "lease_token": task.lease_token}]).acked
    # only the relaxed pool's connections commit without waiting, never by a startup option
    # (RDS Proxy refuses them): this engine's connections are direct, so the relaxed pool
    # sets it on each of its sessions (behind a proxy, SET LOCAL per transaction:
    # tests/integration/test_database_timeouts.py)
    show = "SHOW synchronous_commit"
    with relaxed.db.connection(relaxed=True) as conn:
        assert "options" not in conn.info.get_parameters()
        assert execute_text(conn, show).fetchone()["synchronous_commit"] == "off"
        assert conn.execute(show).fetchone()["synchronous_commit"] == "off"
    with relaxed.db.connection() as conn:
        assert execute_text(conn, show).fetchone()["synchronous_commit"] == "on"
        assert conn.execute(show).fetchone()["synchronous_commit"] == "on"


def test_a_byte_budget_caps_a_claim_and_the_rest_keep_their_places(tq):
    big = "x" * 100_000
    tq.enqueue("b", [{"payload": {"n": i, "blob": big}} for i in range(5)])
    first = tq.claim("b", max=5, max_bytes=250_000)
    assert [t.payload["n"] for t in first] == [0, 1]
    tiny = tq.claim("b", max=5, max_bytes=10)  # the first task always comes
    assert [t.payload["n"] for t in tiny] == [2]
    rest = tq.claim("b", max=5)
    assert [t.payload["n"] for t in rest] == [3, 4]


def test_a_byte_budget_spans_tenants(tq):
    big = "y" * 100_000
    tq.enqueue("b", [{"payload": {"t": t, "blob": big}, "tenant": t} for t in ("a", "b", "c")])
    got = tq.claim("b", max=9, max_bytes=150_000)
    assert len(got) == 1
    assert len(tq.claim("b", max=9)) == 2


def test_a_batch_takes_consecutive_places_in_its_own_order_with_or_without_keys(tq, pg):
    keyless = tq.enqueue("q", [{"payload": i} for i in range(300)])
    keyed = tq.enqueue("q", [{"payload": i, "key": f"k{i}" if i % 2 else None}
                             for i in range(300)])
    seq_of = dict(pg.execute(f"SELECT id, seq FROM {EVERY_TASK}").fetchall())
    for batch in (keyless, keyed):
        seqs = [seq_of[o.id] for o in batch]
        assert seqs == list(range(seqs[0], seqs[0] + len(batch)))  # no gaps, batch order
    assert max(seq_of[o.id] for o in keyless) < min(seq_of[o.id] for o in keyed)
    # a task made ready again takes a place after both batches (the back of the line)
    [task] = tq.claim("q", max=1)
    tq.nack("q", [{"id": task.id, "lease_token": task.lease_token, "retry_in_seconds": 0}])
    assert pg.execute(f"SELECT seq FROM {EVERY_TASK} WHERE id = %s",
                      (task.id,)).fetchone()[0] > max(seq_of.values())


def test_claimed_tasks_can_be_acked_as_they_are(tq, pg):
    tq.enqueue("q", [{"payload": i} for i in range(3)])
    a, b, c = tq.claim("q", max=3)
    out = tq.ack("q", [a, {"id": b.id, "lease_token": b.lease_token, "result": {"ok": 1}}, c])
    assert sorted(out.acked) == sorted([a.id, b.id, c.id]) and not out.rejected
    assert pg.execute("SELECT id, state FROM tierq_tasks").fetchall() == [(b.id, "done")]
    again = tq.ack("q", [a])
    assert [r.reason for r in again.rejected] == ["not_owner"]


@pytest.mark.parametrize("refill", ["by the claims", "by the mover"])
def test_the_data_hash_stays_a_hashtable_however_small(make_tq, valkey, refill):
    """A small hash would be a listpack, where every field is found by scanning: the push
    keeps one long field in it (lua/push_ready.lua). That field is never handed out, and the
    hash stays a hashtable while the warm set empties and fills again."""
    tq = make_tq(warm_max=3)
    data = "tq:{enc|_}:data"
    tq.enqueue("enc", [{"payload": i} for i in range(5)])  # 3 warm, 2 cold
    assert valkey.object("encoding", data) == b"hashtable"
    assert valkey.hlen(data) == 3 + 1
    seen = []
    for _ in range(3):
        got = tq.claim("enc", max=10)
        seen.extend(t.payload for t in got)
        tq.ack("enc", got)
        if refill == "by the mover":
            tq.run_cold_to_warm()
        assert valkey.object("encoding", data) == b"hashtable"
    seen.extend(t.payload for t in drain(tq, "enc"))
    assert sorted(seen) == list(range(5))
    assert valkey.hkeys(data) == [b"~encoding"]


def test_a_leased_task_replaced_into_the_future_frees_its_place(make_tq):
    """A replace that reschedules a leased task ends its lease: the queue-wide reservation
    (max_leased) that lease held is given back at once, as a cancel gives it back."""
    tq = make_tq(lease_seconds=300)
    tq.put_queue("rf", {"max_leased": 1})
    [first] = tq.enqueue("rf", [{"payload": 1, "key": "K"}])
    [task] = tq.claim("rf")
    assert task.id == first.id
    later = tq.ctx.now() + 3600
    [out] = tq.enqueue("rf", [{"payload": 2, "key": "K", "on_conflict": "replace",
                               "run_at": later}])
    assert (out.outcome, out.state) == ("updated", "delayed")
    [second] = tq.enqueue("rf", [{"payload": 3}])
    [task] = tq.claim("rf")  # the rescheduled lease's place is free
    assert task.id == second.id


_ROW = ("SELECT id::text, tenant, key, priority, payload, state, max_attempts, grp,"
        " timeout_seconds, trace, attempts, run_at, run_at_initially, ready_since,"
        " state_since, created_at, seq FROM tierq_tasks WHERE queue = %s ORDER BY seq")


@pytest.mark.rows_layout  # (the row statements it compares: a batch row takes neither)
@pytest.mark.parametrize("shape", ["defaults", "tenants and priorities", "delayed",
                                   "attempts and time limit", "past run_at", "keys on some",
                                   "waiting"])
def test_a_uniform_batch_writes_the_rows_of_the_general_insert(tq, pg, valkey, monkeypatch,
                                                               shape):
    """A batch whose tasks share their state, run_at, attempts and time limit goes in by
    insert_tasks_uniform (with keys, insert_tasks_uniform_keyed): its rows and outcomes are
    those of the general statement, column by column at one moment, and each warm task's
    place in Valkey is its row's."""
    import time
    from datetime import UTC, datetime, timedelta

    from tierq.core.ordering import place
    from tierq.dal.warm_tier import PairKeys
    from tierq.logic import enqueue as enqueue_logic

    moment = time.time()
    monkeypatch.setattr(tq.ctx.clock, "now", lambda: moment)
    parent = str(tq.enqueue("parents", [{"payload": 0, "tenant": "t0"}])[0].id)
    extra = {"defaults": {}, "tenants and priorities": {}, "keys on some": {},
             "delayed": {"run_at": datetime.now(UTC) + timedelta(hours=1)},
             "attempts and time limit": {"max_attempts": 7, "timeout_seconds": 30},
             "past run_at": {"run_at": datetime.now(UTC) - timedelta(hours=1)},
             "waiting": {"after": [parent], "tenant": "t0"}}[shape]
    varied = shape in ("tenants and priorities", "keys on some")
    keyed = shape == "keys on some"
    tasks = [{"payload": {"n": i}, **extra,
              **({"tenant": f"t{i % 3}", "priority": i % 4} if varied else {}),
              **({"key": f"k{i}"} if keyed and i % 4 == 0 else {})}
             for i in range(12)]
    general_name = "insert_tasks" if keyed else "insert_tasks_keyless"
    uniform_name = "insert_tasks_uniform_keyed" if keyed else "insert_tasks_uniform"
    calls: list[str] = []
    for name in (uniform_name, general_name):
        monkeypatch.setattr(tq.ctx.store, name, _spied(calls, name, getattr(tq.ctx.store, name)))
    outcomes = {}
    for queue in ("uniform", "general"):
        if queue == "general":
            monkeypatch.setattr(enqueue_logic, "uniform_columns", lambda batch, keyed: None)
        if keyed:  # (a live task holds the key of the batch's first keyed task)
            tq.enqueue(queue, [{"payload": "live", "tenant": "t0", "key": "k0"}])
        outcomes[queue] = [(o.outcome, o.state, o.tenant, o.key)
                           for o in tq.enqueue(queue, tasks)]
    assert calls == [uniform_name] * (1 + keyed) + [general_name] * (1 + keyed)
    assert outcomes["uniform"] == outcomes["general"]
    assert [o[0] for o in outcomes["uniform"]].count("created") == 12 - keyed
    rows = {q: pg.execute(_ROW, (q,)).fetchall() for q in ("uniform", "general")}
    assert len(rows["uniform"]) == len(rows["general"]) == 12  # (keyed: the live one, 11)
    # the same rows, exactly, but their ids and places in line
    assert [r[1:-1] for r in rows["uniform"]] == [r[1:-1] for r in rows["general"]]
    for queue in ("uniform", "general"):
        batch = rows[queue][keyed:]  # the batch's rows in batch order (its first refused)
        seqs = [r[-1] for r in batch]
        assert seqs == list(range(seqs[0], seqs[0] + 12 - keyed))
        # each warm task's place is its row's (the seqs the insert answered with)
        for task_id, tenant, priority, seq in [(r[0], r[1], r[3], r[-1]) for r in batch
                                               if r[5] == "warm"]:
            score = valkey.zscore(PairKeys.of(queue, tenant).ready, task_id)
            assert score == place(priority, seq, task_id)[0], (queue, task_id)


def _spied(calls: list[str], name: str, call: object) -> object:
    def spied(*args: object, **kwargs: object) -> object:
        calls.append(name)
        return call(*args, **kwargs)  # type: ignore[operator]
    return spied


def test_a_batch_that_differs_goes_by_the_general_insert(tq, monkeypatch):
    calls: list[str] = []
    for name in ("insert_tasks_uniform", "insert_tasks_keyless"):
        monkeypatch.setattr(tq.ctx.store, name, _spied(calls, name, getattr(tq.ctx.store, name)))
    tq.enqueue("mixed", [{"payload": 1}, {"payload": 2, "max_attempts": 9}])
    tq.enqueue("mixed", [{"payload": 1}, {"payload": 2, "timeout_seconds": 5}])
    tq.enqueue("mixed", [{"payload": 1}, {"payload": 2, "group": "g"}])
    assert calls == ["insert_tasks_keyless"] * 3


def test_a_keyed_batch_of_big_payloads_goes_by_the_general_insert(tq, monkeypatch):
    """Past UNIFORM_KEYED_MAX_BYTES of payloads, the keyed batch takes insert_tasks (the
    uniform statement would keep its rows once more, spilling to a temporary file)."""
    from tierq.logic.enqueue import UNIFORM_KEYED_MAX_BYTES

    calls: list[str] = []
    for name in ("insert_tasks_uniform_keyed", "insert_tasks"):
        monkeypatch.setattr(tq.ctx.store, name, _spied(calls, name, getattr(tq.ctx.store, name)))
    size = 200_000
    count = UNIFORM_KEYED_MAX_BYTES // size + 1
    tq.enqueue("big", [{"payload": "x" * size, "key": f"k{i}"} for i in range(count)])
    tq.enqueue("big", [{"payload": "x" * size, "key": "small"}])
    assert calls == ["insert_tasks", "insert_tasks_uniform_keyed"]
