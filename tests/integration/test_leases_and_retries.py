"""Delays, lease expiry, nack with backoff, heartbeats, dead letters and replay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.helpers import count_rows, count_state, drain
from tierq.dal.warm_tier import PairKeys
from tierq.maintenance import reaper


def test_a_delayed_task_is_claimable_only_after_run_at(tq, pg):
    out = tq.enqueue_one("d", "later", delay_seconds=30)
    assert out.state == "delayed"
    assert tq.claim("d", max=5) == []
    tq.ctx.clock.advance(29)
    assert tq.run_delayed_mover().moved == 0
    assert tq.claim("d", max=5) == []
    tq.ctx.clock.advance(2)
    assert tq.run_delayed_mover().moved == 1
    [task] = tq.claim("d", max=5)
    assert task.payload == "later"


def test_run_at_in_the_past_is_ready_at_once(tq):
    past = datetime.now(UTC) - timedelta(hours=1)
    assert tq.enqueue_one("d", 1, run_at=past).state == "warm"


def test_delayed_mover_puts_due_tasks_at_the_back_of_their_line(tq):
    tq.enqueue_one("d", "delayed-first", delay_seconds=5)
    tq.enqueue("d", [{"payload": "ready-1"}, {"payload": "ready-2"}])
    tq.ctx.clock.advance(6)
    tq.run_delayed_mover()
    tq.enqueue_one("d", "ready-3")
    assert [t.payload for t in drain(tq, "d")] == ["ready-1", "ready-2", "delayed-first",
                                                  "ready-3"]


def test_delayed_mover_cost_follows_what_is_due(tq):
    tq.enqueue("d", [{"payload": i, "delay_seconds": 3600} for i in range(300)])
    tq.enqueue("d", [{"payload": "soon", "delay_seconds": 1}])
    tq.ctx.clock.advance(2)
    summary = tq.run_delayed_mover()
    assert summary.moved == 1 and summary.batches == 1


def test_expired_lease_is_redelivered_at_the_back_with_attempt_plus_one(make_tq, pg):
    tq = make_tq(lease_seconds=30, max_attempts=3)
    tq.enqueue("l", [{"payload": "a"}, {"payload": "b"}, {"payload": "c"}])
    [first] = tq.claim("l", max=1)
    assert first.payload == "a" and first.attempt == 1
    tq.ctx.clock.advance(31)  # no heartbeat: the lease expires
    late = tq.ack("l", [{"id": first.id, "lease_token": first.lease_token}])
    assert late.rejected[0].reason == "not_owner"
    summary = tq.run_reaper()
    assert summary.expired == 1 and summary.requeued == 1
    order = drain(tq, "l", batch=1)
    assert [t.payload for t in order] == ["b", "c", "a"]  # codeQ: to the back, not the front
    assert order[-1].attempt == 2 and order[-1].redelivered


def test_lease_expiry_at_max_attempts_dead_letters_with_last_error(make_tq, pg):
    tq = make_tq(lease_seconds=10, max_attempts=2)
    created = tq.enqueue_one("l", "doomed")
    for attempt in (1, 2):
        [task] = tq.claim("l")
        assert task.attempt == attempt
        tq.ctx.clock.advance(11)
        tq.run_reaper()
    assert tq.claim("l") == []
    view = tq.get_task("l", created.id)
    assert view.state == "dead" and view.attempts == 2
    assert "lease expired" in (view.last_error or "")
    [dead] = tq.dlq_list("l")
    assert dead.id == created.id
    replayed, skipped = tq.dlq_replay("l", ids=[created.id])
    assert replayed == [created.id] and skipped == []
    [again] = tq.claim("l")
    assert again.id == created.id and again.attempt == 1
    assert tq.dlq_list("l") == []


def test_heartbeat_keeps_a_long_task_leased(make_tq):
    tq = make_tq(lease_seconds=10)
    tq.enqueue_one("h", "long")
    [task] = tq.claim("h")
    for _ in range(5):
        tq.ctx.clock.advance(8)
        beat = tq.heartbeat("h", [{"id": task.id, "lease_token": task.lease_token}])
        assert len(beat.extended) == 1
        assert tq.run_reaper().expired == 0
    assert tq.ack("h", [{"id": task.id, "lease_token": task.lease_token}]).acked == [task.id]
    stale = tq.heartbeat("h", [{"id": task.id, "lease_token": task.lease_token}])
    assert stale.rejected[0].reason == "not_owner"


def test_heartbeat_after_expiry_is_refused(make_tq):
    tq = make_tq(lease_seconds=5)
    tq.enqueue_one("h", 1)
    [task] = tq.claim("h")
    tq.ctx.clock.advance(6)
    beat = tq.heartbeat("h", [{"id": task.id, "lease_token": task.lease_token}])
    assert not beat.extended and beat.rejected[0].reason == "not_owner"


def test_nack_retries_with_backoff_then_dead_letters(make_tq, pg):
    tq = make_tq(max_attempts=3)
    tq.put_queue("n", {"backoff": {"kind": "exponential", "base_seconds": 10,
                                   "cap_seconds": 100, "jitter": 0}})
    created = tq.enqueue_one("n", "flaky")
    [task] = tq.claim("n")
    result = tq.nack("n", [{"id": task.id, "lease_token": task.lease_token, "error": "boom 1"}])
    assert result.retried == [task.id]
    assert tq.claim("n") == []
    tq.ctx.clock.advance(9)
    tq.run_delayed_mover()
    assert tq.claim("n") == []
    tq.ctx.clock.advance(2)  # 10 s after the first failure
    tq.run_delayed_mover()
    [task] = tq.claim("n")
    assert task.attempt == 2
    tq.nack("n", [{"id": task.id, "lease_token": task.lease_token, "error": "boom 2"}])
    tq.ctx.clock.advance(21)  # 20 s after the second
    tq.run_delayed_mover()
    [task] = tq.claim("n")
    assert task.attempt == 3
    result = tq.nack("n", [{"id": task.id, "lease_token": task.lease_token, "error": "boom 3"}])
    assert result.dead == [task.id]
    view = tq.get_task("n", created.id)
    assert (view.state, view.attempts, view.last_error) == ("dead", 3, "boom 3")


def test_nack_with_retry_in_zero_requeues_at_once_at_the_back(tq):
    tq.enqueue("n", [{"payload": "a"}, {"payload": "b"}])
    [a] = tq.claim("n")
    tq.nack("n", [{"id": a.id, "lease_token": a.lease_token, "retry_in_seconds": 0}])
    assert [t.payload for t in drain(tq, "n")] == ["b", "a"]


def test_explicit_dead_letter_and_purge(tq, pg):
    tq.enqueue("n", [{"payload": i} for i in range(3)])
    got = tq.claim("n", max=3)
    result = tq.nack("n", [{"id": t.id, "lease_token": t.lease_token, "error": "bad input",
                            "dead": True} for t in got])
    assert len(result.dead) == 3
    assert count_state(pg, "n", "dead") == 3
    assert len(tq.dlq_purge("n", ids=[got[0].id])) == 1
    replayed, _ = tq.dlq_replay("n", all_dead=True)
    assert len(replayed) == 2
    assert sorted(t.payload for t in drain(tq, "n")) == [1, 2]


def test_replay_skips_a_dead_task_whose_key_is_live_again(tq):
    created = tq.enqueue_one("n", "old", key="K")
    [task] = tq.claim("n")
    tq.nack("n", [{"id": task.id, "lease_token": task.lease_token, "dead": True}])
    tq.enqueue_one("n", "new", key="K")
    replayed, skipped = tq.dlq_replay("n", ids=[created.id])
    assert replayed == [] and skipped == [created.id]


def test_retention_purges_finished_rows(make_tq, pg):
    tq = make_tq(retention_seconds=60)
    tq.enqueue("p", [{"payload": 1}, {"payload": 2}])
    a, b = tq.claim("p", max=2)
    tq.ack("p", [{"id": a.id, "lease_token": a.lease_token, "result": "kept"}])
    tq.nack("p", [{"id": b.id, "lease_token": b.lease_token, "dead": True}])
    assert tq.run_reaper().purged == 0
    tq.ctx.clock.advance(61)
    assert tq.run_reaper().purged == 2
    assert count_rows(pg) == 0


def test_a_token_is_only_good_for_the_task_and_attempt_it_was_issued_for(make_tq):
    tq = make_tq(lease_seconds=30)
    tq.enqueue("t", [{"payload": "a"}, {"payload": "b"}])
    a, b = tq.claim("t", max=2)
    swapped = tq.ack("t", [{"id": a.id, "lease_token": b.lease_token},
                           {"id": b.id, "lease_token": a.lease_token}])
    assert not swapped.acked and {r.reason for r in swapped.rejected} == {"not_owner"}
    # the same token with another attempt number names no lease either
    prefix, attempt, n = a.lease_token.rsplit("~", 2)
    forged = f"{prefix}~{int(attempt) + 1}~{n}"
    assert tq.ack("t", [{"id": a.id, "lease_token": forged}]).rejected[0].reason == "not_owner"
    assert tq.heartbeat("t", [{"id": a.id, "lease_token": forged}]).rejected
    # a lease that expired and was issued again has a new token: the old one drops nothing
    tq.ctx.clock.advance(31)
    tq.run_reaper()
    again = {t.id: t for t in tq.claim("t", max=2)}
    assert again[a.id].attempt == 2 and again[a.id].lease_token != a.lease_token
    assert tq.ack("t", [{"id": a.id, "lease_token": a.lease_token}]).rejected
    assert tq.get_task("t", a.id).state == "leased"
    done = tq.ack("t", [{"id": t.id, "lease_token": t.lease_token} for t in again.values()])
    assert sorted(done.acked) == sorted(again)


def claim_records(valkey, queue: str, tenant: str = "_") -> dict[str, str]:
    """The pair's claim records, prefix -> '<started>|<worker>' (their counts left out)."""
    from tierq.dal.warm_tier import PairKeys

    return {k.decode(): v.decode()
            for k, v in valkey.hgetall(PairKeys.of(queue, tenant).claims).items()
            if not k.endswith(b"#")}


