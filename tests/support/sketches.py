"""An engine taking a sketch's statements (bench/systems/sketches.py) over a fresh database
holding the sketch's tables, and a drain of its queue, for the sketches' tests
(tests/bench/test_*_sketch.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

import tierq.logic.enqueue as enqueue
from bench.systems.tierq_engine import tierq_engine
from tests.support.stores import flush_valkey, migrated_database
from tierq import ClaimRequest, Tierq


@contextlib.contextmanager
def sketched_engine(postgres_url: str, valkey_url: str, valkey_private: bool, *,
                    database: str, schema: str, word: str
                    ) -> Iterator[tuple[Tierq, psycopg.Connection[Any], str]]:
    """(An engine with the sketch ``word``'s statements, a connection, the database's URL)
    over a fresh database holding ``schema``; Valkey flushed before and after, and the
    enqueue's id marking of a sketch taken out again (it is installed once per process)."""
    with migrated_database(postgres_url, database) as url:
        flush_valkey(valkey_url, valkey_private)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(schema)
            tq = tierq_engine({"database_url": url, "valkey_url": valkey_url,
                               "sketch": word})
            try:
                yield tq, conn, url
            finally:
                tq.close()
                while hasattr(enqueue.prepare, "unmarked"):
                    enqueue.prepare = enqueue.prepare.unmarked
        flush_valkey(valkey_url, valkey_private)


def drain(tq: Tierq, queue: str, batch: int) -> int:
    """Claim (no tenant: the rotation) and ack until nothing is left; how many acked."""
    acked = 0
    while got := tq.claim(queue, ClaimRequest(max=batch)):
        result = tq.ack(queue, got)
        assert not result.rejected, result.rejected
        acked += len(result.acked)
    return acked
