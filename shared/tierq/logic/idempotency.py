"""Idempotency keys: a request repeated with the same key gets the first answer and changes
nothing.

A key is scoped by caller, route and queue (:func:`scope_key`), so nobody can replay
another's response. The caller is the tenant (or the admin) and, when its token names one,
the subject: two services of one tenant, or two admins, never share a key. Where a repeat
would create a second task (enqueues, dead-letter replays) the record lives in PostgreSQL and
is written in the same transaction as the tasks (:class:`PgClaim`); the other lease routes
keep theirs in Valkey (:class:`ValkeyClaim`), where a lost record only means the repeat runs
again and finds the lease already settled.

The engines take the key on each keyed operation (``enqueue``, the dead-letter replays,
``claim``, ``ack``, ``nack``, ``release``, ``heartbeat``: ``idempotency_key=``, ``caller=``,
``body_fingerprint=``), so a Python or Glue caller gets what an HTTP caller gets; the HTTP
routes only read the header and the caller's token (tierq.aws.http.idempotency). A keyed
call is a :class:`KeyedCall`; it runs through :func:`once_per_shard` (PostgreSQL records)
or :func:`once_in_valkey`.

The life of a record: :func:`claim_in_postgres` / :func:`claim_in_valkey` either hand the
request a claim (it is the first, or it takes over from an owner that died) or answer for
it:

| the key's record | the answer |
| --- | --- |
| none, or its owner's lease is over | a claim: the call runs |
| done, same body | the kept response; nothing runs |
| any state, another body | :class:`IdempotencyKeyReused` (409) |
| in progress, same body | :class:`IdempotencyInProgress` (409) |

The claimant does its work, then ``finish``es with the response; on an error it
``abandon``s the claim, so only answers are kept and a retry after a 503 runs again.

Over several PostgreSQL shards a call whose work spans shards (a batch of tenants whose
homes differ, dead letters of every tenant) runs as one part per shard
(:func:`once_per_shard`): each part's record is kept on its own shard, in the transactions
that write its tasks, under the key and the shard's name. A repeat answers the parts
already done from their records and runs the rest, so a call cut short between two shards
finishes, once, when it is retried. One more record, on the default shard, binds the key
to the call's body whichever shards its parts touch: a second body under the key is
:class:`IdempotencyKeyReused` even when its tasks would land only on shards the first
never wrote to. The binding fails open: while the default shard does not answer (or a call
with this body still holds the binding), a keyed call still runs on the shards it needs
(each part's record keeps it from running twice), and only that check is skipped.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson
import psycopg
import redis

from tierq.core.lazy import lazy_dataclass
from tierq.dal.lua_calls import IdempotencyAbandon, IdempotencyClaim, IdempotencyFinish, RecordKey
from tierq.dal.task_store import Conn
from tierq.errors import InvalidInput, TierqError, Unavailable, WarmTierFull
from tierq.logic.context import Context, to_datetime
from tierq.models.base import Replayable

if TYPE_CHECKING:
    from tierq.contract import Deployment

log = logging.getLogger(__name__)

# How long a request may work on a key before a retry may take it over. Longer than any
# request runs (the functions time out after 29 s); a takeover is safe even when the first
# owner is still alive: its commit checks the owner in the tasks' transaction and rolls back.
IN_PROGRESS_LEASE_SECONDS = 60.0
PURGE_BATCH = 5000
PURGE_BATCHES_PER_PASS = 4
CLAIM_ATTEMPTS = 3
VALKEY_PREFIX = "tq:idem:"
MAX_KEY_LENGTH = 255
KEY_PATTERN = re.compile(r"[\x21-\x7e]+")  # visible ASCII: what an HTTP header carries

Part = TypeVar("Part")
R = TypeVar("R")
M = TypeVar("M", bound=Replayable)


class IdempotencyInProgress(TierqError):
    """The first request with this key is still running; retry later."""

    status = 409
    code = "idempotency_in_progress"


class IdempotencyKeyReused(TierqError):
    """The key was used before with another request body: a conflict with what the key
    already stands for (409), not invalid input (422 means the body itself is wrong; this
    body would be taken under a fresh key)."""

    status = 409
    code = "idempotency_key_reused"


def scope_key(caller: str, route: str, queue: str, key: str, *,
              subject: str | None = None) -> bytes:
    """The record's identity: one key means one thing per caller, route and queue.
    ``caller``: the tenant (``tenant:<name>``) or ``admin``; ``subject``: whom the caller's
    token was issued to, as ``<claim>:<value>``, behind its issuer when it names one
    (tierq.aws.http.access.subject_of; None: shared by every caller of ``caller`` without
    one). The subject is hashed as the hex of its UTF-8 bytes, surrogates passed through:
    any string a token's JSON can carry (a lone surrogate too, which UTF-8 cannot encode)
    has its own scope."""
    parts: list[Any] = [caller, route, queue, key]
    if subject is not None:
        parts.insert(1, {"subject": subject.encode("utf-8", "surrogatepass").hex()})
    return hashlib.sha256(orjson.dumps(parts)).digest()


def fingerprint(body: Any) -> bytes:
    """The request body in canonical JSON (keys sorted), hashed: two bodies that differ only
    in layout or key order are the same request."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()


