"""Cron schedules: each schedule keeps its next occurrences installed as ordinary keyed
delayed tasks, key ``<name>/<config_hash>/<epoch_ms>``; the delayed mover makes each one
ready at its time and workers claim it like any task (the claimed task's ``key`` tells which
occurrence it is).

A schedule is named per tenant: its key is (tenant, name), and its occurrences are tasks of
that tenant. A PUT writes the row of the tenant it is for (the upsert's conflict target is
the whole key) while holding that schedule's lock, so who owns a schedule is decided by the
same statement that writes it: there is no separate check a concurrent PUT could slip past,
and no caller can replace, read or remove another tenant's schedule of the same name.

Installing (a ``PUT`` in its transaction; a ``cron_tick`` in one transaction per slice of
due schedules, each schedule in a savepoint of its own):

1. Withdraw the occurrences of older config hashes that were never claimed: delayed and cold
   ones, and warm ones still waiting in the Valkey ready set (taken out with
   ``WarmTier.remove_ready``, which leaves a claimed task alone). An occurrence a worker has
   claimed, or one that is retrying after a failed attempt, runs to its end. A disabled or
   removed schedule withdraws all of its pending occurrences this way.
2. Insert the next occurrences in chunks with ``ON CONFLICT DO NOTHING`` on the live-key
   index: ``horizon`` of them at least, and every occurrence due within the next few ticks
   (so a period shorter than the tick interval loses nothing). Two installs at once create
   no duplicate: the second finds the first's keys and inserts nothing for them.
3. Remember how far the current hash is installed: a later tick installs only later
   instants, so an occurrence that already ran and left the table is never installed again.
4. Record when the tick next has work for the schedule (``tick_at_ms``, see
   ``next_tick_ms``): the tick reads only the schedules due, on an index, so an idle
   schedule costs it nothing. A removed schedule whose occurrences outlive it (one running)
   is kept as a remnant (``tierq_schedule_remnants``) until they are gone.

Bounds on what is installed:

- never later than ``MAX_DELAY_SECONDS`` ahead (366 days, the bound of an enqueued task's
  ``run_at``): a yearly schedule's next instant is installed once it comes within it;
- at most ``TIERQ_SCHEDULE_MAX_INSTALLED_BYTES`` of payload ahead per schedule (occurrences
  x payload bytes). A PUT whose install would hold more (a large ``horizon``, or a frequent
  schedule's occurrences within the lookahead) is refused with 422 naming the most that
  fits; a tick installs at most what fits (a cron whose bursts hold more than the PUT saw
  installs the rest at later ticks, and what falls between two ticks is skipped, logged);
- at most ``TIERQ_MAX_SCHEDULES_PER_TENANT`` schedules per tenant: a PUT of one more is 409
  ``quota_exceeded``, checked under a per-tenant lock.

A config hash covers everything that decides the occurrences: when (cron, period or daily
times, and the time zone), where (queue, tenant) and what (payload, priority). Changing any
of them replaces the pending occurrences; changing ``horizon`` only adds or keeps some.

Time zones and daylight saving (cron and daily; ``every_seconds`` is a fixed grid of UTC
instants anchored at the Unix epoch). Times are wall-clock times in ``timezone``:

- a local time that does not exist (spring forward: in Europe/Berlin the clocks jump from
  02:00 to 03:00 on the last Sunday of March) fires once, at the first valid instant after
  the gap: the moment the clocks jump (03:00 local). Several times of one schedule inside
  the same gap collapse into that one run;
- a local time that happens twice (fall back: in Europe/Berlin 02:00-03:00 repeats on the
  last Sunday of October) fires once, at its first occurrence (summer time); the repeated
  hour does not fire it again;
- on every other day a time fires at its wall-clock time (a daily 02:30 stays at 02:30 local
  all year; its UTC instant moves by an hour twice a year).

Missed occurrences are not made up: a tick installs instants after "now". If no tick runs for
longer than what was installed ahead (an outage), the instants in between are skipped; the
ones already installed run late, when the delayed mover next runs.

If an install is rolled back (its transaction, or a tick's savepoint) after warm occurrences
were taken out of Valkey, their rows are still ``warm`` in Postgres and the reaper's
reconciler re-dispatches them after its grace period (at-least-once, nothing lost).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import orjson
from pydantic import ValidationError

from tierq.core.ids import uuid7
from tierq.core.json_text import has_nul
from tierq.core.ordering import Place, place
from tierq.core.pointers import looks_like_pointer
from tierq.dal.store.rows import LiveOccurrence, ScheduleRow
from tierq.dal.task_store import Conn
from tierq.errors import InvalidInput, NotFound, PayloadTooLarge, QuotaExceeded
from tierq.logic import masters_down, tiering
from tierq.logic.context import Context, from_ms, to_datetime, to_ms
from tierq.logic.homes import require_here
from tierq.models.bounds import MAX_DELAY_SECONDS
from tierq.models.names import DEFAULT_TENANT
from tierq.models.schedules import (
    DEFAULT_TIMEZONE,
    MIN_INSTALLED_SHOWN,
    SCHEDULE_NAME_PATTERN,
    InstalledOccurrence,
    ScheduleIn,
    ScheduleRemoved,
    ScheduleView,
    cron_iterator,
    parse_daily_time,
    zone,
)

logger = logging.getLogger(__name__)

INSERT_CHUNK = 200
# Ticks install every occurrence due within max(LOOKAHEAD_TICKS ticks, MIN_LOOKAHEAD_SECONDS)
# besides the `horizon` next ones, at most MAX_OCCURRENCES_PER_INSTALL at a time.
LOOKAHEAD_TICKS = 3
MIN_LOOKAHEAD_SECONDS = 120.0
MAX_OCCURRENCES_PER_INSTALL = 1000
HASH_VERSION = 1
_NAME = re.compile(SCHEDULE_NAME_PATTERN)


# -- when: timing and the daylight-saving rule ---------------------------------------------


def local_to_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a naive wall-clock time of ``tz`` fires at (module docstring: a
    nonexistent time fires when the clocks jump, an ambiguous one at its first occurrence)."""
    first = wall.replace(tzinfo=tz, fold=0).timestamp()
    second = wall.replace(tzinfo=tz, fold=1).timestamp()
    if first <= second:  # exists (equal), or happens twice (fold 0 is the earlier)
        return datetime.fromtimestamp(first, UTC)
    # In a gap fold 0 reads the wall with the offset before the jump (the later instant),
    # fold 1 with the offset after it (the earlier). The jump lies between: the first
    # instant whose wall-clock reading has reached `wall`.
    lo, hi = int(second), int(first)  # the jump is in (lo, hi]; transitions are whole seconds
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: exactly one of cron, every_ms or daily."""

    cron: str | None = None
    every_ms: int | None = None
    daily: tuple[time, ...] = ()
    timezone: str = DEFAULT_TIMEZONE

    @classmethod
    def of_body(cls, body: ScheduleIn) -> Timing:
        return cls(
            cron=body.cron,
            every_ms=None if body.every_seconds is None else round(body.every_seconds * 1000),
            daily=tuple(parse_daily_time(t) for t in body.daily or ()),
            timezone=DEFAULT_TIMEZONE if body.every_seconds is not None
            else body.timezone or DEFAULT_TIMEZONE,
        )

    @classmethod
    def of_row(cls, row: ScheduleRow) -> Timing:
        return cls(
            cron=row.cron,
            every_ms=row.every_ms,
            daily=tuple(parse_daily_time(t) for t in row.daily_times or ()),
            timezone=row.timezone,
        )

    def _instant_ms(self, wall: datetime, tz: ZoneInfo) -> int:
        if self.timezone == "UTC":
            return int(wall.replace(tzinfo=UTC).timestamp() * 1000)
        return int(local_to_instant(wall, tz).timestamp() * 1000)

    def candidates(self, after_ms: int) -> Iterator[int]:
        """Instants (epoch ms) in non-decreasing order, from around ``after_ms`` on; the
        caller filters what is not strictly after it and repeats (collapsed gap times)."""
        if self.every_ms is not None:
            k = after_ms // self.every_ms + 1
            while True:
                yield k * self.every_ms
                k += 1
        tz = zone(self.timezone)
        wall_start = datetime.fromtimestamp(after_ms / 1000, tz).replace(tzinfo=None)
        if self.cron is not None:
            from croniter import CroniterError  # (only where cron fires: see cron_iterator)

            walls = cron_iterator(self.cron, wall_start)
            while True:
                try:
                    wall = walls.get_next()
                except CroniterError:  # no further match (within croniter's search window)
                    return
                yield self._instant_ms(wall, tz)
        day = wall_start.date()
        while True:
            for at in self.daily:
                yield self._instant_ms(datetime.combine(day, at), tz)
            day += timedelta(days=1)


def occurrences(timing: Timing, after_ms: int, *, at_least: int, through_ms: int | None = None,
                limit: int = MAX_OCCURRENCES_PER_INSTALL,
                until_ms: int | None = None) -> list[int]:
    """The instants (epoch ms) strictly after ``after_ms``: at least ``at_least`` of them and
    every one up to ``through_ms``, at most ``limit``, none after ``until_ms``."""
    out: list[int] = []
    for instant in timing.candidates(after_ms):
        if instant <= after_ms or (out and instant == out[-1]):
            continue
        if until_ms is not None and instant > until_ms:
            break
        if len(out) >= at_least and (through_ms is None or instant > through_ms):
            break
        out.append(instant)
        if len(out) >= limit:
            break
    return out


# -- what: validation and the config hash ----------------------------------------------------


def check_name(name: str) -> None:
    if _NAME.fullmatch(name) is None:
        raise InvalidInput.field(
            "name", f"{name!r} is not a schedule name: 1-64 of A-Z a-z 0-9 _ . -"
        )


def parse_body(body: ScheduleIn | Mapping[str, Any]) -> ScheduleIn:
    """The PUT body as a model; InvalidInput naming each offending field."""
    if isinstance(body, ScheduleIn):
        return body
    try:
        return ScheduleIn.model_validate(body)
    except ValidationError as exc:
        details = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "body"
            message = str(err["msg"]).removeprefix("Value error, ")
            details.append({"field": field, "message": message})
        summary = "; ".join(f"{d['field']}: {d['message']}" for d in details)
        raise InvalidInput(summary, details=details) from None


def encode_payload(ctx: Context, payload: Any) -> str:
    """The payload as canonical JSON text (sorted keys), checked like an enqueued task's."""
    try:
        text = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError as exc:
        raise InvalidInput.field("payload", f"not JSON-serialisable: {exc}") from exc
    if has_nul(text.encode()):
        raise InvalidInput.field(
            "payload", "contains a NUL character (\\u0000), which cannot be stored"
        )
    if looks_like_pointer(payload):  # its object would have to outlive every occurrence
        raise InvalidInput.field("payload", "a schedule's payload is kept inline: it cannot "
                                 "be a big payload's pointer")
    limit = ctx.settings.max_payload_bytes
    size = len(text.encode())  # bytes, as an enqueued task's payload is counted
    if size > limit:
        raise PayloadTooLarge(
            f"payload is {size} bytes once serialised; the limit is {limit}",
            details=[{"field": "payload", "message": "too large"}],
        )
    return text


