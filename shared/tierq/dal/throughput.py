"""Throughput counts in the warm tier: per (queue, tenant), how many tasks were enqueued and
acked in each second of the last 15 minutes, on the server's clock.

Each pair has one string, ``tq:{queue|tenant}:rate``. Its hash tag is the pair's, so a
count rides in the same pipeline as the pair's own commands. The string holds 16 blocks,
one per minute modulo 16. A block is a u32 stamp (the minute it holds) and 60 pairs of u32
counts (enqueued, acked), one per second, big-endian as ``BITFIELD`` writes them. That is at
most 16 * 484 = 7,744 bytes per pair, and nothing for a pair idle for the whole window (the
key expires 959-960 s after its last count). ``lua/rate_add.lua`` adds at the server's second,
clearing a block whose stamp is 16 minutes or more old before reusing it; a read keeps only
the seconds of the window, so nothing older than 15 minutes is ever reported.

A queue's view sums its tenants: ``tq:{queue}:rate_tenants`` (a sorted set in the queue's
own slot) names the tenants counted lately. A process notes a tenant there at most once a
minute (``NOTE_EVERY_SECONDS``): in the same pipeline as its count on a single server, on
its own after it in cluster mode (that slot's master being down must not fail a pair's
call). The set forgets a tenant 1,020 s after it was last noted, longer than its counts
live, so a view reads the rate strings of the tenants counted in the window only, however
many tenants the queue had.

The keys carry a TTL, so a cache at its maximum with a ``volatile-*`` policy evicts them
before any key of a task (which carry none): what is lost is chart data only. Counting is
best-effort: a count Valkey refuses (at ``maxmemory`` with ``noeviction``, or any error
reply) is dropped and logged, never failing the enqueue or ack it describes.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import add
from typing import TYPE_CHECKING, Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from tierq.dal.command_limit import chunks
from tierq.dal.lua_calls import RateAdd, RateKey, RateTenants, TenantsKey, evalsha
from tierq.errors import WarmTierFull, WarmTierUnavailable

if TYPE_CHECKING:
    from tierq.dal.warm_tier import WarmTier

log = logging.getLogger(__name__)

WINDOW_SECONDS = 900
BLOCK_SLOTS = 60  # seconds per block (lua/rate_add.lua)
BLOCK_WORDS = 1 + 2 * BLOCK_SLOTS  # u32 words of a block: its stamp, then the counts
BLOCKS = 16
BLOCK_BYTES = 4 * BLOCK_WORDS
# tenants per note (rate_tenants.lua: EVALSHA, its sha, 1, the key, then the tenants)
NOTES_PER_CALL = RateTenants.items_per_call()
# a process notes a tenant in its queue's index at most this often
NOTE_EVERY_SECONDS = 60.0
# past this many remembered notes, those older than NOTE_EVERY_SECONDS are forgotten
NOTED_PRUNE_AT = 10_000
# rate strings read per pipeline
READ_CHUNK = 500
# the array type code of an unsigned 32-bit word (C's unsigned int: 4 bytes wherever
# CPython runs; checked at import)
_U32 = "I"
assert array(_U32).itemsize == 4


def rate_key(queue: str, tenant: str) -> str:
    """The pair's counts (the pair's hash tag: the same slot as its other keys)."""
    return f"tq:{{{queue}|{tenant}}}:rate"


def tenants_key(queue: str) -> str:
    """The queue's index of tenants counted lately (a slot of the queue's own)."""
    return f"tq:{{{queue}}}:rate_tenants"


# one command as sent in a pipeline: its name and arguments
Command = tuple[Any, ...]


@dataclass(frozen=True)
class Series:
    """Counts per second over the window: ``enqueued[i]`` and ``acked[i]`` are those of the
    second ``end - WINDOW_SECONDS + 1 + i`` (epoch seconds, the server's clock)."""

    end: int
    enqueued: list[int]
    acked: list[int]
    tenants: int  # tenants whose counts were read (the caller's, or every one noted)

    @property
    def start(self) -> int:
        return self.end - WINDOW_SECONDS + 1


def add_counts(blob: bytes, end: int, enqueued: list[int], acked: list[int]) -> None:
    """Add a rate string's counts of the seconds ``(end - WINDOW_SECONDS, end]`` to
    ``enqueued`` and ``acked`` (one value per second of that window, oldest first)."""
    start = end - WINDOW_SECONDS + 1
    words = array(_U32)
    words.frombytes(blob[:len(blob) - len(blob) % 4])
    if sys.byteorder == "little":
        words.byteswap()  # BITFIELD's words are big-endian
    for block in range(BLOCKS):
        at = block * BLOCK_WORDS
        if len(words) <= at:
            break
        minute = words[at]
        first = minute * BLOCK_SLOTS
        if minute == 0 or first + BLOCK_SLOTS <= start or first > end:
            continue  # never written, or a minute outside the window
        counts = words[at + 1:at + BLOCK_WORDS]  # shorter at the string's end
        lo = max(0, start - first)
        hi = min(BLOCK_SLOTS, end - first + 1, len(counts) // 2)
        if lo >= hi:
            continue
        into = first + lo - start
        n = hi - lo
        enqueued[into:into + n] = map(add, enqueued[into:into + n], counts[2 * lo:2 * hi:2])
        acked[into:into + n] = map(add, acked[into:into + n], counts[2 * lo + 1:2 * hi:2])


class ThroughputCounts:
    """The counts of every pair, over one warm tier's client."""

    def __init__(self, warm: WarmTier) -> None:
        self.warm = warm
        self.add_script: Script = warm.scripts[RateAdd.SCRIPT]
        self.note_script: Script = warm.scripts[RateTenants.SCRIPT]
        self._noted: dict[tuple[str, str], float] = {}  # pair -> when this process noted it
        self._lock = threading.Lock()

    # -- writing ------------------------------------------------------------------------

    def along(self, queue: str,
              counts: Mapping[str, tuple[int, int]]) -> tuple[list[Command], list[Command]]:
        """The commands that add ``counts`` (tenant -> (enqueued, acked)), to send in one
        pipeline, alone (``record``) or after a pair's own command (``WarmTier.release``),
        and notes of the tenants in the queue's index when some are due (one per
        ``NOTES_PER_CALL`` tenants: ElastiCache's argument limit). On a single server the
        notes are among the commands (one round trip); in cluster mode they are returned
        apart, to be sent on their own after them: the index lives in the queue's slot, whose
        master being down must not fail a pair's own call. Hand both to ``settle``."""
        counted = [tenant for tenant, (enqueued, acked) in counts.items()
                   if enqueued > 0 or acked > 0]
        commands: list[Command] = [
            evalsha(RateAdd(RateKey(rate_key(queue, tenant)), *counts[tenant]),
                    self.add_script.sha)
            for tenant in counted]
        due = self._due_notes(queue, counted)
        notes: list[Command] = [
            evalsha(RateTenants(TenantsKey(tenants_key(queue)), part), self.note_script.sha)
            for part in chunks(due, NOTES_PER_CALL)]
        if self.warm.calls is not None:
            return [*commands, *notes], []
        return commands, notes

    def _due_notes(self, queue: str, tenants: Sequence[str]) -> list[str]:
        """The tenants not noted by this process in the last minute, marked as noted now.
        A note that then fails is not retried before a minute has passed either: a master
        that does not answer is not asked on every count."""
        now = time.monotonic()
        with self._lock:
            due = [t for t in tenants
                   if now - self._noted.get((queue, t), float("-inf")) >= NOTE_EVERY_SECONDS]
            if due and len(self._noted) >= NOTED_PRUNE_AT:
                self._noted = {pair: at for pair, at in self._noted.items()
                               if now - at < NOTE_EVERY_SECONDS}
            for tenant in due:
                self._noted[(queue, tenant)] = now
        return due

    def settle(self, queue: str, commands: Sequence[Command], replies: Sequence[Any],
               notes: Sequence[Command] = ()) -> None:
        """Deal with the replies of ``commands``: a script the server does not know yet is
        run again alone (and loaded); any other error is logged and the count dropped. Then
        send ``notes`` (``along``'s second part) on their own, best-effort."""
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, Exception):
                self._retry_or_drop(command, reply)
        for note in notes:
            try:
                reply = self.warm.pipeline([note])[0]
            except (WarmTierUnavailable, WarmTierFull) as exc:
                reply = exc
            if isinstance(reply, Exception):
                self._retry_or_drop(note, reply)

    def _retry_or_drop(self, command: Command, error: Exception) -> None:
        script = self.add_script if command[1] == self.add_script.sha else self.note_script
        keys, args = command[3:4], command[4:]
        if isinstance(error, NoScriptError):
            try:
                self.warm.run_script(script, keys, args)
                return
            except (WarmTierUnavailable, WarmTierFull, redis.RedisError) as exc:
                error = exc
        quiet = isinstance(error, (WarmTierFull, redis.exceptions.OutOfMemoryError))
        log.log(logging.DEBUG if quiet else logging.WARNING,
                "throughput count dropped (%s): %s", keys[0], error)

    def record(self, queue: str, counts: Mapping[str, tuple[int, int]]) -> None:
        """Add ``counts`` (tenant -> (enqueued, acked)) in one pipeline, best-effort: when
        Valkey does not answer they are dropped (and logged), the caller carries on."""
        commands, notes = self.along(queue, counts)
        if not commands:
            return
        try:
            replies = self.warm.pipeline(commands)
        except (WarmTierUnavailable, WarmTierFull) as exc:
            log.warning("throughput counts of queue %r dropped: %s", queue, exc)
            return
        self.settle(queue, commands, replies, notes)

    def record_enqueued(self, queue: str, tenants: Iterable[str]) -> None:
        """Count one enqueued task per tenant named (a tenant once per task)."""
        self.record(queue, {tenant: (n, 0) for tenant, n in Counter(tenants).items()})

    # -- reading ------------------------------------------------------------------------

    def noted_tenants(self, queue: str) -> list[str]:
        """The tenants of ``queue`` counted in the window (from its index), read a page at
        a time (``ZSCAN … COUNT READ_CHUNK``): no command reads the whole index, however
        many tenants it names. A tenant noted during the read may be missed (its counts
        are the next read's); none named throughout is."""
        key = tenants_key(queue)
        names: set[str] = set()
        cursor = 0
        while True:
            reply = self.warm.pipeline([("ZSCAN", key, cursor, "COUNT", READ_CHUNK)])[0]
            if isinstance(reply, Exception):
                raise reply
            cursor, page = _scan_page(reply)
            names.update(page)
            if cursor == 0:
                return sorted(names)

    def read(self, queue: str, tenants: Sequence[str] | None = None) -> Series:
        """Counts per second over the last ``WINDOW_SECONDS`` (ending at the server's
        current second: in cluster mode, of the master of the first key read) summed over
        ``tenants``, or over every tenant noted when None."""
        names = self.noted_tenants(queue) if tenants is None else sorted(set(tenants))
        end = int(self.warm.server_time(
            tenants_key(queue) if tenants is None or not names else rate_key(queue, names[0])))
        enqueued = [0] * WINDOW_SECONDS
        acked = [0] * WINDOW_SECONDS
        for at in range(0, len(names), READ_CHUNK):
            chunk = names[at:at + READ_CHUNK]
            blobs = self.warm.pipeline([("GET", rate_key(queue, t)) for t in chunk])
            for blob in blobs:
                if isinstance(blob, Exception):
                    raise blob
                if blob:
                    add_counts(blob, end, enqueued, acked)
        return Series(end, enqueued, acked, len(names))


def _scan_page(reply: Any) -> tuple[int, list[str]]:
    """(next cursor, members) of a ``ZSCAN`` reply: raw (``[cursor, [member, score, ...]]``)
    from the direct calls of a single server, or parsed (``(cursor, [(member, score),
    ...])``) by redis-py's cluster client."""
    cursor, items = reply
    if items and isinstance(items[0], (tuple, list)):
        return int(cursor), [_text(member) for member, _ in items]
    return int(cursor), [_text(member) for member in items[0::2]]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
