"""logic/leases.by_tenant: the leases a batch names, by tenant, their ids as text."""

from __future__ import annotations

import uuid

from tierq.core.ids import new_token_prefix
from tierq.logic.leases import by_tenant
from tierq.models.lease_outcomes import AckItem, Rejection
from tierq.models.leases import ClaimedTask


def _claimed(tenant: str, task_id: object) -> ClaimedTask:
    return ClaimedTask.model_construct(id=task_id, queue="q", tenant=tenant, attempt=2,
                                       lease_token=f"{tenant}-token")


def test_ids_as_text_in_order_by_tenant_and_a_task_named_twice_refused() -> None:
    ids = [uuid.uuid4() for _ in range(4)]
    items = [_claimed("a", ids[0]), _claimed("b", ids[1]), _claimed("a", ids[2]),
             _claimed("a", ids[0]), _claimed("b", str(ids[3]))]
    rejected: list[Rejection] = []
    out = by_tenant(items, rejected)
    assert {t: [(v.id, v.index, v.attempt) for v in vs] for t, vs in out.items()} == {
        "a": [(str(ids[0]), 0, 2), (str(ids[2]), 2, 2)],
        "b": [(str(ids[1]), 1, 2), (str(ids[3]), 4, 2)]}
    assert all(type(v.id) is str for vs in out.values() for v in vs)
    assert out["a"][0].member == f"{ids[0]}|a-token"
    assert [(r.id, r.reason) for r in rejected] == [(ids[0], "not_owner")]


def test_an_ack_item_names_its_tenant_by_its_token() -> None:
    task_id = uuid.uuid4()
    token = f"{new_token_prefix('t1')}3~0"
    out = by_tenant([AckItem(id=task_id, lease_token=token)], [])
    assert [(v.tenant, v.id, v.attempt) for v in out["t1"]] == [("t1", str(task_id), 3)]


def test_an_id_of_another_type_is_its_str() -> None:
    out = by_tenant([_claimed("a", 7)], [])
    assert out["a"][0].id == "7"
