"""Idempotency keys: a request repeated with the same key gets the first answer and changes
nothing.

A key is scoped by caller, route and queue (:func:`scope_key`), so nobody can replay
another's response. The caller is the tenant (or the admin) and, when its token names one,
the subject: two services of one tenant, or two admins, never share a key. Where a repeat
would create a second task (enqueues, dead-letter replays) the record lives in PostgreSQL and
is written in the same transaction as the tasks (:class:`PgClaim`); the other lease routes
keep theirs in Valkey (:class:`ValkeyClaim`), where a lost record only means the repeat runs
again and finds the lease already settled.

The life of a record: :func:`claim_in_postgres` / :func:`claim_in_valkey` either hand the
request a claim (it is the first, or it takes over from an owner that died) or answer for
it: the kept response (same body), :class:`IdempotencyKeyReused` (409, another body) or
:class:`IdempotencyInProgress` (409, the first request is still running). The claimant does
its work, then ``finish``es with the response; on an error it ``abandon``s the claim, so
only 2xx responses are kept and a retry after a 503 runs again.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any, cast

import orjson
import psycopg
import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from tierq.dal.task_store import Conn
from tierq.errors import TierqError, Unavailable, WarmTierFull
from tierq.logic.context import Context, to_datetime

log = logging.getLogger(__name__)

# How long a request may work on a key before a retry may take it over. Longer than any
# request runs (the functions time out after 29 s); a takeover is safe even when the first
# owner is still alive: its commit checks the owner in the tasks' transaction and rolls back.
IN_PROGRESS_LEASE_SECONDS = 60.0
PURGE_BATCH = 5000
PURGE_BATCHES_PER_PASS = 4
CLAIM_ATTEMPTS = 3
VALKEY_PREFIX = "tq:idem:"


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
    token was issued to, as ``<claim>:<value>`` (tierq.aws.http.access.subject_of; None:
    shared by every caller of ``caller`` without one). The subject is hashed as the hex of
    its UTF-8 bytes, surrogates passed through: any string a token's JSON can carry (a lone
    surrogate too, which UTF-8 cannot encode) has its own scope."""
    parts: list[Any] = [caller, route, queue, key]
    if subject is not None:
        parts.insert(1, {"subject": subject.encode("utf-8", "surrogatepass").hex()})
    return hashlib.sha256(orjson.dumps(parts)).digest()


def fingerprint(body: Any) -> bytes:
    """The request body in canonical JSON (keys sorted), hashed: two bodies that differ only
    in layout or key order are the same request."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()


@dataclass(frozen=True)
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


@dataclass
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

# One hash per key (its own hash tag, so one slot in cluster mode): f = body fingerprint,
# o = owner, s/b = status and body once done.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'f', ARGV[1], 'o', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
return {0, redis.call('HGET', KEYS[1], 'f'), redis.call('HGET', KEYS[1], 's'),
        redis.call('HGET', KEYS[1], 'b')}
"""
_FINISH = """
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', ARGV[2], 'b', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""
_ABANDON = """
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""
_scripts: dict[tuple[int, str], Script] = {}


def _script(client: redis.Redis | RedisCluster, source: str) -> Script:
    found = _scripts.get((id(client), source))
    if found is None:
        found = _scripts[(id(client), source)] = client.register_script(source)
    return found


def valkey_key(scope: bytes) -> str:
    return f"{VALKEY_PREFIX}{{{scope.hex()}}}"


@dataclass
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
        warm = self.ctx.warm
        try:
            warm.run_script(_script(warm.client, _FINISH), [self.key],
                            [self.owner, status, orjson.dumps(response), ttl_ms])
        except (redis.RedisError, Unavailable) as exc:
            log.warning("idempotency record not kept in Valkey: %s", exc)

    def abandon(self) -> None:
        warm = self.ctx.warm
        try:
            warm.run_script(_script(warm.client, _ABANDON), [self.key], [self.owner])
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
    warm = ctx.warm
    try:
        reply = warm.run_script(_script(warm.client, _CLAIM), [key],
                                [body_fingerprint, owner, lease_ms])
    except (WarmTierFull, redis.ResponseError) as exc:
        log.warning("idempotency record not kept in Valkey: %s", exc)
        return None
    if reply[0] == 1:
        return ValkeyClaim(ctx, key, owner)
    _, stored_fingerprint, status, body = (list(reply) + [None] * 4)[:4]
    if stored_fingerprint != body_fingerprint:
        raise _reused()
    if status is None:
        raise _in_progress()
    return Kept(int(status), orjson.loads(body))