def config_hash(body: ScheduleIn, timing: Timing, payload_json: str) -> str:
    """16 hex digits over everything that decides the occurrences (not horizon, not
    enabled)."""
    canonical = orjson.dumps({
        "v": HASH_VERSION,
        "queue": body.queue,
        "tenant": body.tenant or DEFAULT_TENANT,
        "payload": orjson.Fragment(payload_json),
        "priority": body.priority,
        "cron": timing.cron,
        "every_ms": timing.every_ms,
        "daily": [t.isoformat() for t in timing.daily],
        "timezone": None if timing.every_ms is not None else timing.timezone,
    }, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:16]


def occurrence_key(name: str, hash_: str, fire_at_ms: int) -> str:
    return f"{name}/{hash_}/{fire_at_ms}"


# -- install, withdraw ------------------------------------------------------------------------


@dataclass
class InstallResult:
    installed: int = 0
    withdrawn: int = 0
    installed_through_ms: int | None = None


def withdraw(ctx: Context, conn: Conn, tenant: str, name: str,
             keep_hash: str | None, *, remember_down: bool = False) -> int:
    """Delete the never-claimed occurrences of schedule (tenant, name) of every hash but
    ``keep_hash`` (None: all). Returns how many were withdrawn. ``remember_down`` (the
    tick's): a Valkey master remembered down is not asked, and one that fails is
    remembered (``masters_down.asking``); either raises ``WarmTierUnavailable``."""
    rows = ctx.store.lock_pending_occurrences(conn, tenant, name, keep_hash)
    ids: list[str] = []
    warm: dict[tuple[str, str], list[Place]] = defaultdict(list)
    for r in rows:
        if r.state == "warm":
            warm[(r.queue, r.tenant)].append(place(r.priority, r.seq, str(r.id)))
        else:
            ids.append(str(r.id))
    for (queue, tenant), places in warm.items():
        # only those still waiting: a claimed one is running and stays
        with masters_down.asking(ctx, queue, tenant) if remember_down else nullcontext():
            ids.extend(ctx.warm.remove_ready(queue, tenant, places))
    if not ids:
        return 0
    return len(ctx.store.delete_occurrence_tasks(conn, ids))