def test_running_leases_show_worker_and_start_until_their_claims_last_lease_ends(
        make_tq, valkey):
    tq = make_tq(lease_seconds=30)
    tq.enqueue("r", [{"payload": i} for i in range(3)])
    before = tq.ctx.now()
    first = tq.claim("r", max=2, worker="w-1")
    [second] = tq.claim("r", max=1, worker="w-2")
    running = {lease.id: lease for lease in tq.running("r")}
    assert {str(k): v.worker for k, v in running.items()} == {
        str(first[0].id): "w-1", str(first[1].id): "w-1", str(second.id): "w-2"}
    assert all(abs(v.started_at.timestamp() - before) < 5 for v in running.values())
    assert tq.get_task("r", second.id).worker == "w-2"
    assert len(claim_records(valkey, "r")) == 2
    tq.ack("r", [{"id": first[0].id, "lease_token": first[0].lease_token}])
    assert len(claim_records(valkey, "r")) == 2  # the first claim still holds a lease
    tq.ack("r", [{"id": first[1].id, "lease_token": first[1].lease_token}])
    # its last lease ended: its record went with it, no reaper pass needed
    assert [v.split("|")[1] for v in claim_records(valkey, "r").values()] == ["w-2"]
    assert [(str(v.id), v.worker) for v in tq.running("r")] == [(str(second.id), "w-2")]
    tq.ack("r", [{"id": second.id, "lease_token": second.lease_token}])
    assert valkey.hlen(PairKeys.of("r", "_").claims) == 0 and tq.running("r") == []


