"""A task's last_error is at most 2 KiB of UTF-8, cut on a character boundary, whichever
path records the failed attempt: a nack (the engine's, the HTTP route's: tests/handlers),
the dispatcher's nacks (codes: tests/dispatch) and the reaper's expiry all go through
``leases.record_outcomes``, where the cut is made. Real PostgreSQL and Valkey."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tierq.dal.warm_tier import lease_member
from tierq.engine import Tierq
from tierq.logic import leases
from tierq.logic.leases import MAX_ERROR_BYTES, Verified, clip_error

pytestmark = pytest.mark.usefixtures("clean_stores")


@pytest.mark.parametrize(("text", "kept"), [
    ("", ""),
    ("a" * 2048, "a" * 2048),
    ("a" * 2049, "a" * 2048),
    ("a" + "😀" * 600, "a" + "😀" * 511),  # 1 + 511 * 4 = 2,045: a 512th would pass 2,048
    ("ab" + "é" * 1200, "ab" + "é" * 1023),  # 2 + 2,046
    ("€" * 682 + "xyz", "€" * 682 + "xy"),  # 2,046 + 2
    # a lone surrogate (Python's text of undecodable bytes) is "?", short text or long
    ("bad \udcff byte", "bad ? byte"),
    ("\ud800" + "a" * 2048, "?" + "a" * 2047),
])
def test_clip_error_keeps_2_kib_on_a_character_boundary(text: str, kept: str) -> None:
    assert clip_error(text) == kept
    assert len(kept.encode()) <= MAX_ERROR_BYTES


def stored(pg: psycopg.Connection[Any]) -> list[tuple[str, int]]:
    return pg.execute("SELECT last_error, octet_length(last_error) FROM tierq_tasks"
                      ).fetchall()


def test_an_engine_nack_keeps_2_kib(tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    tq.nack("q", [{"id": task.id, "lease_token": task.lease_token,
                   "error": "ValueError: " + "ü" * 9_000}])
    [(error, size)] = stored(pg)
    assert size == 2048 and error == "ValueError: " + "ü" * 1018  # 12 + 2,036


def test_every_failed_attempt_recorded_is_cut(tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    # record_outcomes is where a nack and an expired lease (the reaper) record the attempt
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    lease = Verified(task.tenant, str(task.id), task.lease_token, task.attempt, 0,
                     lease_member(str(task.id), task.lease_token))
    leases.record_outcomes(tq.ctx, "q", [lease], errors=["x" * 100_000],
                           retry_ats=[tq.ctx.now()], deads=[False])
    assert stored(pg) == [("x" * 2048, 2048)]



def test_a_short_error_with_a_lone_surrogate_is_stored(
        tq: Tierq, pg: psycopg.Connection[Any]) -> None:
    # Python's text of bytes that were not UTF-8 (os.fsdecode's surrogateescape) holds lone
    # surrogates, which PostgreSQL's UTF-8 cannot take (the models refuse them at the door;
    # record_outcomes takes text from inside tierq too): short or long, they become "?"
    tq.enqueue("q", [{"payload": 1}])
    [task] = tq.claim("q")
    lease = Verified(task.tenant, str(task.id), task.lease_token, task.attempt, 0,
                     lease_member(str(task.id), task.lease_token))
    leases.record_outcomes(tq.ctx, "q", [lease], errors=["OSError: /data/\udcff.csv"],
                           retry_ats=[tq.ctx.now()], deads=[False])
    assert stored(pg) == [("OSError: /data/?.csv", 20)]