def _insert(ctx: Context, conn: Conn, row: ScheduleRow, instants: Sequence[int],
            now: float, attempts: dict[str, int] | None = None) -> int:
    """Insert occurrences as delayed tasks (with their ledger rows), in chunks; existing
    live keys win. Returns how many were created. ``attempts``: the queues' max_attempts
    read so far in the caller's transaction (a tick's slice reads each queue's once)."""
    name, hash_ = row.name, row.config_hash
    max_attempts = attempts.get(row.queue) if attempts is not None else None
    if max_attempts is None:
        # read on this transaction's connection: taking a second pooled connection while
        # the transaction is open can starve a small pool
        stored = ctx.store.queue_settings_row(row.queue, conn=conn)
        max_attempts = ctx.queue_settings.effective(stored).max_attempts
        if attempts is not None:
            attempts[row.queue] = max_attempts
    created = 0
    for start in range(0, len(instants), INSERT_CHUNK):
        chunk = list(instants[start:start + INSERT_CHUNK])
        created += len(ctx.store.insert_occurrences(
            conn,
            name=name,
            config_hash=hash_,
            queue=row.queue,
            tenant=row.tenant,
            priority=row.priority,
            payload=row.payload,
            max_attempts=max_attempts,
            now=to_datetime(now),
            task_ids=[str(uuid7()) for _ in chunk],
            keys=[occurrence_key(name, hash_, ms) for ms in chunk],
            fire_at_ms=chunk,
        ))
    return created