def test_a_claims_record_goes_with_its_last_lease_however_that_ends(make_tq, valkey):
    """Ack, nack, release, cancel and expiry each end a lease; the claim's record is kept
    while any of its leases is, and none is left after, without any read of the whole
    pair (the records are counted per claim)."""
    tq = make_tq(lease_seconds=10)
    tq.enqueue("r", [{"payload": i} for i in range(5)])
    held = tq.claim("r", max=5, worker="w")
    assert len(claim_records(valkey, "r")) == 1
    tq.ack("r", [{"id": held[0].id, "lease_token": held[0].lease_token}])
    tq.nack("r", [{"id": held[1].id, "lease_token": held[1].lease_token}])
    tq.release("r", [{"id": held[2].id, "lease_token": held[2].lease_token}])
    tq.cancel_task("r", held[3].id)
    assert len(claim_records(valkey, "r")) == 1  # one lease left
    tq.ctx.clock.advance(11)
    assert tq.run_reaper().expired == 1
    assert valkey.hlen(PairKeys.of("r", "_").claims) == 0
    assert valkey.hkeys(PairKeys.of("r", "_").lease_of) == [b"~encoding"]


def test_a_reaper_pass_that_listed_a_lease_late_changes_nothing(make_tq, pg):
    """Two reaper passes at once (overlapping scheduled runs) can both list one expired
    lease. Whichever records it second must find that attempt already recorded: else it
    would put the task back in line while its next lease is running (a double dispatch)
    and count the expiry twice."""
    tq = make_tq(lease_seconds=10, max_attempts=5)
    created = tq.enqueue_one("r", "once")
    [first] = tq.claim("r")
    tq.ctx.clock.advance(11)
    listed_by_the_slower_pass = tq.ctx.warm.expired(
        "r", first.tenant, now_ms=int(tq.ctx.now() * 1000),
        limit=reaper.ReaperConfig().expired_batch)
    assert [e[0] for e in listed_by_the_slower_pass] == [str(created.id)]
    assert tq.run_reaper().expired == 1  # the faster pass
    [second] = tq.claim("r")
    assert second.id == created.id and second.attempt == 2

    late = reaper.ReaperSummary()
    reaper.record_expired(tq.ctx, "r", first.tenant, listed_by_the_slower_pass, late)
    assert late.expired == 0 and late.requeued == 0
    assert tq.claim("r") == []  # not in line again while the second lease holds
    assert count_state(pg, "r", "warm") == 1
    assert tq.get_task("r", created.id).attempts == 1
    acked = tq.ack("r", [{"id": second.id, "lease_token": second.lease_token}])
    assert acked.acked == [second.id]


