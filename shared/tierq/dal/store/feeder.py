"""The bulk statements (``sql/queries/feeder.sql``): the feeder's offsets and lock, the
backlog it watches, and bulk loads (logic/bulk.py): places in line reserved in blocks, the
staging table and the insert from it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from psycopg.rows import scalar_row

from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import BacklogCounts, FeedOffsetRow


class FeederQueries(StoreBase):
    def feeder_try_lock(self, conn: Conn, feed: str) -> bool:
        """Take the feed's session lock on ``conn`` if free."""
        [locked] = self._fetch("feeder_try_lock", {"feed": feed}, scalar_row, conn)
        return bool(locked)

    def feeder_unlock(self, conn: Conn, feed: str) -> None:
        self._fetch("feeder_unlock", {"feed": feed}, scalar_row, conn)

    def feeder_offsets(self, feed: str) -> list[FeedOffsetRow]:
        return self._fetch("feeder_offsets", {"feed": feed}, positional(FeedOffsetRow))

    def feeder_save_offsets(self, feed: str, rows: Sequence[FeedOffsetRow]) -> None:
        """Where every source of the feed stopped, in one statement."""
        self._execute("feeder_save_offsets", {
            "feed": feed, "sources": [r.source for r in rows], "parts": [r.part for r in rows],
            "rows_done": [r.rows_done for r in rows],
            "last_values": [r.last_value for r in rows]})

    def feeder_reset_offsets(self, feed: str) -> None:
        self._execute("feeder_reset_offsets", {"feed": feed})

    def feeder_backlog_pg(self, queue: str, cap: int) -> BacklogCounts:
        """The queue's cold and delayed rows, each counted up to ``cap``."""
        [row] = self._fetch("feeder_backlog_pg", {"queue": queue, "cap": cap},
                            positional(BacklogCounts))
        return row

    def feeder_reserve_blocks(self, n: int) -> list[int]:
        """``n`` blocks of places in line (``logic.bulk.SEQ_BLOCK`` each): their first
        places, in order."""
        return self._fetch("feeder_reserve_blocks", {"n": n}, scalar_row)

    def feeder_create_stage(self, conn: Conn) -> None:
        """The staging table of ``conn``'s session (emptied at each commit)."""
        self._execute("feeder_create_stage", None, conn)

    def feeder_copy_stage(self, conn: Conn,
                          pieces: Iterable[bytes | bytearray | memoryview]) -> int:
        """COPY rows (text format, given as pieces in order) into the staging table, in
        ``conn``'s transaction; how many rows it staged."""
        with conn.cursor() as cur:
            with cur.copy(self._sql["feeder_copy_stage"]) as copy:
                for piece in pieces:
                    copy.write(piece)
            return cur.rowcount

    def feeder_insert_from_stage(self, conn: Conn, queue: str, now: datetime,
                                 max_attempts: int, blocks: Sequence[int], block: int, *,
                                 plain: bool = False) -> int:
        """Move the staged rows into the queue, in their order (row ``ord`` takes place
        ``blocks[ord // block] + ord % block``); how many were created. ``plain``: the
        cheaper insert, which fails (UniqueViolation) instead of skipping a key a live task
        holds or the chunk repeats."""
        params = {"queue": queue, "now": now, "max_attempts": max_attempts,
                  "blocks": list(blocks), "block": block}
        if plain:
            return self._execute("feeder_insert_new_from_stage", params, conn)
        return self._execute("feeder_insert_from_stage", params, conn)

    def feeder_settle_repeats(self, conn: Conn, queue: str, now: datetime,
                              blocks: Sequence[int], block: int) -> int:
        """Staged rows whose key a later task of the same load holds take that task over
        (first occurrence wins across a load's chunks); how many were taken over. Inside
        the caller's transaction, whose planner settings it changes for the rest of it."""
        self._fetch("feeder_settle_plan", None, scalar_row, conn)
        return self._execute("feeder_settle_repeats", {
            "queue": queue, "now": now, "blocks": list(blocks), "block": block}, conn)