def lookahead_ms(ctx: Context) -> int:
    return int(max(LOOKAHEAD_TICKS * ctx.settings.cron_every, MIN_LOOKAHEAD_SECONDS) * 1000)


def payload_bytes(payload_json: str) -> int:
    """A payload's size as the install budget counts it: its compact JSON, in bytes (what
    ``encode_payload`` checks; the jsonb text PostgreSQL hands back is re-encoded)."""
    return len(orjson.dumps(orjson.loads(payload_json)))


def most_installed(ctx: Context, size: int) -> int:
    """How many occurrences of a payload of ``size`` bytes one schedule may have installed
    ahead: the budget ``TIERQ_SCHEDULE_MAX_INSTALLED_BYTES`` over the size (at least 1), and
    never more than MAX_OCCURRENCES_PER_INSTALL."""
    fits = ctx.settings.schedule_max_installed_bytes // max(size, 1)
    return max(1, min(MAX_OCCURRENCES_PER_INSTALL, fits))


def planned(ctx: Context, timing: Timing, horizon: int, now_ms: int, *,
            limit: int = MAX_OCCURRENCES_PER_INSTALL) -> list[int]:
    """The instants an install at ``now_ms`` wants installed: ``horizon`` of them at least
    and every one within the lookahead, at most ``limit``, none later than
    MAX_DELAY_SECONDS ahead (the bound of an enqueued task's ``run_at``)."""
    return occurrences(timing, now_ms, at_least=horizon,
                       through_ms=now_ms + lookahead_ms(ctx), limit=limit,
                       until_ms=now_ms + MAX_DELAY_SECONDS * 1000)