@lazy_dataclass(frozen=True)
class Caller:
    """Whose idempotency keys these are: the same key of two callers is two keys.

    ``owner`` is ``admin`` or ``tenant:<name>``; ``subject`` is whom the caller's token was
    issued to, as ``<claim>:<value>`` (``sub:X`` and ``client_id:X`` differ), behind its
    issuer when the token names one (tierq.aws.http.access.subject_of), or None: shared by
    every caller of ``owner`` without one. A Python caller of the engine is ``Caller()``
    (admin, no subject) unless it says otherwise."""

    owner: str = "admin"
    subject: str | None = None

    def __post_init__(self) -> None:
        if self.owner != "admin" and not (self.owner.startswith("tenant:")
                                          and len(self.owner) > len("tenant:")):
            raise InvalidInput.field("caller", "owner must be 'admin' or 'tenant:<name>', "
                                               f"not {self.owner!r}")

    @classmethod
    def of_tenant(cls, tenant: str, subject: str | None = None) -> Caller:
        """A caller pinned to ``tenant``."""
        return cls(f"tenant:{tenant}", subject)


@lazy_dataclass(frozen=True)
class KeyedCall:
    """One call under an idempotency key: its caller, operation (``route``: ``enqueue``,
    ``dlq_replay``, ``claim``, ``ack``, …), queue and key, and the fingerprint of what it
    asks (:func:`fingerprint`)."""

    caller: Caller
    route: str
    queue: str
    key: str
    fingerprint: bytes

    @property
    def scope(self) -> bytes:
        """The identity of the key's record (:func:`scope_key`)."""
        return scope_key(self.caller.owner, self.route, self.queue, self.key,
                         subject=self.caller.subject)


def check_key(key: str) -> None:
    """A key is 1 to 255 visible ASCII characters (InvalidInput naming it otherwise)."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH or KEY_PATTERN.fullmatch(key) is None:
        raise InvalidInput.field("idempotency_key", f"must be 1 to {MAX_KEY_LENGTH} visible "
                                                    "ASCII characters")


def keyed_call(route: str, queue: str, key: str | None, caller: Caller | None,
               body_fingerprint: bytes | None, body: Callable[[], Any]) -> KeyedCall | None:
    """The keyed call of an engine operation, or None without a key. ``body_fingerprint``:
    what the key is bound to as the caller framed it (the HTTP body's); None: the
    fingerprint of ``body()``, the call's own arguments."""
    if key is None:
        return None
    check_key(key)
    return KeyedCall(caller or Caller(), route, queue, key,
                     fingerprint(body()) if body_fingerprint is None else body_fingerprint)


def models_body(items: Sequence[Any]) -> Any:
    """What an operation on a list of models asks (the lease items), for its key's
    fingerprint when the caller gives none."""
    return [i.model_dump(mode="json") for i in items]


@lazy_dataclass(frozen=True)
class Kept:
    """The response a previous request with the key returned."""

    status: int
    body: Any


def _reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        "this Idempotency-Key was used with another request body; use a new key for a new "
        "request",
        details=[{"field": "Idempotency-Key", "message": "already used with another body"}],
    )