@pytest.mark.parametrize("statement",
                         ["ack_delete", "ack_delete_by_attempt", "end_batch_members"])
def test_an_ack_that_reaches_postgres_after_its_lease_expired_is_refused(make_tq, pg,
                                                                         statement):
    """An ack checks its lease in Valkey, then deletes the row. If the reaper expires that
    lease in between (the ack was checked just before the deadline), the task is already in
    line again for its next attempt: deleting its row then would leave it in line without
    one, delivered again after an accepted ack. The delete only takes an attempt not
    recorded yet, so the ack is refused and the task runs again (at least once). A batch
    member's ack (``end_batch_members``) finds the row its expiry moved it out into."""
    tq = make_tq(lease_seconds=10, max_attempts=5)
    created = tq.enqueue_one("r", "once")
    [first] = tq.claim("r")
    tq.ctx.clock.advance(11)
    assert tq.run_reaper().requeued == 1
    # the late ack's own statement, as leases.ack sends it after its lease check passed
    if statement == "ack_delete":
        deleted = tq.ctx.store.ack_delete("r", [str(first.id)], ["_"], first.attempt)
    elif statement == "end_batch_members":
        deleted = tq.ctx.store.end_batch_members("r", [str(first.id)], ["_"],
                                                 [first.attempt])
    else:
        deleted = tq.ctx.store.ack_delete_by_attempt("r", [str(first.id)], ["_"],
                                                     [first.attempt])
    assert deleted == []
    [second] = tq.claim("r")
    assert second.id == created.id and second.attempt == 2
    acked = tq.ack("r", [{"id": second.id, "lease_token": second.lease_token}])
    assert acked.acked == [second.id]
    assert count_state(pg, "r", "warm") == 0