def next_tick_ms(ctx: Context, timing: Timing, wanted: Sequence[int], through: int | None,
                 now_ms: int) -> int | None:
    """When the tick next has work for an enabled schedule whose ``wanted`` instants are
    installed through ``through``, at ``now_ms`` at the soonest (the next pass):

    ==========================================  ==========================================
    the schedule                                due at
    ==========================================  ==========================================
    has instants installed                      its next one (one fewer left ahead), or
                                                when the installed ones end within the
                                                lookahead, whichever comes first
    fires next beyond MAX_DELAY_SECONDS         when that instant comes within it
    never fires again (a cron without a match)  never (None)
    ==========================================  ==========================================
    """
    if wanted:
        end = through if through is not None else wanted[-1]
        due = min(wanted[0], end - lookahead_ms(ctx))
    else:
        following = occurrences(timing, now_ms, at_least=1, limit=1)
        if not following:
            return None
        due = following[0] - MAX_DELAY_SECONDS * 1000
    return max(due, now_ms)


def install(ctx: Context, conn: Conn, row: ScheduleRow, now: float, *,
            stale: bool = True, attempts: dict[str, int] | None = None,
            remember_down: bool = False) -> InstallResult:
    """Bring one schedule's installed occurrences up to date, inside the caller's
    transaction (which holds the schedule's lock), and record when the tick next has work
    for it (``tick_at_ms``: ``next_tick_ms``; the next tick when occurrences of another
    config remain; never, for a disabled schedule with none left). ``stale`` False: the
    caller saw no occurrence of another config in the ledger, so none is withdrawn.
    ``attempts``: the queues' max_attempts read so far in this transaction (``_insert``);
    ``remember_down``: as ``withdraw`` takes it."""
    name, tenant, hash_ = row.name, row.tenant, row.config_hash
    now_ms = to_ms(now)
    result = InstallResult()
    if stale:
        result.withdrawn = withdraw(ctx, conn, tenant, name, hash_ if row.enabled else None,
                                    remember_down=remember_down)
    through = row.installed_through_ms if row.installed_hash == hash_ else None
    # forget finished occurrences first: a ledger row must never outlive its task's key
    ctx.store.prune_occurrences(conn, tenant, name)
    tick_at: int | None = None
    if row.enabled:
        timing = Timing.of_row(row)
        size = payload_bytes(row.payload)
        limit = most_installed(ctx, size)
        wanted = planned(ctx, timing, row.horizon, now_ms, limit=limit + 1)
        if len(wanted) > limit:
            wanted = wanted[:limit]
            if limit < MAX_OCCURRENCES_PER_INSTALL:  # cut by the bytes, not the count
                logger.warning(
                    "schedule %r of tenant %r: %d occurrences of %d bytes fill its install "
                    "budget (TIERQ_SCHEDULE_MAX_INSTALLED_BYTES); later ones wait for later "
                    "ticks", name, tenant, limit, size)
        new = [ms for ms in wanted if through is None or ms > through]
        if new:
            result.installed = _insert(ctx, conn, row, new, now, attempts)
        if wanted:
            through = wanted[-1] if through is None else max(through, wanted[-1])
        installed_hash: str | None = hash_
        tick_at = next_tick_ms(ctx, timing, wanted, through, now_ms)
    else:
        installed_hash, through = None, None
    # while occurrences of another config still run (or were held), the next tick comes
    # back to withdraw or forget them
    ctx.store.mark_installed(conn, tenant, name, installed_hash, through, tick_at,
                             hash_ if row.enabled else None, now_ms, to_datetime(now))
    result.installed_through_ms = through
    return result