def _in_progress() -> IdempotencyInProgress:
    return IdempotencyInProgress(
        "a request with this Idempotency-Key is still running; retry after it has finished",
        details=[{"field": "Idempotency-Key", "message": "in progress"}],
    )


# --------------------------------------------------------------------------- PostgreSQL


@lazy_dataclass
class PgClaim:
    """The right to run the request of one key, held in ``tierq_idempotency``.

    ``committed`` is what an earlier owner of the key (with the same body) committed before
    it died, as it recorded it; None when nothing was committed."""

    ctx: Context
    scope_key: bytes
    fingerprint: bytes
    owner: uuid.UUID
    committed: Any = None

    def record(self, conn: Conn, response: Any, *,
               done: bool = False, status: int = 200) -> None:
        """Record ``response`` (so far) in the caller's open transaction, the one that writes
        the tasks. Raises :class:`IdempotencyInProgress` when another request has taken the
        key over meanwhile: the caller's transaction then rolls back and writes nothing."""
        now = self.ctx.now()
        if not self.ctx.store.idempotency_record(
                conn, scope_key=self.scope_key, fingerprint=self.fingerprint,
                owner=self.owner, done=done, status=status if done else None,
                response=orjson.dumps(response).decode(), now=to_datetime(now),
                lease_until=to_datetime(now + IN_PROGRESS_LEASE_SECONDS),
                expires_at=to_datetime(now + self.ctx.settings.idempotency_ttl_seconds)):
            raise _in_progress()

    def finish(self, response: Any, status: int = 200) -> None:
        """Keep the final response. Its loss (PostgreSQL gone at this moment) costs no
        duplicate: what the tasks' transaction recorded stays, and a retry after the lease
        resumes from it."""
        try:
            with self.ctx.db.transaction() as conn:
                self.ctx.store.commit_relaxed(conn)
                self.record(conn, response, done=True, status=status)
        except (Unavailable, psycopg.Error, IdempotencyInProgress) as exc:
            log.warning("idempotency record not completed: %s", exc)

    def abandon(self) -> None:
        """The request failed: forget the key when nothing was committed under it (so a retry
        runs again), else let a retry resume at once."""
        try:
            with self.ctx.db.transaction() as conn:
                self.ctx.store.commit_relaxed(conn)
                self.ctx.store.idempotency_abandon(conn, self.scope_key, self.owner,
                                                   to_datetime(self.ctx.now()))
        except (Unavailable, psycopg.Error) as exc:
            log.warning("idempotency record not released: %s", exc)


def claim_in_postgres(ctx: Context, scope: bytes, body_fingerprint: bytes) -> PgClaim | Kept:
    """Claim the key for this request, or answer it from the record (see the module)."""
    for _ in range(CLAIM_ATTEMPTS):
        owner = uuid.uuid4()
        now = ctx.now()
        with ctx.db.transaction() as conn:
            # the in-progress marker and the final copy need not wait for the WAL flush:
            # losing them in a database crash costs a 409 or a resumed retry, never a
            # duplicate (the record that counts is written in the tasks' own, durable
            # transaction)
            ctx.store.commit_relaxed(conn)
            claimed = ctx.store.idempotency_claim(
                conn, scope, body_fingerprint, owner, to_datetime(now),
                to_datetime(now + IN_PROGRESS_LEASE_SECONDS),
                to_datetime(now + ctx.settings.idempotency_ttl_seconds))
            row = None if claimed else ctx.store.idempotency_get(conn, scope)
        if claimed:
            text = claimed.response
            return PgClaim(ctx, scope, body_fingerprint, owner,
                           None if text is None else orjson.loads(text))
        if row is None:
            continue  # purged in between: claim again
        if row.expires_at.timestamp() <= now:
            continue  # expired in between
        if bytes(row.fingerprint) != body_fingerprint:
            raise _reused()
        if row.done:  # a done record holds its status and response
            return Kept(cast(int, row.status), orjson.loads(cast(str, row.response)))
        raise _in_progress()
    raise _in_progress()


