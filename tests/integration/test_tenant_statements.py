"""Tenant isolation held by the statements themselves, not only by the checks made before
them (fail closed): each statement that reads or settles a task by id, given a tenant that
does not own the task, reads and writes nothing, on the real PostgreSQL and Valkey. The
checks made earlier (the lease's own in Valkey, the route's) are left out on purpose: the
statements are called as a caller that skipped them would call them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.every_task import EVERY_TASK
from tierq.engine import Tierq
from tierq.errors import InvalidInput, NotFound
from tierq.logic import groups, leases, payloads, tasks
from tierq.logic.context import to_datetime
from tierq.models import AckItem, ClaimedTask, NackItem, ReleaseItem

QUEUE = "q"


def row_of(pg: psycopg.Connection[Any], task_id: Any) -> tuple[Any, ...] | None:
    """The fields a settling statement writes, as they stand: a batch member still in its
    batch row reads as warm with none of them (moved out, as its row; ended, as None)."""
    return pg.execute(
        "SELECT every_task.state, t.attempts, t.last_error, t.result, t.progress,"
        f" t.state_since FROM {EVERY_TASK} LEFT JOIN tierq_tasks t ON t.id = every_task.id"
        " WHERE every_task.id = %s", (task_id,)).fetchone()


def leased(tq: Tierq, tenant: str = "acme", **task: Any) -> ClaimedTask:
    tq.enqueue(QUEUE, [{"payload": "p", **task}], tenant=tenant)
    [claimed] = tq.claim(QUEUE, tenant=tenant)
    return claimed


def verified(task: ClaimedTask, tenant: str) -> leases.Verified:
    """The lease as a caller that skipped its check in Valkey would name it."""
    return leases.Verified(tenant, str(task.id), task.lease_token, task.attempt, 0,
                           f"{task.id}|{task.lease_token}")


# -- reads of one task ----------------------------------------------------------------------

def test_task_by_id_reads_only_the_tenants_row(tq: Tierq) -> None:
    made = tq.enqueue_one(QUEUE, "a", tenant="acme")
    assert tq.ctx.store.task_by_id(QUEUE, made.id, "evil") is None
    row = tq.ctx.store.task_by_id(QUEUE, made.id, "acme")
    assert row is not None and row.tenant == "acme"
    assert tq.ctx.store.task_by_id(QUEUE, made.id) is not None  # (an admin's: any tenant's)


def test_a_get_wait_or_cancel_of_another_tenants_task_reads_nothing(tq: Tierq,
                                                                    pg: Any) -> None:
    made = tq.enqueue_one(QUEUE, "a", tenant="acme")
    before = row_of(pg, made.id)
    for read in (lambda: tq.get_task(QUEUE, made.id, tenant="evil"),
                 lambda: tq.get_task(QUEUE, made.id, tenant="evil", wait_seconds=0.1),
                 lambda: tq.cancel(QUEUE, made.id, tenant="evil"),
                 lambda: tq.cancel_task(QUEUE, made.id, tenant="evil")):
        with pytest.raises(NotFound):
            read()
    assert row_of(pg, made.id) == before
    assert tq.get_task(QUEUE, made.id, tenant="acme").state == "warm"


def test_a_tasks_parents_are_read_only_for_its_tenant(tq: Tierq) -> None:
    parent = tq.enqueue_one(QUEUE, "parent", tenant="acme")
    [child] = tq.enqueue(QUEUE, [{"payload": "child", "after": [str(parent.id)]}],
                         tenant="acme")
    store = tq.ctx.store
    assert store.waits_of_tasks(QUEUE, [str(child.id)], "evil") == []
    assert store.waits_of_tasks("other-queue", [str(child.id)], "acme") == []
    assert [r.parent for r in store.waits_of_tasks(QUEUE, [str(child.id)], "acme")] == \
        [parent.id]
    row = store.task_by_id(QUEUE, child.id)
    assert row is not None
    view = tasks.with_parents(tq.ctx, row, tasks.view(row), "evil")
    assert view.parents is None
    # a released task: the parents its claims hand out, kept in its row
    drained = tq.claim(QUEUE, tenant="acme")
    tq.ack(QUEUE, drained)
    assert store.parents_of_task(QUEUE, child.id, "acme") is not None
    assert store.parents_of_task(QUEUE, child.id, "evil") is None
    assert store.parents_of_task("other-queue", child.id, "acme") is None


# -- settling a lease -----------------------------------------------------------------------

@pytest.mark.parametrize("statement", [
    # (statements of rows: a batch member has none, and its ack never calls them)
    pytest.param("ack_delete", marks=pytest.mark.rows_layout),
    pytest.param("ack_delete_by_attempt", marks=pytest.mark.rows_layout),
    "ack_keep", "end_batch_members"])
def test_an_ack_statement_given_another_tenant_settles_nothing(tq: Tierq, pg: Any,
                                                               statement: str) -> None:
    """Each statement of an ack, given the task with another tenant, settles nothing: a
    plain ack's of rows, of one keeping a result, and of batch members (which deletes a
    row as ``ack_delete_by_attempt`` does where the task is one)."""
    task = leased(tq)
    store, ids = tq.ctx.store, [str(task.id)]
    now = to_datetime(tq.ctx.now())

    def ack(tenant: str) -> list[Any]:
        if statement == "ack_delete":
            return store.ack_delete(QUEUE, ids, [tenant], task.attempt)
        if statement == "ack_delete_by_attempt":
            return store.ack_delete_by_attempt(QUEUE, ids, [tenant], [task.attempt])
        if statement == "end_batch_members":
            finished = store.end_batch_members(QUEUE, ids, [tenant], [task.attempt])
            assert finished is not None  # (its function is there)
            return finished
        return store.ack_keep(QUEUE, now, ids, [tenant], ['"ok"'], [task.attempt])

    before = row_of(pg, task.id)
    assert ack("evil") == []
    assert row_of(pg, task.id) == before
    assert [r.id for r in ack("acme")] == ids


def test_an_ack_of_an_awaited_task_given_another_tenant_keeps_nothing(tq: Tierq,
                                                                     pg: Any) -> None:
    task = leased(tq)
    tq.enqueue(QUEUE, [{"payload": "child", "after": [str(task.id)]}], tenant="acme")
    before = row_of(pg, task.id)
    assert tq.ctx.db.run_transaction(lambda conn: tq.ctx.store.ack_keep_waited(
        conn, QUEUE, to_datetime(tq.ctx.now()), [str(task.id)], ["evil"], [None],
        [task.attempt]), what="test") == []
    assert row_of(pg, task.id) == before


def test_a_nack_or_expiry_given_another_tenant_records_nothing(tq: Tierq, pg: Any) -> None:
    """``leases.record_outcomes`` (nacks, the reaper's expiries, time limits) with a lease
    named for another tenant: neither the outcome nor the progress is written."""
    task = leased(tq)
    before = row_of(pg, task.id)
    store, ids = tq.ctx.store, [str(task.id)]
    now = to_datetime(tq.ctx.now())
    assert store.write_progress(QUEUE, ids, ["evil"], [task.attempt], ['{"n": 1}'],
                                [now]) == 0
    assert store.lease_outcomes(QUEUE, now, ids, ["evil"], [task.attempt], ["boom"],
                                [now], [True]) == []
    assert leases.record_outcomes(tq.ctx, QUEUE, [verified(task, "evil")], errors=["boom"],
                                  retry_ats=[tq.ctx.now()], deads=[True],
                                  progress={str(task.id): (0, '{"n": 1}')}) == {}
    assert row_of(pg, task.id) == before
    # its own tenant's: recorded
    assert leases.record_outcomes(tq.ctx, QUEUE, [verified(task, "acme")], errors=["boom"],
                                  retry_ats=[tq.ctx.now()], deads=[True]) == \
        {str(task.id): "dead"}


def test_a_release_given_another_tenant_returns_nothing_to_line(tq: Tierq, pg: Any) -> None:
    task = leased(tq)
    before = row_of(pg, task.id)
    tq.ctx.clock.advance(1)  # (a release writes state_since: now differs from the claim's)
    now = to_datetime(tq.ctx.now())
    assert tq.ctx.store.release_leased(QUEUE, now, [str(task.id)], ["evil"],
                                       [task.attempt]) == []
    assert row_of(pg, task.id) == before
    [row] = tq.ctx.store.release_leased(QUEUE, now, [str(task.id)], ["acme"], [task.attempt])
    assert row.tenant == "acme"


def test_groups_of_tasks_reads_only_the_tenant_given_with_each_id(tq: Tierq) -> None:
    task = leased(tq, group="g")
    store = tq.ctx.store
    assert store.groups_of_tasks(QUEUE, [str(task.id)], ["evil"]) == []
    [row] = store.groups_of_tasks(QUEUE, [str(task.id)], ["acme"])
    assert (row.tenant, row.grp) == ("acme", "g")
    # after_finish_ids: another tenant's id releases nothing of acme's group
    tq.enqueue(QUEUE, [{"payload": "next", "group": "g"}], tenant="acme")
    groups.after_finish_ids(tq.ctx, QUEUE, [("evil", str(task.id))])
    assert tq.claim(QUEUE, tenant="acme") == []  # (the next stays held: one at a time)


def test_a_replayed_claim_rebuilds_only_rows_of_the_tenant_its_record_names(tq: Tierq) -> None:
    task = leased(tq)
    store = tq.ctx.store
    assert store.claimed_tasks_by_ids(QUEUE, [str(task.id)], ["evil"]) == []
    [row] = store.claimed_tasks_by_ids(QUEUE, [str(task.id)], ["acme"])
    assert row.tenant == "acme"


# -- big payloads' objects ------------------------------------------------------------------

def test_a_payload_key_is_used_only_by_a_task_of_its_tenant(tq: Tierq, pg: Any) -> None:
    """``payloads.use`` (the enqueue's transaction) with a task of another tenant than the
    key's: refused (422), the key still pending, no object recorded."""
    key = "tenants/acme/0190b8a0-0000-7000-8000-000000000001"
    tq.ctx.store.payload_keys_add(key, "acme", to_datetime(tq.ctx.now()))
    task_id = "0190b8a0-0000-7000-8000-0000000000aa"
    with pytest.raises(InvalidInput, match="is not known here"):
        tq.ctx.db.run_transaction(lambda conn: payloads.use(
            tq.ctx, conn, [(key, task_id, "evil", "tasks[0]")]), what="test")
    assert pg.execute("SELECT state FROM tierq_payload_keys").fetchall() == [("pending",)]
    assert pg.execute("SELECT count(*) FROM tierq_payload_objects").fetchone() == (0,)
    tq.ctx.db.run_transaction(lambda conn: payloads.use(
        tq.ctx, conn, [(key, task_id, "acme", "tasks[0]")]), what="test")
    assert pg.execute("SELECT state FROM tierq_payload_keys").fetchall() == [("used",)]


def test_payload_object_of_task_checks_the_tasks_tenant(tq: Tierq, pg: Any) -> None:
    # (keyed: a row in either layout, as a task that carries an object always is, never a
    # batch member)
    made = tq.enqueue_one(QUEUE, "a", tenant="acme", key="k")
    key = "tenants/acme/0190b8a0-0000-7000-8000-000000000002"
    tq.ctx.store.payload_objects_register([key], [str(made.id)],
                                          to_datetime(tq.ctx.now() - 1))
    store = tq.ctx.store
    assert store.payload_object_of_task(key, str(made.id), "evil") is False
    assert store.payload_object_of_task(key, str(made.id), "acme") is True


# -- an admin's batch over several tenants --------------------------------------------------

def two_tenants_leased(tq: Tierq) -> list[ClaimedTask]:
    return [leased(tq, tenant="acme"), leased(tq, tenant="globex")]


@pytest.mark.parametrize("result", [None, {"ok": 1}], ids=["deleted", "kept"])
def test_an_admins_ack_over_two_tenants_settles_both(tq: Tierq, result: Any) -> None:
    tasks = two_tenants_leased(tq)
    acked = tq.ack(QUEUE, [AckItem(id=t.id, lease_token=t.lease_token, result=result)
                           for t in tasks])
    assert sorted(acked.acked) == sorted(t.id for t in tasks) and not acked.rejected


def test_an_admins_nack_and_release_over_two_tenants_settle_both(tq: Tierq) -> None:
    tasks = two_tenants_leased(tq)
    released = tq.release(QUEUE, [ReleaseItem(id=t.id, lease_token=t.lease_token)
                                  for t in tasks])
    assert sorted(released.released) == sorted(t.id for t in tasks)
    again = [*tq.claim(QUEUE, tenant="acme"), *tq.claim(QUEUE, tenant="globex")]
    nacked = tq.nack(QUEUE, [NackItem(id=t.id, lease_token=t.lease_token, error="e", dead=True)
                             for t in again])
    assert sorted(nacked.dead) == sorted(t.id for t in tasks)


def test_an_ack_over_two_tenants_pairs_each_row_with_its_own_leases_tenant(
        tq: Tierq, pg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leases named with each other's tenant (a check before the statement skipped): the
    set of the batch's tenants holds both, so only a statement that pairs each row with
    its own lease's tenant refuses them."""
    tasks = two_tenants_leased(tq)
    swapped = [verified(tasks[0], "globex"), verified(tasks[1], "acme")]
    swapped = [leases.Verified(v.tenant, v.id, v.token, v.attempt, index, v.member)
               for index, v in enumerate(swapped)]
    monkeypatch.setattr(leases, "verify", lambda *args, **kwargs: swapped)
    before = [row_of(pg, t.id) for t in tasks]
    assert tq.ack(QUEUE, tasks).acked == []
    assert [row_of(pg, t.id) for t in tasks] == before