def _register_pair(ctx: Context, queue: str, tenant: str, *, set_mode: bool = True) -> None:
    """Register (queue, tenant) as enqueue does; a pair new to this process starts (or,
    after Valkey lost its data, returns) in warm mode when it has no cold work. Without
    ``set_mode`` Valkey is not asked (its master is known down): a pair without a mode
    reads as cold, and the cold -> warm mover sets it later."""
    for new_tenant in ctx.pairs.ensure(queue, [tenant]):
        if set_mode:
            tiering.refill(ctx, queue, new_tenant)


# -- operations -------------------------------------------------------------------------------


def check_install_budget(ctx: Context, timing: Timing, horizon: int, payload_json: str,
                         now_ms: int) -> None:
    """Refuse (InvalidInput, 422) a schedule whose install would hold more payload bytes
    than ``TIERQ_SCHEDULE_MAX_INSTALLED_BYTES``: its ``horizon`` occurrences, or the ones it
    fires within the lookahead (a frequent schedule), times the payload's size."""
    budget = ctx.settings.schedule_max_installed_bytes
    size = payload_bytes(payload_json)
    # (at least one: a schedule whose next instant lies beyond MAX_DELAY_SECONDS installs
    # it later)
    count = max(1, len(planned(ctx, timing, horizon, now_ms)))
    if count * size <= budget:
        return
    fits = budget // max(size, 1)
    message = (f"{count} occurrences to install (horizon {horizon}, and every one within "
               f"the next {lookahead_ms(ctx) // 1000} s) x a payload of {size} bytes is "
               f"{count * size} bytes; a schedule may hold {budget} "
               f"(TIERQ_SCHEDULE_MAX_INSTALLED_BYTES): "
               + (f"at most {fits} occurrences of this payload" if fits
                  else "the payload alone is larger"))
    field = "horizon" if count <= horizon and fits else "payload"
    raise InvalidInput(message, details=[{"field": field, "message": message}])


def check_schedule_quota(ctx: Context, conn: Conn | None, tenant: str, name: str) -> None:
    """Refuse (QuotaExceeded, 409) a new schedule of a tenant that has
    ``TIERQ_MAX_SCHEDULES_PER_TENANT`` already; replacing one of its schedules is not one
    more. With ``conn`` (inside the PUT's transaction, holding the schedule's lock) the
    tenant's lock is taken first, so two PUTs at once cannot both pass the cap."""
    cap = ctx.settings.max_schedules_per_tenant
    if cap <= 0 or ctx.store.schedule_by_name(tenant, name, conn=conn) is not None:
        return
    if conn is not None:
        ctx.store.lock_tenant_schedules(conn, tenant)
    if ctx.store.count_tenant_schedules(tenant, cap, conn=conn) >= cap:
        raise QuotaExceeded(
            f"tenant {tenant!r} already has {cap} schedules "
            f"(TIERQ_MAX_SCHEDULES_PER_TENANT); schedule {name!r} would be one more",
            details=[{"field": "name",
                      "message": f"tenant {tenant!r} is at its cap of {cap} schedules"}])


