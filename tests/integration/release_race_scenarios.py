"""An ack (or a nack) and a release of the same lease at once: the ack's or nack's check
marks the lease (lua/lease_check.lua) and the release takes no marked lease, so the task
runs once. Run on a single Valkey (tests/integration/test_release.py) and on a cluster
(tests/cluster/test_release_races_on_cluster.py). A client that does this misuses the API
(a task is released only when it was not started); it must still not run a task twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.one_lease_scenarios import stalled
from tierq.core.batch_ids import batch_member
from tierq.errors import Unavailable


def plain_ack_statement(item: dict[str, Any], rows: str) -> str:
    """The store's method that commits a plain ack of ``item``'s task: ``rows``
    (``ack_delete`` or ``ack_delete_by_attempt``) for a row, ``end_batch_members`` for a
    batch member (logic/batch_rows.finish_plain)."""
    return "end_batch_members" if batch_member(item["id"]) else rows


def one_leased(tq: Any) -> tuple[Any, dict[str, Any]]:
    """A task enqueued and claimed: its enqueue outcome and its lease as an item."""
    [out] = tq.enqueue("q", [{"payload": "once"}])
    [task] = tq.claim("q")
    return out, {"id": task.id, "lease_token": task.lease_token}


def ack(make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that acks and releases one lease at once (a misuse: a task is released
    only when it was not started): the ack's check marks the lease (lua/lease_check.lua)
    and the release takes no marked lease, so the release is refused, the ack answered, and
    the acked task does not run again."""
    tq = make_tq()
    out, item = one_leased(tq)
    answers: list[Any] = []
    # the ack checked its lease; its delete waits until the release has run
    with stalled(tq.ctx.store, plain_ack_statement(item, "ack_delete"),
                 lambda: answers.append(tq.ack("q", [item]))):
        refused = tq.release("q", [item])
        assert refused.released == []
        assert [(r.id, r.reason) for r in refused.rejected] == [(out.id, "not_owner")]
    assert answers[0].acked == [out.id]
    assert tq.claim("q") == [], "a task ran again after its ack was answered"


def nack(make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a nack: the release is refused, the task is retried once, at its
    retry time, not at once as well."""
    tq = make_tq()
    out, item = one_leased(tq)
    answers: list[Any] = []
    nack = {**item, "error": "boom", "retry_in_seconds": 3600}
    with stalled(tq.ctx.store, "lease_outcomes", lambda: answers.append(tq.nack("q", [nack]))):
        refused = tq.release("q", [item])
        assert [(r.id, r.reason) for r in refused.rejected] == [(out.id, "not_owner")]
    assert answers[0].retried == [out.id]
    assert tq.claim("q") == [], "a nacked task ran again before its retry time"


def heartbeat_between(make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat between an ack's check and a release keeps the check's mark: the
    release still takes nothing."""
    tq = make_tq()
    out, item = one_leased(tq)
    answers: list[Any] = []
    with stalled(tq.ctx.store, plain_ack_statement(item, "ack_delete"),
                 lambda: answers.append(tq.ack("q", [item]))):
        [extended] = tq.heartbeat("q", [{**item, "extend_seconds": 60}]).extended
        assert extended.id == out.id
        assert tq.release("q", [item]).released == []
    assert answers[0].acked == [out.id]
    assert tq.claim("q") == []


def several_tenants(make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same race over an ack of two tenants (their checks sent in one pipeline; their
    rows deleted by the statement that pairs each with its tenant)."""
    tq = make_tq()
    made = tq.enqueue("q", [{"payload": t, "tenant": t} for t in ("acme", "globex")])
    taken = tq.claim("q", max=2)
    assert {t.tenant for t in taken} == {"acme", "globex"}
    items = [{"id": t.id, "lease_token": t.lease_token} for t in taken]
    answers: list[Any] = []
    with stalled(tq.ctx.store, plain_ack_statement(items[0], "ack_delete_by_attempt"),
                 lambda: answers.append(tq.ack("q", items))):
        refused = tq.release("q", items)
        assert refused.released == []
        assert sorted(r.reason for r in refused.rejected) == ["not_owner", "not_owner"]
    assert sorted(answers[0].acked) == sorted(o.id for o in made)
    assert tq.claim("q", max=2) == []


def ack_with_result(make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ack keeping a result checks its leases with their progress (one round trip):
    that check marks them too."""
    tq = make_tq()
    out, item = one_leased(tq)
    answers: list[Any] = []
    with stalled(tq.ctx.store, "ack_keep",
                 lambda: answers.append(tq.ack("q", [{**item, "result": {"n": 1}}]))):
        assert tq.release("q", [item]).released == []
    assert answers[0].acked == [out.id]
    assert tq.claim("q") == []


def failed_ack_then_retry(make_tq: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ack whose PostgreSQL step fails after its check leaves the lease marked: a
    release of it is refused (not_owner) and the ack's retry acks it."""
    tq = make_tq()
    out, item = one_leased(tq)
    statement = plain_ack_statement(item, "ack_delete")
    real = getattr(tq.ctx.store, statement)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise Unavailable("PostgreSQL is not answering")

    monkeypatch.setattr(tq.ctx.store, statement, failing)
    with pytest.raises(Unavailable):
        tq.ack("q", [item])
    monkeypatch.setattr(tq.ctx.store, statement, real)
    refused = tq.release("q", [item])
    assert [(r.id, r.reason) for r in refused.rejected] == [(out.id, "not_owner")]
    assert tq.ack("q", [item]).acked == [out.id]
    assert tq.claim("q") == []


RACES: dict[str, Callable[[Any, pytest.MonkeyPatch], None]] = {
    "ack": ack,
    "nack": nack,
    "heartbeat_between": heartbeat_between,
    "several_tenants": several_tenants,
    "ack_with_result": ack_with_result,
    "failed_ack_then_retry": failed_ack_then_retry,
}
