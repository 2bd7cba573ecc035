"""The reliability accounting catches what it must: lost tasks, double dispatch within a
lease, deliveries after an ack — and does not blame a redelivery after expiry or a wipe."""

from __future__ import annotations

from tests.reliability.harness import analyze


def enq(n: int, task_id: str) -> dict[str, object]:
    return {"e": "enq", "n": n, "id": task_id}


def claim(task_id: str, n: int, t1: float, exp: float, worker: str = "w1") -> dict[str, object]:
    return {"e": "claim", "id": task_id, "n": n, "t1": t1, "exp": exp, "w": worker}


def test_a_clean_run_counts_acks_and_nothing_else() -> None:
    events = [enq(1, "a"), enq(2, "b"), claim("a", 1, 10.0, 40.0), claim("b", 2, 10.0, 40.0),
              {"e": "ack", "id": "a", "t": 10.5}, {"e": "ack", "id": "b", "t": 10.5}]
    report = analyze(events, [])
    assert (report.enqueued, report.acked, report.lost, report.duplicates) == (2, 2, [], 0)
    assert report.double_dispatch == []


def test_a_task_still_in_postgres_or_dead_is_lost() -> None:
    events = [enq(1, "a"), enq(2, "b"), enq(3, "c")]
    report = analyze(events, [("b", "warm", "2"), ("c", "dead", "3")])
    assert report.lost == [2, 3]
    assert (report.acked, report.stuck, report.dead) == (1, 1, 1)


def test_a_second_delivery_inside_the_first_lease_is_a_double_dispatch() -> None:
    events = [enq(1, "a"), claim("a", 1, 10.0, 40.0, "w1"), claim("a", 1, 39.9, 70.0, "w2")]
    report = analyze(events, [])
    assert len(report.double_dispatch) == 1
    assert report.duplicates == 1


def test_a_redelivery_after_expiry_is_a_duplicate_not_a_double_dispatch() -> None:
    events = [enq(1, "a"), claim("a", 1, 10.0, 40.0, "w1"), claim("a", 1, 40.2, 70.0, "w2"),
              {"e": "ack", "id": "a", "t": 41.0}]
    report = analyze(events, [])
    assert report.double_dispatch == []
    assert report.duplicates == 1 and report.lost == []


def test_a_wipe_ends_the_leases_taken_before_it_only() -> None:
    events = [enq(1, "a"), enq(2, "b"),
              claim("a", 1, 10.0, 40.0, "w1"), claim("a", 1, 20.0, 50.0, "w2"),  # wiped at 15
              claim("b", 2, 16.0, 46.0, "w1"), claim("b", 2, 20.0, 50.0, "w2")]  # after it
    report = analyze(events, [], wipes=[15.0])
    assert [d.split(":")[0] for d in report.double_dispatch] == ["b"]


def test_a_claim_sent_before_a_wipe_but_answered_after_it_ended_there() -> None:
    sent_before = {**claim("a", 1, 15.2, 45.0, "w1"), "t0": 14.9}  # answered by the old server
    events = [enq(1, "a"), sent_before, claim("a", 1, 20.0, 50.0, "w2")]
    assert analyze(events, [], wipes=[15.0]).double_dispatch == []
    sent_after = {**claim("b", 2, 15.2, 45.0, "w1"), "t0": 15.1}
    events = [enq(2, "b"), sent_after, claim("b", 2, 20.0, 50.0, "w2")]
    assert len(analyze(events, [], wipes=[15.0]).double_dispatch) == 1


def test_a_delivery_after_an_accepted_ack_is_flagged() -> None:
    events = [enq(1, "a"), claim("a", 1, 10.0, 12.0), {"e": "ack", "id": "a", "t": 10.5},
              claim("a", 1, 13.0, 15.0, "w2")]
    report = analyze(events, [])
    assert any("after its ack" in d for d in report.double_dispatch)


def test_an_ack_of_another_task_of_the_same_n_does_not_hide_a_loss() -> None:
    """A keyless enqueue retried after it committed but failed to answer makes a second
    task of its n (``b2``, never journaled as enqueued): its ack does not stand for the
    journaled task, still in PostgreSQL."""
    events = [enq(1, "a"), enq(2, "b"), claim("b2", 2, 10.0, 40.0),
              {"e": "ack", "id": "b2", "t": 10.5}]
    report = analyze(events, [("a", "warm", "1"), ("b", "warm", "2")])
    assert report.lost == [1, 2]
    report = analyze(events, [("a", "warm", "1")])  # (b acked too: only a is lost)
    assert report.lost == [1]