def put_schedule(ctx: Context, name: str,
                 body: ScheduleIn | Mapping[str, Any]) -> tuple[ScheduleView, bool]:
    """Create or replace the schedule ``name`` of the body's tenant (default ``_``) and
    install its occurrences now. Returns the view and whether it was created. Bad input
    raises InvalidInput and writes nothing."""
    check_name(name)
    model = parse_body(body)
    payload_json = encode_payload(ctx, model.payload)
    timing = Timing.of_body(model)
    tenant = model.tenant or DEFAULT_TENANT
    now = ctx.now()
    if model.enabled:
        check_install_budget(ctx, timing, model.horizon, payload_json, to_ms(now))
    # before the queue is registered, so that a refused PUT leaves nothing behind; checked
    # again under the tenant's lock below, where it counts
    check_schedule_quota(ctx, None, tenant, name)
    _register_pair(ctx, model.queue, tenant)
    with ctx.db.transaction() as conn:
        if ctx.id_tag is not None:  # sharded: not a pair moved off this shard meanwhile
            require_here(ctx.store, conn, model.queue, [tenant])
        ctx.store.schedule_lock(conn, tenant, name)
        check_schedule_quota(ctx, conn, tenant, name)
        ctx.store.forget_remnant(conn, tenant, name)  # its occurrences are this row's now
        row, created = ctx.store.upsert_schedule(
            conn,
            name=name,
            queue=model.queue,
            tenant=tenant,
            payload=payload_json,
            priority=model.priority,
            cron=timing.cron,
            every_ms=timing.every_ms,
            daily_times=model.daily,
            timezone=timing.timezone,
            horizon=model.horizon,
            enabled=model.enabled,
            config_hash=config_hash(model, timing, payload_json),
            now=to_datetime(now),
        )
        install(ctx, conn, row, now)
    return get_schedule(ctx, name, tenant), created


def prepare_tick(ctx: Context, queue: str | None, tenant: str, enabled: bool, *,
                 set_mode: bool = True) -> None:
    """Register the pair an enabled schedule installs into (``queue`` and ``enabled`` as
    the tick read them), before the tick's transaction: registering may take another
    pooled connection, which a connection held by an open transaction must not wait for.
    ``set_mode``: as ``_register_pair`` takes it."""
    if enabled and queue is not None:
        _register_pair(ctx, queue, tenant, set_mode=set_mode)


Found = tuple[ScheduleRow, bool] | None  # a locked schedule's row and stale flag; None: removed


def lock_for_tick(ctx: Context, conn: Conn,
                  keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Found]:
    """Take the locks of the schedules ``keys`` (tenant, name) that no other tick or PUT
    holds, inside the caller's transaction, and read their rows (two statements for the
    whole slice, the read after the locks). Returns the schedules locked, each with what
    ``tick_locked`` takes; one left out is busy (its holder does the work)."""
    locked = ctx.store.schedules_try_lock(conn, keys)
    rows = ctx.store.schedules_for_tick(conn, locked)
    return {key: rows.get(key) for key in locked}


def tick_locked(ctx: Context, conn: Conn, tenant: str, name: str, found: Found,
                attempts: dict[str, int] | None = None) -> InstallResult:
    """One tick of one schedule whose lock the caller's transaction holds (or of the
    leftovers of a removed one: ``found`` None); its commit makes it count
    (``prepare_tick`` first). ``attempts``: as ``install`` takes it. Its withdrawals
    skip and remember Valkey masters that do not answer (``masters_down``)."""
    if found is not None:
        row, stale = found
        return install(ctx, conn, row, ctx.now(), stale=stale, attempts=attempts,
                       remember_down=True)
    # removed: withdraw what was locked (and so skipped) when it was removed
    result = InstallResult(withdrawn=withdraw(ctx, conn, tenant, name, None,
                                              remember_down=True))
    _settle_remnant(ctx, conn, tenant, name)
    return result


def _settle_remnant(ctx: Context, conn: Conn, tenant: str, name: str) -> None:
    """After a removed schedule's occurrences were withdrawn: forget the finished ones, and
    keep a remnant (due at the next tick) while some remain, none once they are gone."""
    ctx.store.prune_occurrences(conn, tenant, name)
    if ctx.store.schedule_has_occurrences(conn, tenant, name):
        ctx.store.keep_remnant(conn, tenant, name, to_ms(ctx.now()))
    else:
        ctx.store.forget_remnant(conn, tenant, name)