def test_one_ack_for_leases_of_different_attempts(make_tq, pg):
    tq = make_tq(lease_seconds=10, max_attempts=5)
    retried = tq.enqueue_one("r", "retried")
    assert tq.claim("r")[0].attempt == 1
    tq.ctx.clock.advance(11)
    tq.run_reaper()
    fresh = tq.enqueue_one("r", "fresh")
    claimed = tq.claim("r", max=2)
    assert {(t.id, t.attempt) for t in claimed} == {(retried.id, 2), (fresh.id, 1)}
    acked = tq.ack("r", [{"id": t.id, "lease_token": t.lease_token} for t in claimed])
    assert sorted(map(str, acked.acked)) == sorted([str(retried.id), str(fresh.id)])
    assert acked.rejected == []
    assert count_state(pg, "r", "warm") == 0


def _statements_of_acks(tq, monkeypatch) -> list[tuple[str, int]]:
    """(statement, tenants) of each ack statement ``tq`` runs from now on."""
    calls: list[tuple[str, int]] = []
    for name in ("ack_delete", "ack_delete_by_attempt"):
        real = getattr(tq.ctx.store, name)

        def counted(queue, ids, tenants, *args, _name=name, _real=real, **kwargs):
            calls.append((_name, len(set(tenants))))
            return _real(queue, ids, tenants, *args, **kwargs)

        monkeypatch.setattr(tq.ctx.store, name, counted)
    return calls


@pytest.mark.rows_layout  # (the statements of rows; members: test_batch_rows.py)
def test_an_ack_pairs_rows_with_leases_only_over_tenants_or_attempts(make_tq, pg,
                                                                     monkeypatch):
    """Leases of one attempt and one tenant are deleted by ``ack_delete``, checked against
    that tenant; leases over several tenants (a caller allowed them all) or of several
    attempts by ``ack_delete_by_attempt``, each row paired with its own lease's tenant and
    attempt."""
    tq = make_tq(lease_seconds=10, max_attempts=5)
    made = tq.enqueue("r", [{"payload": t, "tenant": t} for t in ("acme", "globex")])
    claimed = tq.claim("r", max=2)
    assert {(t.tenant, t.attempt) for t in claimed} == {("acme", 1), ("globex", 1)}
    calls = _statements_of_acks(tq, monkeypatch)
    acked = tq.ack("r", [{"id": t.id, "lease_token": t.lease_token} for t in claimed])
    assert sorted(map(str, acked.acked)) == sorted(str(o.id) for o in made)
    assert calls == [("ack_delete_by_attempt", 2)]
    assert count_state(pg, "r", "warm") == 0
    # one tenant, one attempt: the set form
    tq.enqueue("r", [{"payload": n, "tenant": "acme"} for n in range(3)])
    calls.clear()
    acked = tq.ack("r", [{"id": t.id, "lease_token": t.lease_token}
                         for t in tq.claim("r", max=3)])
    assert len(acked.acked) == 3 and calls == [("ack_delete", 1)]
    # a second attempt beside a first, of one tenant: each row with its own
    retried = tq.enqueue("r", [{"payload": "again", "tenant": "acme"}])[0]
    assert tq.claim("r")[0].id == retried.id
    tq.ctx.clock.advance(11)
    tq.run_reaper()
    fresh = tq.enqueue("r", [{"payload": "fresh", "tenant": "acme"}])[0]
    claimed = tq.claim("r", max=2)
    assert {(t.id, t.attempt) for t in claimed} == {(retried.id, 2), (fresh.id, 1)}
    calls.clear()
    acked = tq.ack("r", [{"id": t.id, "lease_token": t.lease_token} for t in claimed])
    assert sorted(map(str, acked.acked)) == sorted([str(retried.id), str(fresh.id)])
    assert calls == [("ack_delete_by_attempt", 1)]
    assert count_state(pg, "r", "warm") == 0


def test_lease_outcomes_take_any_iterable_of_items(tq) -> None:
    """A generator of items is read once: every task in it is acked (or nacked), none
    lost to a first pass over it."""
    tq.enqueue("q", [{"payload": i} for i in range(6)])
    got = tq.claim("q", max=6)
    assert len(got) == 6
    assert len(tq.ack("q", (t for t in got[:3])).acked) == 3
    nacked = tq.nack("q", ({"id": t.id, "lease_token": t.lease_token, "error": "x"}
                           for t in got[3:]))
    assert len(nacked.retried) + len(nacked.dead) == 3 and not nacked.rejected, nacked