def once_per_shard(deployment: Deployment, call: KeyedCall | None, shards: Sequence[str],
                   work: Callable[[str, PgClaim | None], Part], *,
                   load: Callable[[Any], Part], dump: Callable[[Part], Any]
                   ) -> tuple[dict[str, Part], bool]:
    """Run ``work(shard, claim)`` once per key for each shard of ``shards`` (in that order):
    ({shard: its part}, whether every part was answered from its record). ``work`` gets
    the claim (None without a key) and must record its part so far with
    ``claim.record(conn, ...)`` in each transaction that writes tasks; ``claim.committed``
    holds what a dead earlier owner recorded. ``dump``/``load`` turn a part into the JSON
    kept and back.

    One database keeps one record under the key; several keep one per part and the
    body's binding on the default shard (see the module)."""
    if len(deployment.engines) == 1:
        only = shards[0] if shards else deployment.default_shard
        if call is None:
            return {only: work(only, None)}, False
        part, replayed = _once_on(deployment, only, call.scope, call.fingerprint,
                                  lambda claim: work(only, claim), load, dump)
        return {only: part}, replayed
    if call is None:
        return {shard: work(shard, None) for shard in shards}, False
    bound = _bind_body(deployment, call)
    parts: dict[str, Part] = {}
    replayed = bool(shards)
    try:
        for shard in shards:
            part, kept = _once_on(deployment, shard,
                                  call.scope + b"|shard:" + shard.encode(), call.fingerprint,
                                  lambda claim, s=shard: work(s, claim),  # type: ignore[misc]
                                  load, dump)
            parts[shard] = part
            replayed = replayed and kept
    finally:
        # kept whatever happened: the key stays bound to this body for its retries
        if bound is not None:
            _finish_binding(deployment, bound)
    return parts, replayed


def _once_on(deployment: Deployment, shard: str, scope: bytes, body_fingerprint: bytes,
             work: Callable[[PgClaim], Part], load: Callable[[Any], Part],
             dump: Callable[[Part], Any]) -> tuple[Part, bool]:
    """``work`` under the key's record ``scope`` on ``shard``: (its part, whether it was
    answered from the record)."""
    claimed = deployment.on_shard(shard, lambda engine: claim_in_postgres(
        engine.ctx, scope, body_fingerprint))
    if isinstance(claimed, Kept):
        return load(claimed.body), True
    try:
        part = work(claimed)
    except BaseException:
        claimed.abandon()
        raise
    claimed.finish(dump(part))
    return part, False


def _bind_body(deployment: Deployment, call: KeyedCall) -> PgClaim | None:
    """Bind the key to this body on the default shard (:class:`IdempotencyKeyReused` when
    it is bound to another); the claim to finish after the parts, or None when there is
    nothing to finish. Fails open (see the module)."""
    default = deployment.default_shard
    try:
        bound = deployment.on_shard(default, lambda engine: claim_in_postgres(
            engine.ctx, call.scope + b"|body", call.fingerprint))
    except (Unavailable, IdempotencyInProgress) as exc:  # the body's check came first
        log.warning("idempotency key not bound to its body on shard %s: %s", default, exc)
        return None
    return bound if isinstance(bound, PgClaim) else None


def _finish_binding(deployment: Deployment, bound: PgClaim) -> None:
    """Keep the binding (its own record, no response: the parts hold the answers)."""
    default = deployment.default_shard
    try:
        deployment.on_shard(default, lambda _engine: bound.finish({}))
    except Unavailable as exc:  # its lease ends it: a retry then takes it over
        log.warning("idempotency key's binding not kept on shard %s: %s", default, exc)


def purge_expired(ctx: Context, max_batches: int = PURGE_BATCHES_PER_PASS) -> int:
    """Delete records past their expiry (the reaper's job, a bounded amount per pass: the
    rest waits for the next); returns how many."""
    before = to_datetime(ctx.now())
    total = 0
    for _ in range(max_batches):
        deleted = ctx.store.idempotency_purge(before, PURGE_BATCH)
        total += max(0, deleted)
        if deleted < PURGE_BATCH:
            break
    return total


# --------------------------------------------------------------------------- Valkey

# One hash per key, its own hash tag (one slot in cluster mode), claimed, finished and
# abandoned by the scripts lua/idem_*.lua through their typed calls (dal/lua_calls.py).


