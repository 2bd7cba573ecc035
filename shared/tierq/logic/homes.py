"""Where each (queue, tenant) pair lives in a sharded deployment: its home shard.

Every task of a pair is stored on the pair's home, so every guarantee that holds per pair
(FIFO, dedup by key, priorities, hysteresis) holds as on one database. A home, once
recorded, never changes by itself: adding a shard changes which shard a *new* pair goes to
(``rendezvous_order``), never the home of a pair that exists.

The memory of homes (``tierq_pair_homes``) is copied on every shard, so the home of a pair
that exists can be read on any shard that answers — no shard is the one whose loss hides
every pair:

- **Lookup.** The process's cache first; then the shards in the pair's rendezvous order,
  until one answers with a record. A shard whose copy is complete (``homes_complete``)
  answering "none" means the pair may be new; it is then asked of every other shard too
  (a copy can miss a record whose writing failed), and only when every shard answered
  without a record is the pair new. When a shard that might hold the record does not
  answer, the home cannot be known: ``Unavailable`` (503), never a second home.
- **Birth.** A new pair's home is the first shard of its ranking. The default shard (the
  first named) arbitrates: the home is recorded there first, and the first writer wins,
  so two processes that rank the shards differently (a shard being added while both run)
  still agree. Then the home itself records it, then every other shard (best effort: a
  copy that failed is healed by the next lookup that reads the pair's record elsewhere).
  While the default shard is down, new pairs get 503; pairs that exist go on.
- **Forgetting** an idle pair (``forget``) drops the home's own record first — the caller
  does it in the transaction that finds the pair without rows — then the other copies, so
  no copy outlives the pair's rows into a state that would let a second home be born.

A single-shard deployment records nothing: every pair's home is the one shard.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import psycopg
import psycopg_pool

from tierq.core.lazy import lazy_dataclass
from tierq.dal.shards import rendezvous_order
from tierq.dal.store.rows import HomeRow, HomeState
from tierq.dal.task_store import Conn, TaskStore
from tierq.errors import QuotaExceeded, TierqError, Unavailable

Pair = tuple[str, str]
ShardRunner = Callable[[str, Callable[[TaskStore], Any]], Any]
# how long a process trusts a home it read (a home changes only by an explicit, drained
# move; a forgotten pair born again goes to the same shard unless shards were added since)
HOME_CACHE_SECONDS = 300.0
COPY_PAGE = 5000
# what a shard that does not answer raises, as the store lets it through
SHARD_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError, psycopg_pool.PoolTimeout, Unavailable)


class ShardDown(Unavailable):
    """A shard this request needs does not answer (503: retry later)."""

    def __init__(self, shard: str, detail: str | None = None, *,
                 why: str = "does not answer") -> None:
        super().__init__(f"the database shard {shard!r} {why}; retry later", detail=detail)
        self.shard = shard


class PairMoving(Unavailable):
    """The pair is being moved to another shard: new work waits until its tasks have
    drained and its new home takes over (503: retry later)."""

    code = "pair_moving"

    def __init__(self, queue: str, tenant: str, home: str, moving_to: str | None) -> None:
        what = ("is moving to another database shard and takes no new work until it has "
                "moved" if moving_to is not None else "has moved to another database shard")
        super().__init__(f"queue {queue!r} of tenant {tenant!r} {what}; retry later",
                         retry_after=5,
                         detail=(f"moving from shard {home!r} to {moving_to!r}"
                                 if moving_to is not None and moving_to != home
                                 else f"its home is shard {home!r}"))
        self.queue = queue
        self.tenant = tenant
        self.home = home
        self.moving_to = moving_to


def require_here(store: TaskStore, conn: Conn, queue: str, tenants: Iterable[str]) -> None:
    """In a sharded deployment's transaction that writes new rows of these pairs on
    ``store``'s shard: hold their home records until it commits (a move's switch waits for
    it) and raise ``PairMoving`` (writing nothing) when one is being moved or lives
    elsewhere now — a process whose cached home predates a move (tierq.logic.pair_moves)."""
    for tenant, home, moving_to in store.homes_not_here(conn, queue, sorted(set(tenants))):
        raise PairMoving(queue, tenant, home, moving_to)


class HomeConflict(TierqError):
    """Two records name different homes for one pair: a misconfiguration (a shard renamed,
    two names on one database) that tierq refuses to paper over."""

    status = 500
    code = "home_conflict"


@lazy_dataclass(frozen=True)
class CopyProgress:
    copied: int
    new_here: int


@lazy_dataclass(frozen=True)
class SyncSummary:
    shards: int
    adopted: int  # pairs recorded as living where they are registered
    copied: int   # home records a shard did not have


class HomeRegistry:
    """The pairs' homes over ``shards`` (name → store), the first named being the default
    shard (the arbiter of births)."""

    def __init__(self, shards: Mapping[str, TaskStore], *,
                 cache_seconds: float = HOME_CACHE_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic,
                 run: ShardRunner | None = None, cap: int = 0) -> None:
        """``run(name, call)`` runs ``call(store)`` for shard ``name`` (the sharded engine
        passes one that gives up on a shard that hangs, see tierq.sharded); by default the
        call is made directly. ``cap``: the most queues a tenant may have over every shard
        (TIERQ_MAX_QUEUES_PER_TENANT; 0: no cap), checked when a pair is born."""
        if not shards:
            raise ValueError("a deployment needs at least one shard")
        self.shards = dict(shards)
        self.names = list(shards)
        self.default = self.names[0]
        self.cache_seconds = cache_seconds
        self._monotonic = monotonic
        self._cache: dict[Pair, tuple[float, str]] = {}
        self._complete: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._run: ShardRunner = run or (lambda name, call: call(self.shards[name]))
        self.cap = cap

    @property
    def sharded(self) -> bool:
        return len(self.names) > 1

    def run_on(self, name: str, call: Callable[[TaskStore], Any]) -> Any:
        """``call(store)`` on shard ``name`` the way lookups run it (under the engine's
        deadline for that shard, when the sharded engine made this registry)."""
        return self._run(name, call)

    # -- lookups --------------------------------------------------------------------------

    def cached(self, queue: str, tenant: str) -> str | None:
        with self._lock:
            hit = self._cache.get((queue, tenant))
        if hit is None or self._monotonic() - hit[0] >= self.cache_seconds:
            return None
        return hit[1]

    def remember(self, queue: str, tenant: str, shard: str) -> None:
        with self._lock:
            self._cache[(queue, tenant)] = (self._monotonic(), shard)

    def invalidate(self, queue: str, tenant: str) -> None:
        with self._lock:
            self._cache.pop((queue, tenant), None)

    def home_of(self, queue: str, tenant: str, *, create: bool = True) -> str | None:
        """The pair's home shard. ``create``: the lookup is for new work — a pair without a
        home is born, one being moved to another shard is refused (``PairMoving``); without
        it, a pair without a home is None and a moving pair's current home is answered (its
        leases and tasks are still there). Raises ``ShardDown`` when the home cannot be
        known or recorded for want of a shard."""
        if not self.sharded:
            return self.default
        home = self.cached(queue, tenant)
        if home is not None:
            return home
        order = rendezvous_order(self.names, queue, tenant)
        state = self._read(queue, tenant, order)
        if state is None:
            if not create:
                return None
            home = self._birth(queue, tenant, order[0])
        elif state.moving_to is not None:
            # not cached: every request sees the move end as soon as a shard records it
            if create:
                raise PairMoving(queue, tenant, state.shard, state.moving_to)
            return state.shard
        else:
            home = state.shard
        self.remember(queue, tenant, home)
        return home

    def homes_of(self, queue: str, tenants: Sequence[str], *,
                 create: bool = True) -> dict[str, str | None]:
        """``home_of`` for each tenant of ``queue``."""
        return {tenant: self.home_of(queue, tenant, create=create) for tenant in tenants}

    def state_of(self, queue: str, tenant: str) -> HomeState | None:
        """The pair's home and move as the shards record them (no cache); None: no home."""
        if not self.sharded:
            return HomeState(self.default, None)
        return self._read(queue, tenant, rendezvous_order(self.names, queue, tenant))

    def _read(self, queue: str, tenant: str, order: Sequence[str]) -> HomeState | None:
        down: list[tuple[str, BaseException]] = []
        without: list[str] = []  # shards that answered without a record
        answered_none = False
        for name in order:
            try:
                state = self._run(name, lambda store: store.home_state(queue, tenant))
                if state is None:
                    answered_none = answered_none or self.is_complete(name)
            except SHARD_ERRORS as exc:
                down.append((name, exc))
                continue
            if state is None:
                without.append(name)
                continue
            self._known(state.shard)
            row = HomeRow(queue, tenant, state.shard, state.moving_to)
            for name_without in without:  # a copy whose writing failed: heal it
                with contextlib.suppress(*SHARD_ERRORS):
                    self._run(name_without, partial(_copy_home, row=row))
            return HomeState(*state)
        if down:
            # a shard that did not answer may hold the only record (its own pair's)
            first_down, error = down[0]
            raise ShardDown(first_down, detail=str(error))
        if not answered_none:
            raise ShardDown(order[0], detail="no shard's copy of the homes is complete")
        return None

    def _known(self, home: str) -> str:
        if home not in self.shards:
            # a shard being added: processes still on the old list cannot reach its pairs
            # until they run the new one (or a shard was removed with pairs on it)
            raise ShardDown(home, detail=f"shard {home!r} is not among this process's shards "
                                         f"({', '.join(self.names)})")
        return home

    def is_complete(self, name: str) -> bool:
        """Whether the shard's copy of the homes is complete (cached once it is)."""
        if self._complete.get(name):
            return True
        identity = self._run(name, lambda store: store.shard_identity())
        complete = identity is not None and identity.homes_complete is not None
        self._complete[name] = complete
        return complete

    # -- births ---------------------------------------------------------------------------

    def _birth(self, queue: str, tenant: str, proposed: str) -> str:
        try:
            born = self._run(self.default, lambda store: store.home_birth_within_cap(
                queue, tenant, proposed, self.cap))
        except SHARD_ERRORS as exc:
            raise ShardDown(self.default, detail=str(exc)) from exc
        if born is None:
            # the default shard's copy of the homes counts the tenant's queues on every shard
            raise QuotaExceeded(
                f"tenant {tenant!r} already has {self.cap} queues "
                f"(TIERQ_MAX_QUEUES_PER_TENANT); queue {queue!r} would be one more",
                details=[{"field": "queue",
                          "message": f"tenant {tenant!r} is at its cap of {self.cap} queues"}])
        home = self._known(born)
        try:  # the home must know before any of its tasks is written
            recorded = self._run(home, lambda store: store.home_record(queue, tenant, home))
        except SHARD_ERRORS as exc:
            raise ShardDown(home, detail=str(exc)) from exc
        if recorded != home:
            raise HomeConflict(f"pair ({queue!r}, {tenant!r}): the default shard records "
                               f"home {home!r}, shard {home!r} records {recorded!r}")
        for name in self.names:
            if name in (self.default, home):
                continue
            # a copy that fails is healed by a later lookup (see the module's text)
            with contextlib.suppress(*SHARD_ERRORS):
                self._run(name, lambda store: store.home_record(queue, tenant, home))
        return home

    def record_at_home(self, queue: str, tenant: str, home: str,
                       conn: psycopg.Connection | None = None) -> None:
        """Make sure the home's own copy names it (in the caller's transaction on the home,
        e.g. the one registering the pair): a pair being forgotten meanwhile keeps its
        home while it has rows."""
        if not self.sharded:
            return
        recorded = self.shards[home].home_record(queue, tenant, home, conn)
        if recorded != home:
            self.invalidate(queue, tenant)
            raise HomeConflict(f"pair ({queue!r}, {tenant!r}) is recorded on shard "
                               f"{home!r} as living on {recorded!r}")

    # -- forgetting and copying ------------------------------------------------------------

    def forget_elsewhere(self, queue: str, tenant: str, home: str) -> list[str]:
        """Drop the pair's home from every shard but ``home`` (whose own record the caller
        dropped in the transaction that found the pair without rows); the shards that did
        not answer (their stale copies name the same home, which is harmless and dropped by
        the next pass)."""
        self.invalidate(queue, tenant)
        missed = []
        for name in self.names:
            if name == home:
                continue
            try:
                self._run(name, lambda store: store.home_forget(queue, tenant, home))
            except SHARD_ERRORS:
                missed.append(name)
        return missed

    def copy_into(self, target: str, *, source: str | None = None, complete: bool = True,
                  progress: Callable[[CopyProgress], None] | None = None) -> CopyProgress:
        """Copy every home recorded on ``source`` (default: the default shard) into
        ``target`` and mark the target's copy complete: the step that puts a shard added to
        a running deployment in service for lookups. Run it once every process knows the
        new shard (births then record there too)."""
        origin = self.shards[source or self.default]
        copied = new_here = 0
        after = ("", "")
        while True:
            page: list[HomeRow] = origin.homes_page(after, COPY_PAGE)
            if not page:
                break
            new_here += self.shards[target].homes_copy(page)
            copied += len(page)
            after = (page[-1].queue, page[-1].tenant)
            if progress is not None:
                progress(CopyProgress(copied, new_here))
        if complete:
            self.shards[target].shard_homes_complete()
            self._complete[target] = True
        return CopyProgress(copied, new_here)

    def sync(self, progress: Callable[[str], None] | None = None) -> SyncSummary:
        """Put every shard in service: name each database after its shard, record each shard
        as the home of the pairs registered on it (a deployment that had one shard has no
        home records), copy every shard's homes into every other shard and mark each copy
        complete. Idempotent; run by the migration step after every deploy that changes the
        shards. Raises ``ShardDown`` when a shard does not answer (nothing is marked
        complete then, and lookups keep asking every shard) and ``HomeConflict`` when a
        database already carries another shard's name or a pair is registered on a shard
        that is not its home."""
        say = progress or (lambda _message: None)
        adopted = copied = 0
        try:
            for name, store in self.shards.items():
                named = store.shard_identity_claim(name)
                if named != name:
                    raise HomeConflict(f"the database of shard {name!r} is shard {named!r}: "
                                       "two shard names point at one database")
                adopted += store.homes_adopt_registry(name)
                strays = store.homes_elsewhere_registered(name)
                if strays:
                    listed = ", ".join(f"({h.queue!r}, {h.tenant!r}) → {h.shard!r}"
                                       for h in strays[:5])
                    raise HomeConflict(f"shard {name!r} registers pairs whose home is "
                                       f"another shard: {listed}")
            for target in self.names:
                for source in self.names:
                    if source != target:
                        result = self.copy_into(target, source=source, complete=False)
                        copied += result.new_here
                say(f"shard {target}: homes copied")
            for name, store in self.shards.items():
                store.shard_homes_complete()
                self._complete[name] = True
        except SHARD_ERRORS as exc:
            raise ShardDown(name, detail=str(exc)) from exc
        return SyncSummary(shards=len(self.names), adopted=adopted, copied=copied)


def _copy_home(store: TaskStore, *, row: HomeRow) -> int:
    return store.homes_copy([row])