def _not_found(name: str, tenant: str) -> NotFound:
    return NotFound(f"no schedule named {name!r} in tenant {tenant!r}")


def delete_schedule(ctx: Context, name: str, tenant: str | None = None) -> ScheduleRemoved:
    """Remove the schedule ``name`` of ``tenant`` (default ``_``) and withdraw its pending
    occurrences (a claimed one finishes)."""
    check_name(name)
    tenant = tenant or DEFAULT_TENANT
    with ctx.db.transaction() as conn:
        ctx.store.schedule_lock(conn, tenant, name)
        if ctx.store.schedule_by_name(tenant, name, conn=conn) is None:
            raise _not_found(name, tenant)
        withdrawn = withdraw(ctx, conn, tenant, name, None)
        ctx.store.delete_schedule_row(conn, tenant, name)
        _settle_remnant(ctx, conn, tenant, name)
    return ScheduleRemoved(name=name, tenant=tenant, removed_occurrences=withdrawn)


def _views(ctx: Context, rows: Sequence[ScheduleRow]) -> list[ScheduleView]:
    now_ms = to_ms(ctx.now())
    live: dict[tuple[str, str], list[LiveOccurrence]] = defaultdict(list)
    if rows:
        # bounded per schedule in SQL: with nobody claiming, every tick installs more
        for r in ctx.store.live_occurrences(
                rows, [max(row.horizon, MIN_INSTALLED_SHOWN) for row in rows]):
            live[(r.schedule_tenant, r.schedule)].append(r)
    out = []
    for row in rows:
        timing = Timing.of_row(row)
        upcoming = occurrences(timing, now_ms, at_least=row.horizon) if row.enabled \
            else []
        out.append(ScheduleView(
            name=row.name,
            queue=row.queue,
            tenant=row.tenant,
            payload=orjson.loads(row.payload),
            priority=row.priority,
            cron=row.cron,
            every_seconds=None if row.every_ms is None else row.every_ms / 1000,
            daily=row.daily_times,
            timezone=None if row.every_ms is not None else row.timezone,
            horizon=row.horizon,
            enabled=row.enabled,
            config_hash=row.config_hash,
            created_at=row.created_at,
            updated_at=row.updated_at,
            last_tick_at=row.last_tick_at,
            next_occurrences=[from_ms(ms) for ms in upcoming],
            installed=[
                InstalledOccurrence(
                    at=from_ms(o.fire_at_ms), key=o.key, task_id=o.task_id,
                    queue=o.queue, tenant=o.tenant, state=o.state,
                    current=o.config_hash == row.config_hash,
                )
                for o in live.get((row.tenant, row.name), [])
            ],
            installed_count=(live[(row.tenant, row.name)][0].total
                             if live.get((row.tenant, row.name)) else 0),
        ))
    return out


def get_schedule(ctx: Context, name: str, tenant: str | None = None) -> ScheduleView:
    """The schedule ``name`` of ``tenant`` (default ``_``)."""
    check_name(name)
    tenant = tenant or DEFAULT_TENANT
    row = ctx.store.schedule_by_name(tenant, name)
    if row is None:
        raise _not_found(name, tenant)
    return _views(ctx, [row])[0]


def list_schedules(ctx: Context, tenant: str | None = None) -> list[ScheduleView]:
    """Every schedule (of ``tenant`` only, when given), in (tenant, name) order."""
    return list(iter_schedules(ctx, tenant=tenant))


def iter_schedules(ctx: Context, *, tenant: str | None = None,
                   after: tuple[str, str] | None = None,
                   chunk: int = 50) -> Iterator[ScheduleView]:
    """Schedules after ``after`` (tenant, name) in (tenant, name) order, of one tenant or
    of all, read ``chunk`` at a time (a page that fills up early reads little more)."""
    position = after or ("", "")
    while True:
        rows = ctx.store.schedules_page(tenant, position, chunk)
        yield from _views(ctx, rows)
        if len(rows) < chunk:
            return
        position = (rows[-1].tenant, rows[-1].name)