def valkey_key(scope: bytes) -> str:
    return f"{VALKEY_PREFIX}{{{scope.hex()}}}"


@lazy_dataclass
class ValkeyClaim:
    ctx: Context
    key: str
    owner: str

    def finish(self, response: Any, status: int = 200, *,
               ttl_seconds: float | None = None) -> None:
        """Keep the response for the settings' time, or ``ttl_seconds`` when shorter (a
        claim's record lives no longer than its leases)."""
        ttl: float = self.ctx.settings.idempotency_valkey_ttl_seconds
        if ttl_seconds is not None:
            ttl = min(ttl, ttl_seconds)
        ttl_ms = max(1, int(ttl * 1000))
        try:
            self.ctx.warm.call(IdempotencyFinish(RecordKey(self.key), self.owner, status,
                                                 orjson.dumps(response), ttl_ms))
        except (redis.RedisError, Unavailable) as exc:
            log.warning("idempotency record not kept in Valkey: %s", exc)

    def abandon(self) -> None:
        try:
            self.ctx.warm.call(IdempotencyAbandon(RecordKey(self.key), self.owner))
        except (redis.RedisError, Unavailable) as exc:
            log.warning("idempotency record not released in Valkey: %s", exc)


def claim_in_valkey(ctx: Context, scope: bytes,
                    body_fingerprint: bytes) -> ValkeyClaim | Kept | None:
    """As :func:`claim_in_postgres`, for a record in Valkey. None: Valkey refused to store
    it (out of memory): the request runs without a record, since settling a lease must not
    fail for the sake of a replayed answer (a repeat is answered ``rejected``)."""
    key = valkey_key(scope)
    owner = uuid.uuid4().hex
    lease_ms = int(IN_PROGRESS_LEASE_SECONDS * 1000)
    # run on the master of the key alone (in cluster mode: a master down elsewhere does not
    # matter); Valkey down (CLUSTERDOWN too) is a 503 (WarmTierUnavailable), out of memory
    # only means the request runs without a record
    try:
        record = ctx.warm.call(IdempotencyClaim(RecordKey(key), body_fingerprint, owner,
                                                lease_ms))
    except (WarmTierFull, redis.ResponseError) as exc:
        log.warning("idempotency record not kept in Valkey: %s", exc)
        return None
    if record.claimed:
        return ValkeyClaim(ctx, key, owner)
    if record.fingerprint != body_fingerprint:
        raise _reused()
    if record.status is None or record.body is None:
        raise _in_progress()
    return Kept(record.status, orjson.loads(record.body))


def once_in_valkey(ctx: Context, call: KeyedCall | None, work: Callable[[], R], *,
                   load: Callable[[Any], R],
                   record: Callable[[R], tuple[Any, float | None]],
                   undo: Callable[[R], None] | None = None) -> tuple[R, bool]:
    """Run ``work`` once per key, the record kept in Valkey: (its result, whether it was
    answered from the record by ``load``). ``record(result)`` is what is kept and for how
    long at most (None: the settings' time); when it fails, ``undo(result)`` takes the
    work back before the error is raised."""
    if call is None:
        return work(), False
    claimed = claim_in_valkey(ctx, call.scope, call.fingerprint)
    if isinstance(claimed, Kept):
        return load(claimed.body), True
    try:
        result = work()
    except BaseException:
        if claimed is not None:
            claimed.abandon()
        raise
    if claimed is not None:
        try:
            kept, ttl_seconds = record(result)
        except BaseException:
            if undo is not None:
                undo(result)
            claimed.abandon()
            raise
        claimed.finish(kept, ttl_seconds=ttl_seconds)
    return result, False


def answer_once(ctx: Context, call: KeyedCall | None, work: Callable[[], M],
                model: type[M]) -> M:
    """:func:`once_in_valkey` for an answer kept whole (the lease outcomes: acks, nacks,
    releases, heartbeats), marked ``idempotent_replay`` when it is the kept one."""
    result, replayed = once_in_valkey(ctx, call, work, load=model.model_validate,
                                      record=lambda got: (got.model_dump(mode="json"), None))
    return result.as_replay() if replayed else result
