"""Migrations over the shards of ``TIERQ_SHARD_URLS`` for ``tierq migrate`` and ``tierq dev``
(the migrate function on AWS does the same through ``ShardedTierq.migrate``).

Every shard is tried; a shard that fails is named and tried again (``attempts`` rounds, a
pause between them: migrations are recorded per shard, so a round applies only what a shard
still misses). Once every shard is migrated, several shards are put in service together
(``HomeRegistry.sync``: each database named after its shard, the pairs' homes copied on
each, docs/architecture.md §14). Neither needs the warm tier.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack

from tierq.dal.migrate import migrate
from tierq.dal.postgres import Database
from tierq.dal.shards import ShardSpec
from tierq.dal.task_store import TaskStore
from tierq.logic.homes import HomeRegistry, SyncSummary
from tierq.sharded import ShardMigrationFailed

ATTEMPTS = 3
PAUSE_SECONDS = 2.0


def migrate_shards(specs: Sequence[ShardSpec], *, attempts: int = ATTEMPTS,
                   pause: float = PAUSE_SECONDS,
                   say: Callable[[str], None] = lambda _message: None,
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, list[str]]:
    """Apply pending migrations to every shard of ``specs``, then put them in service (more
    than one). Returns the versions applied per shard; raises ``ShardMigrationFailed``
    naming each shard still failing after ``attempts`` rounds (the others are migrated)."""
    if not specs:
        raise ValueError("no shards to migrate")
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    applied: dict[str, list[str]] = {}
    failed: dict[str, str] = {}
    for attempt in range(1, attempts + 1):
        for spec in specs:
            if spec.name in applied:
                continue
            try:
                applied[spec.name] = migrate(spec.url)
            except Exception as exc:  # named, and tried again; the others go on
                failed[spec.name] = f"{type(exc).__name__}: {exc}".strip()
                say(f"shard {spec.name}: migrations failed (attempt {attempt} of "
                    f"{attempts}): {failed[spec.name]}")
                continue
            failed.pop(spec.name, None)
            versions = applied[spec.name]
            say(f"shard {spec.name}: " + (f"migrations applied: {', '.join(versions)}"
                                          if versions else "schema is up to date"))
        if not failed:
            break
        if attempt < attempts:
            say(f"trying {', '.join(failed)} again in {pause:g}s")
            sleep(pause)
    if failed:
        raise ShardMigrationFailed(failed, applied)
    if len(specs) > 1:
        summary = sync_homes(specs, say)
        say(f"{summary.shards} shards in service ({summary.adopted} homes recorded, "
            f"{summary.copied} copied)")
    return applied


def sync_homes(specs: Sequence[ShardSpec], say: Callable[[str], None]) -> SyncSummary:
    """``HomeRegistry.sync`` over the shards' databases (a small pool each, closed after)."""
    with ExitStack() as stack:
        stores: dict[str, TaskStore] = {}
        for spec in specs:
            db = Database(spec.url, min_size=0, max_size=2, resolve_url=spec.resolve_url)
            stack.callback(db.close)
            stores[spec.name] = TaskStore(db)
        return HomeRegistry(stores).sync(say)
