"""Shards (``sql/queries/shards.sql``): every pair's home, copied on every shard, and the
shard's own identity (``tierq.logic.homes``)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from psycopg.rows import scalar_row

from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import HomeRow, ShardIdentityRow


class ShardQueries(StoreBase):
    def home_get(self, queue: str, tenant: str, conn: Conn | None = None) -> str | None:
        """The home shard this database records for the pair; None when it records none."""
        rows = self._fetch("home_get", {"queue": queue, "tenant": tenant}, scalar_row, conn)
        return str(rows[0]) if rows else None

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
            [[h.queue, h.tenant, h.shard] for h in homes]).decode()})

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
