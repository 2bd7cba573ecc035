"""Shards (``sql/queries/shards.sql``): every pair's home, copied on every shard, and the
shard's own identity (``tierq.logic.homes``)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from psycopg.rows import scalar_row, tuple_row

from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import HomeRow, HomeState, PairLeftRow, ShardIdentityRow


class ShardQueries(StoreBase):
    def home_get(self, queue: str, tenant: str, conn: Conn | None = None) -> str | None:
        """The home shard this database records for the pair; None when it records none."""
        rows = self._fetch("home_get", {"queue": queue, "tenant": tenant}, scalar_row, conn)
        return str(rows[0]) if rows else None

    def home_state(self, queue: str, tenant: str, conn: Conn | None = None) -> HomeState | None:
        """The pair's home and move as this database records them; None: no record."""
        rows = self._fetch("home_get", {"queue": queue, "tenant": tenant},
                           positional(HomeState), conn)
        return rows[0] if rows else None

    def home_record(self, queue: str, tenant: str, shard: str,
                    conn: Conn | None = None) -> str:
        """Record ``shard`` as the pair's home unless one is recorded; the recorded home."""
        rows = self._fetch("home_record", {"queue": queue, "tenant": tenant, "shard": shard},
                           scalar_row, conn)
        return str(rows[0])

    def home_forget(self, queue: str, tenant: str, shard: str,
                    conn: Conn | None = None) -> bool:
        """Drop the record that ``shard`` is the pair's home; whether there was one."""
        return self._execute("home_forget", {"queue": queue, "tenant": tenant,
                                             "shard": shard}, conn) > 0

    def homes_page(self, after: tuple[str, str], limit: int) -> list[HomeRow]:
        """Up to ``limit`` homes after ``after`` = (queue, tenant), in key order."""
        return self._fetch("homes_page", {"queue": after[0], "tenant": after[1],
                                          "limit": limit}, positional(HomeRow))

    def homes_copy(self, homes: Sequence[HomeRow]) -> int:
        """Record the homes where none is recorded; how many were new here."""
        if not homes:
            return 0
        return self._execute("homes_copy", {"homes": orjson.dumps(
            [[h.queue, h.tenant, h.shard, h.moving_to] for h in homes]).decode()})

    # -- a pair's drained move (tierq.logic.pair_moves) ------------------------------------

    def home_close(self, queue: str, tenant: str, shard: str, moving_to: str) -> HomeState:
        """Record that the pair moves from its home ``shard`` to ``moving_to`` (a missing
        copy is written); the home and move now recorded."""
        return self._fetch("home_close", {"queue": queue, "tenant": tenant, "shard": shard,
                                          "moving_to": moving_to}, positional(HomeState))[0]

    def home_reopen(self, queue: str, tenant: str, shard: str, moving_to: str) -> bool:
        """Give up the pair's move to ``moving_to`` (not switched yet); whether it was."""
        return self._execute("home_reopen", {"queue": queue, "tenant": tenant, "shard": shard,
                                             "moving_to": moving_to}) > 0

    def home_switch(self, queue: str, tenant: str, moving_to: str,
                    conn: Conn | None = None) -> HomeState | None:
        """Record ``moving_to`` as the home of the pair moving there (still closed to new
        work; a missing copy is written); the record now (another move's or another home's
        when it names one; None: none)."""
        rows = self._fetch("home_switch", {"queue": queue, "tenant": tenant,
                                           "moving_to": moving_to},
                           positional(HomeState), conn)
        return rows[0] if rows else self.home_state(queue, tenant, conn)

    def home_open(self, queue: str, tenant: str, shard: str) -> bool:
        """Open a moved pair for new work on its new home ``shard``; whether it was closed."""
        return self._execute("home_open", {"queue": queue, "tenant": tenant,
                                           "shard": shard}) > 0

    def pair_left(self, queue: str, tenant: str, conn: Conn | None = None) -> PairLeftRow:
        """What of the pair this shard still holds that a move must wait for."""
        return self._fetch("pair_left_on_shard", {"queue": queue, "tenant": tenant},
                           positional(PairLeftRow), conn)[0]

    def homes_not_here(self, conn: Conn, queue: str,
                       tenants: Sequence[str]) -> list[tuple[str, str, str | None]]:
        """In a transaction writing new rows of these pairs here (sharded): hold their home
        records until it commits, and return (tenant, home, moving_to) of those that live
        elsewhere or are being moved."""
        rows = self._fetch("homes_not_here", {"queue": queue, "tenants": list(tenants)},
                           tuple_row, conn)
        return [(str(r[0]), str(r[1]), r[2]) for r in rows if r[3]]

    def pair_switch_drained(self, queue: str, tenant: str, moving_to: str,
                            shard: str) -> PairLeftRow | HomeState | None:
        """Switch a drained pair's home on its old home ``shard``, in one transaction that
        holds the pair's home record and registration.

        | the record                                 | done and returned                  |
        | ------------------------------------------ | ---------------------------------- |
        | moves from ``shard`` to ``moving_to``, and | the registration and batch rows'   |
        | nothing of the pair is left here           | pairs rows dropped, the home is    |
        |                                            | ``moving_to``: that state          |
        | moves so, but something is left            | nothing written; what is left      |
        | says otherwise                             | nothing written; the record as it  |
        |                                            | is now                             |
        | none                                       | nothing written; None              |
        """
        params = {"queue": queue, "tenant": tenant}
        with self.db.transaction() as conn:
            # waits for any transaction writing rows of the pair here (homes_not_here)
            locked = self._fetch("home_lock", params, positional(HomeState), conn)
            if not locked or locked[0] != HomeState(shard, moving_to):
                return locked[0] if locked else None
            self._fetch("pair_registry_lock", params, scalar_row, conn)
            left = self.pair_left(queue, tenant, conn)
            if left.total:
                return left
            self._execute("pair_registry_drop", params, conn)
            self._execute("pair_batch_pairs_drop", params, conn)
            state = self.home_switch(queue, tenant, moving_to, conn)
            assert state is not None
            return state

    def home_birth_within_cap(self, queue: str, tenant: str, shard: str, cap: int) -> str | None:
        """Record a new pair's home (on the default shard) unless its tenant already has
        ``cap`` homes; the home recorded, None when over the cap. One transaction, holding
        the tenant's quota lock: two births of one tenant at once cannot both pass."""
        with self.db.transaction() as conn:
            self._fetch("lock_tenant_quota", {"tenants": [tenant]}, scalar_row, conn)
            rows = self._fetch("home_birth_within_cap", {
                "queue": queue, "tenant": tenant, "shard": shard, "cap": cap}, scalar_row, conn)
        return str(rows[0]) if rows else None

    def homes_adopt_registry(self, shard: str) -> int:
        """Record ``shard`` (this database) as the home of each pair registered here without
        a recorded home; how many."""
        return self._execute("homes_adopt_registry", {"shard": shard})

    def homes_elsewhere_registered(self, shard: str) -> list[HomeRow]:
        """Pairs registered here whose recorded home is another shard (at most 100)."""
        return self._fetch("homes_elsewhere_registered", {"shard": shard},
                           positional(HomeRow))

    def shard_identity(self) -> ShardIdentityRow | None:
        rows = self._fetch("shard_identity", None, positional(ShardIdentityRow))
        return rows[0] if rows else None

    def shard_identity_claim(self, name: str) -> str:
        """Name this database ``name`` unless it has a name; the name it has."""
        return str(self._fetch("shard_identity_claim", {"name": name}, scalar_row)[0])

    def shard_homes_complete(self) -> None:
        """Mark this shard's copy of the homes complete (kept if it already was)."""
        self._execute("shard_homes_complete", None)

    def schema_version(self) -> str | None:
        """The newest migration applied here (None: none)."""
        rows = self._fetch("schema_version", {}, scalar_row)
        return None if not rows or rows[0] is None else str(rows[0])
