"""An idempotent enqueue's record of its rounds (logic/shard_ops.py ``merge_round``): a round
run again after a deadlock reports all of its tasks, and its last report stands."""

from __future__ import annotations

from typing import Any

from tierq.logic.shard_ops import merge_round


def created(task_id: str) -> dict[str, Any]:
    return {"id": task_id, "outcome": "created", "state": "warm", "tenant": "_", "key": "k"}


def test_a_rerun_round_that_did_not_create_a_task_drops_the_earlier_runs_word() -> None:
    """The first run created X and was rolled back (a deadlock's victim); meanwhile another
    request took the key, so the rerun creates nothing: the record must not name X."""
    recorded: dict[int, dict[str, Any]] = {0: created("earlier")}  # committed before
    todo = [3, 4]
    merge_round(recorded, todo, {0: created("X"), 1: created("Y")})  # the first run
    merge_round(recorded, todo, {0: None, 1: created("Y")})  # its rerun
    assert recorded == {0: created("earlier"), 4: created("Y")}


def test_rounds_add_up() -> None:
    recorded: dict[int, dict[str, Any]] = {}
    todo = [0, 1, 2]
    merge_round(recorded, todo, {0: created("A"), 1: None})  # 1 met a conflict
    merge_round(recorded, todo, {1: created("B")})  # its retry in the next round
    merge_round(recorded, todo, {2: created("C")})
    assert recorded == {0: created("A"), 1: created("B"), 2: created("C")}
