"""Valkey access: the warm tier's keys and its Lua scripts (``lua/*.lua``), loaded once and
run with EVALSHA (redis-py reloads a script on NOSCRIPT). Each script's call is built and its
reply parsed by its object in ``dal/lua_calls.py`` (``WarmTier.call``)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from functools import cache, lru_cache
from importlib import resources
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.credentials import CredentialProvider
from redis.exceptions import (
    ClusterError,
    NoScriptError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from tierq.core.ids import attempt_of_token
from tierq.core.lazy import lazy_dataclass  # (a class's methods made at its first instance)
from tierq.core.ordering import PRIORITY_MAX, PRIORITY_MIN, SPLIT, Place, task_of
from tierq.dal.command_limit import (
    LimitedConnectionPool,
    chunks,
    connection_class,
    per_call,
)
from tierq.dal.direct_calls import DirectCalls
from tierq.dal.lua_calls import (
    AckCheckJoin,
    AckLook,
    AckPass,
    AdmissionBegin,
    AdmissionEnd,
    AdmissionMode,
    AllotShrink,
    CapacityExtend,
    CapacityFree,
    CapacityUse,
    Claim,
    ClaimReply,
    ClaimTake,
    GoCold,
    LapseIndex,
    LeaseCheck,
    LeaseDrop,
    LeaseExpired,
    LeaseExtend,
    LeaseIndex,
    LeaseOf,
    LeaseProgress,
    LongPolls,
    LuaCall,
    Missing,
    PairSweep,
    PollKey,
    PoolKeys,
    PushReady,
    PushReply,
    QueueCapacity,
    ReadyTenantsNote,
    ReleaseLeases,
    Remove,
    RemoveReady,
    ReplaceCold,
    RunningPage,
    SweepReply,
    TaskFinished,
    TaskWait,
    TenantRequests,
    TierStats,
    UpdateReady,
    UseCounts,
    UseKeys,
    WarmLedger,
    evalsha,
    wire_float,
)
from tierq.dal.lua_calls import Claimed as Claimed  # (claims name it here)
from tierq.errors import WarmTierFull, WarmTierUnavailable

log = logging.getLogger(__name__)
R = TypeVar("R")

if TYPE_CHECKING:
    from tierq.dal.throughput import ThroughputCounts

SCRIPTS = (
    "push_ready",
    "admission_begin",
    "admission_end",
    "admission_mode",
    "go_cold",
    "claim",
    "lease_extend",
    "lease_progress",
    "lease_expired",
    "lease_check",
    "lease_drop",
    "lease_of",
    "lease_index",
    "release_leases",
    "missing",
    "remove",
    "remove_ready",
    "update_ready",
    "replace_cold",
    "pair_sweep",
    "lapse_index",
    "tier_stats",
    "queue_capacity",
    "capacity_free",
    "capacity_extend",
    "capacity_use",
    "tenant_requests",
    "long_polls",
    "running_page",
    "ready_tenants_note",
    "warm_ledger",
    "allot_shrink",
    "rate_add",
    "rate_tenants",
    "idem_claim",
    "idem_finish",
    "idem_abandon",
    "task_finished",
    "task_wait",
    "ack_check_join",
    "ack_look",
    "ack_pass",
)


@lazy_dataclass(frozen=True)
class PairKeys:
    """The keys of one (queue, tenant); all share the hash tag ``{queue|tenant}``."""

    ready: str
    data: str
    leased: str
    claims: str
    meta: str
    inflight: str
    bucket: str  # the tenant's token bucket (tenant_rate, lua/token_bucket.lua)
    lease_of: str  # id -> the token of its lease (lua/lease_keys.lua)
    started: str  # id -> when its lease's claim began, ms (lua/running_page.lua)
    finished: str  # id -> completion marker; ``<finished>:<id>`` its channel (task_finished)
    finished_prev: str  # the previous generation of markers (lua/task_finished.lua)
    waiters: str  # id -> how many waits registered for its message (lua/task_wait.lua)
    progress: str  # id -> '<token>|<ms>|<json>': its lease's last progress (lease_progress)
    limits: str  # lease member -> its attempt's time limit, ms (lua/claim.lua)
    gone: str  # id -> when it was cancelled or deleted, ms: pushes leave it out (lua/remove.lua)
    newer: str  # id -> '<score> <member> <blob>' a replace wrote: pushes use it (update_ready)
    newer_at: str  # id -> when its `newer` entry lapses, ms (lua/update_ready.lua)

    @classmethod
    def of(cls, queue: str, tenant: str) -> PairKeys:
        """The pair's keys: the same (immutable) object for a pair used lately, since a
        claim or an ack names its pair's keys several times and building them costs about
        3 µs (``PAIR_KEYS_KEPT`` pairs are kept, the least recently used dropped first)."""
        if cls is not PairKeys:  # (a subclass's: built each time)
            return _make_pair_keys(cls, queue, tenant)
        return _pair_keys(queue, tenant)


# How many pairs' keys ``PairKeys.of`` keeps: about 1.5 KB each.
PAIR_KEYS_KEPT = 1024


@lru_cache(maxsize=PAIR_KEYS_KEPT)
def _pair_keys(queue: str, tenant: str) -> PairKeys:
    return _make_pair_keys(PairKeys, queue, tenant)


def _make_pair_keys(cls: type[PairKeys], queue: str, tenant: str) -> PairKeys:
    tag = f"tq:{{{queue}|{tenant}}}:"
    return cls(tag + "ready", tag + "data", tag + "leased", tag + "claims", tag + "meta",
               tag + "inflight", tag + "bucket", tag + "lease_of", tag + "started",
               tag + "finished", tag + "finished_prev", tag + "waiters", tag + "progress",
               tag + "limits", tag + "gone", tag + "newer", tag + "newer_at")


@lazy_dataclass(frozen=True)
class AckMail:
    """One ack's keys in its pair's mailbox of acks committed together
    (lua/ack_check_join.lua, logic/ack_gathering.py), on the pair's slot: a shard's acks
    have a mailbox of their own, since its committer deletes rows of its own database
    only."""

    mailbox: str
    lock: str
    reply: str
    leased: str  # the pair's leases (``PairKeys.leased``), which the ack checks first
    states: str  # request -> '' in line, or the request of the committer that took it

    @classmethod
    def of(cls, queue: str, tenant: str, shard_tag: int | None, request: str) -> AckMail:
        base = f"tq:{{{queue}|{tenant}}}:acks" + ("" if shard_tag is None else f":{shard_tag}")
        return cls(base, base + ":lock", f"{base}:r:{request}",
                   PairKeys.of(queue, tenant).leased, base + ":states")

    def reply_of(self, request: str) -> str:
        """The reply list of another request of the same mailbox."""
        return f"{self.mailbox}:r:{request}"


class ReaperCursors(NamedTuple):
    """The reaper's cursors kept in a pair's meta (``WarmTier.reaper_cursors``)."""

    reconcile_after: str  # over the pair's warm rows ('' : from the start)
    started_after: str | None  # over its ``started`` index (None: from the start)
    members_after: str  # over its batch rows, a batch key ('' : from the start)


# What an admission will push into one pair (admission_begin.lua): the bytes of its first
# task, its tasks, and their bytes.
AdmittedSize = tuple[int, int, int]
# How many items one call takes, within ElastiCache's argument limit (dal/command_limit.py):
# EVALSHA, its sha and key count, then keys and fixed arguments, then the items' arguments.
PUSH_TASKS_PER_CALL = PushReady.items_per_call()
# What admissions push per call, at most (logic/admission.py: ``push_chunks``): a script runs
# alone on its server, and a push of 994 tasks of 1 KB took ~11 ms of Valkey (bench/README.md,
# Valkey's slowest command), so a call carries half that, or its tasks' bytes up to the bound
# (at least one task a call, whatever its size).
PUSH_CALL_TASKS = min(500, PUSH_TASKS_PER_CALL)
PUSH_CALL_BYTES = 512 * 1024
# missing, remove, remove_ready: lookups by id, a slice per call (a slice of 1,000 took ~11 ms)
IDS_PER_CALL = 500
# running_page.lua: leases one call returns at most, and entries of `started` it reads at
# most besides them (a call of 200 takes ~1 ms of Valkey; one of 1,000 took 15 ms)
RUNNING_CALL_LEASES = 200
RUNNING_SCAN_SLACK = 200
ZMSCORE_PER_CALL = per_call(2)  # ZMSCORE key member ...
# lease_index.lua: leases (or claim records) per slice, and slices per reconciler visit (a
# slice of 500 took ~1.5 ms of Valkey at 100k leases, the longest call of a reaper pass)
LEASE_INDEX_SLICE = 250
LEASE_INDEX_SLICES_PER_VISIT = 80
# The tombstones of cancelled and deleted tasks a pair keeps at most (lua/remove.lua): the
# oldest go first. ~146 bytes each (MEMORY USAGE at the cap), so at most ~1.5 MB a pair;
# each counts GONE_CHARGE against its tenant's share (lua/warm_usage.lua, the same number).
GONE_CAP = 10_000
GONE_CHARGE = 150
# What a completion marker counts against its tenant's share (lua/warm_usage.lua, the same
# number): ~124 bytes each in Valkey (MEMORY USAGE of 10,000); a generation's own two fields
# are not markers.
MARKER_CHARGE = 128
MARKER_OWN_FIELDS = 2
# The markers a pair under its tenant's bound keeps whatever its room (lua/task_finished.lua,
# the same number): the most a tenant holds beyond its share, per pair.
MARKERS_KEPT_AT_LEAST = 64
# What lua/task_wait.lua answers for a task without a marker when the pair's markers went
# early within 30 s (its state, as ``FinishMark``): the task may have ended
MARKERS_DROPPED = "~dropped"
# The bytes of whole replacements kept for pushes on their way a pair holds at most
# (lua/newer_entries.lua): past them a replacement keeps a mark. Each entry counts its
# length plus NEWER_CHARGE against its tenant's share (the same number as the script's).
NEWER_MAX_BYTES = 4 * 1024 * 1024
NEWER_CHARGE = 256
# The index of lapses (lua/lapse_index.lua): pair -> when the reaper sweeps its lapsed
# `newer` entries and tombstones (lua/pair_sweep.lua). A pair is swept again at most every
# LAPSE_SWEEP_EVERY_MS while it holds entries, dropping at most LAPSE_SWEEP_ENTRIES a call.
LAPSES_KEY = "tq:{~}:lapses"
LAPSE_SWEEP_EVERY_MS = 60_000
LAPSE_SWEEP_ENTRIES = 1000
# how long a subscription's confirmation is waited for (WarmTier.finished_channel)
SUBSCRIBE_SECONDS = 5.0
# how long a server's INFO memory is trusted (WarmTier.memory): promotions read it per pass
MEMORY_READ_EVERY = 0.5


def lapse_member(queue: str, tenant: str) -> str:
    """A pair's member of the index of lapses (``LAPSES_KEY``): a queue's name has no
    ``|``."""
    return f"{queue}|{tenant}"


def parse_started_cursor(text: str | None) -> tuple[int, str] | None:
    """The pair's ``started_after`` ('<ms>|<id>', ``WarmTier.prune_started``); None (from
    the start) for none or text that is not one."""
    ms, bar, task_id = (text or "").partition("|")
    if not bar or not ms.isdigit():
        return None
    return int(ms), task_id


class LatePush(Exception):
    """push_ready refused a whole push: its admission began before the pair's fence, so the
    reconciler has taken its rows over (lua/missing.lua) and pushes them itself."""


class ClaimRepeated(Exception):
    """A pop's script ran twice: its first reply was lost (a connection reset after the
    send) and the call was sent again. The repeat popped nothing; ``leases`` are the
    (id, lease token) of the first run's leases, held by nobody until the caller gives
    them back (lua/claim.lua, logic/claim.py). ``granted``: what a queue-wide take riding
    with the first run granted (-1: no such take, or not known under a rate alone)."""

    def __init__(self, leases: Sequence[tuple[str, str]], granted: int = -1) -> None:
        super().__init__(f"a claim's reply was lost after it leased {len(leases)} tasks")
        self.leases = list(leases)
        self.granted = granted

    @property
    def last_unit(self) -> int:
        """The highest lease number of the first run's leases: under the queue-wide limits,
        the claim's units up to it are those pops made (lease k holds unit k)."""
        return max(int(token[token.rfind("~") + 1:]) for _, token in self.leases)


@lazy_dataclass(frozen=True)
class QueueKeys:
    """The keys of a queue as a whole, across its tenants: they share the hash tag
    ``{queue}`` (no pair's), so a queue-wide script runs in one slot (lua/queue_capacity.lua).
    """

    bucket: str  # the queue's token bucket (rate)

    @classmethod
    def of(cls, queue: str) -> QueueKeys:
        return cls(f"tq:{{{queue}}}:bucket")

    @staticmethod
    def ready_tenants(queue: str, shard_tag: int | None = None) -> str:
        """The queue's tenants that may have ready work (sorted set, every score 0: read
        by name, ``WarmTier.ready_tenants_after``; logic/ready_tenants.py); one per shard
        of a sharded deployment (each shard's claims visit the tenants homed there)."""
        return f"tq:{{{queue}}}:ready_tenants" + ("" if shard_tag is None else f":{shard_tag}")

    @staticmethod
    def held(queue: str, pool: str) -> str:
        """The reservations of one capacity pool of the queue (sorted set of entries by
        deadline, lua/capacity_pool.lua)."""
        return f"tq:{{{queue}}}:held:{pool}"

    @staticmethod
    def counts(queue: str, pool: str) -> str:
        """What the pool's entries hold (hash: the total, and each take's count and
        bitmap of units that left it; lua/capacity_pool.lua)."""
        return f"tq:{{{queue}}}:held:{pool}:counts"


@lazy_dataclass(frozen=True)
class TenantKeys:
    """The keys of a tenant as a whole, across its queues: they share the hash tag
    ``{~tenant}`` (``~`` starts no queue name, so no queue's tag is the same), one slot."""

    requests: str  # the tenant's requests on the HTTP API (token bucket, tenant_requests.lua)
    polls: str  # its long polls in flight (reservations by deadline, long_polls.lua)
    warm: str  # its warm-tier ledger: bytes allotted to each of its pairs (warm_ledger.lua)

    @classmethod
    def of(cls, tenant: str) -> TenantKeys:
        tag = f"tq:{{~{tenant}}}:"
        return cls(tag + "requests", tag + "polls", tag + "warm")


# Every caller's long polls in flight (long_polls.lua): the tag ``{~}`` is no tenant's (a
# tenant's name is not empty) and no queue's, one slot of its own.
ALL_POLLS_KEY = "tq:{~}:polls"


def reservation_of(token: str) -> str:
    """The queue-wide reservation a lease token holds, the unit ``<random>~<k>`` of the
    claim's take ``<random>~`` (taken for the whole claim before its pops:
    lua/capacity_take.lua, logic/claim_limits.QueueGate), from the token
    ``<tenant>~<random>~<attempt>~<k>``."""
    _, _, rest = token.partition("~")
    return rest[:rest.find("~") + 1] + token[token.rfind("~") + 1:]


def split_unit(unit: str) -> tuple[str, str]:
    """(the take's entry ``<holder>``, k) of a reservation unit ``<holder><k>``; the holder
    ends with ``~``. ValueError for a name that is not a unit."""
    at = unit.rfind("~") + 1
    k = unit[at:]
    if not at or not (k.isascii() and k.isdigit()):
        raise ValueError(f"{unit!r} is not a reservation unit (<holder>~<k>)")
    return unit[:at], k


def unit_groups(units: Sequence[str]) -> list[str]:
    """The units as the pool scripts take them: per take entry, ``<holder>``, how many,
    then their numbers (lua/capacity_free.lua); a unit named twice is sent once."""
    groups: dict[str, dict[str, None]] = {}
    for unit in units:
        holder, k = split_unit(unit)
        groups.setdefault(holder, {})[k] = None
    args: list[str] = []
    for holder, ks in groups.items():
        args += (holder, str(len(ks)), *ks)
    return args


def token_groups(tokens: Sequence[str]) -> list[str]:
    """``unit_groups`` of the reservation units lease tokens hold (``reservation_of``), in
    one pass over the tokens (an ack's hot path); a unit named twice is sent twice (the
    script gives it back once)."""
    groups: dict[str, list[str]] = {}
    for token in tokens:
        first = token.find("~") + 1
        holder = token[first:token.find("~", first) + 1]
        k = token[token.rfind("~") + 1:]
        ks = groups.get(holder)
        if ks is None:
            groups[holder] = [k]
        else:
            ks.append(k)
    args: list[str] = []
    for holder, ks in groups.items():
        args += (holder, str(len(ks)), *ks)
    return args


@lazy_dataclass(frozen=True)
class _Index:
    """A queue's ready-tenant index as ``ReadyTenantsNote`` reads its key."""

    index: str


@lazy_dataclass(frozen=True)
class ScriptCall:
    """A script to run later, by name (``WarmTier.release``'s ``then``)."""

    name: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]


@lazy_dataclass(frozen=True)
class QueueTake:
    """The queue-wide take a claim's first pair makes in its own script on a single server
    (lua/claim.lua KEYS 10-12): ``want`` units for the whole claim, one entry ``holder``,
    at most ``max_held`` held in the pool (0: no count limit), tokens of the queue's bucket
    at ``rate`` (per_second, burst) if any. The pair pops at most its share of the grant:
    one of ``shares`` (the tenants the claim's rotation shares it among)."""

    queue: str
    pool: str
    want: int
    holder: str
    max_held: int
    rate: tuple[float, int] | None
    shares: int = 1


@lazy_dataclass(frozen=True)
class CapacityTaken:
    """What ``WarmTier.take_capacity`` granted: ``taken`` units, ``<holder>1`` ..
    ``<holder><taken>``, held until their deadline by one entry; ``retry_after_ms`` (0 when
    all were granted) says when asking again is worth it; ``held`` is the pool's count
    after (0 without a count limit)."""

    taken: int
    retry_after_ms: int
    held: int

    def members(self, holder: str) -> list[str]:
        """The units taken (lua/capacity_pool.lua: one entry holds them all)."""
        return [f"{holder}{i}" for i in range(1, self.taken + 1)]


def lease_member(task_id: str, token: str) -> str:
    """A lease as the leased set holds it (see lua/claim.lua)."""
    return f"{task_id}|{token}"


def split_member(member: str) -> tuple[str, str, int]:
    """(id, token, attempt) of a leased-set member."""
    task_id, _, token = member.partition("|")
    return task_id, token, attempt_of_token(token) or 0


def claim_prefix(token: str) -> str:
    """The claim a token was issued by: the token up to its attempt."""
    return token[:token.rfind("~", 0, token.rfind("~")) + 1]


@lazy_dataclass(frozen=True)
class PushOutcome:
    """What one ``push_ready`` call did: the pair's mode after, the ids it refused, the
    bytes of allotment it gave back and the pair's count of bytes given back so far
    (``freed``, for the tenant's ledger), and in ``ask`` mode the bytes of allotment the
    push was short of (no task was written then). Also the tasks waiting before it, the
    allotment left beyond the pair's usage after it (``slack``), whether the pair's
    tenant was entered in its queue's ready-tenant index right after it (``noted``), and
    how many tasks it left out as cancelled or deleted (``gone``)."""

    mode: str
    refused: list[str]
    given_back: int = 0
    short: int = 0
    freed: int = 0
    ready_before: int = 0
    slack: int = 0
    noted: bool = False
    gone: int = 0


class PushAlong:
    """A push of one pair sent in the round trip of another call of its pair (``release``:
    after the lease drop), with its tenant's note in the queue's ready-tenant index; once
    sent, ``reply`` holds the push's reply (or its error) and ``noted`` whether the note was
    made. ``WarmTier.pushed_along`` reads the outcome as ``push`` returns it."""

    __slots__ = ("call", "note", "noted", "queue", "reply", "sent", "tasks", "tenant")

    def __init__(self, queue: str, tenant: str, call: PushReady, note: ReadyTenantsNote,
                 tasks: int) -> None:
        self.queue = queue
        self.tenant = tenant
        self.call = call
        self.note = note
        self.tasks = tasks
        self.sent = False
        self.reply: Any = None
        self.noted = False


class AnswersAlong:
    """A committer's answers to the acks it committed and its pass (``WarmTier.ack_answer``:
    lua/ack_pass.lua) sent in the round trip of its own lease drop (``release_pairs``'
    ``answers``, the same pair's slot). Once sent, ``taken`` holds the entries its pass took
    and ``refused`` how many answers Valkey refused, or ``error`` what failed."""

    __slots__ = ("answers", "error", "lock_ms", "mail", "most", "owner", "refused",
                 "reply_ttl_ms", "sent", "taken", "until")

    def __init__(self, mail: AckMail, owner: str, answers: Sequence[tuple[str, bytes]], *,
                 most: int, lock_ms: int, reply_ttl_ms: int, until: float | None = None
                 ) -> None:
        self.mail = mail
        self.owner = owner
        self.answers = answers
        self.most = most
        self.until = until  # (monotonic: the pass takes no more acks once it is past)
        self.lock_ms = lock_ms
        self.reply_ttl_ms = reply_ttl_ms
        self.sent = False
        self.taken: list[str] = []
        self.refused = 0
        self.error: Exception | None = None

    def call(self) -> AckPass:
        most = self.most if self.until is None or time.monotonic() < self.until else 0
        return AckPass(self.mail, self.owner, most, self.lock_ms,
                       [request for request, _ in self.answers])

    def commands(self, sha: str) -> list[tuple[Any, ...]]:
        """The answers' ``RPUSH`` and ``PEXPIRE``, then the pass."""
        out: list[tuple[Any, ...]] = []
        for request, answer in self.answers:
            key = self.mail.reply_of(request)
            out += [("RPUSH", key, answer), ("PEXPIRE", key, self.reply_ttl_ms)]
        out.append(evalsha(self.call(), sha))
        return out


@lazy_dataclass(frozen=True)
class PairDrop:
    """One pair's part of ``WarmTier.release_pairs``: its leases (members
    ``lease_member(id, token)``), how many of its tasks were just acked (counted with the
    drop, dal/throughput.py), its completion markers (``release``'s ``finished``) and a push
    of its tasks to send along (``push_along``)."""

    tenant: str
    members: Sequence[str]
    acked: int = 0
    finished: TaskFinished | None = None
    push: PushAlong | None = None


@lazy_dataclass(frozen=True)
class UpdateOutcome:
    """What ``update_ready`` did: the tasks found (and replaced), the items done before it
    stopped, and why it stopped: ``short`` bytes of allotment missing ('ask'), or
    ``over`` ('strict': the growth does not fit)."""

    found: int
    done: int
    short: int = 0
    over: bool = False


@lazy_dataclass(frozen=True)
class TenantShare:
    """How a push counts against its tenant's warm-tier bound (lua/warm_usage.lua):
    ``bound`` '' (none), 'ask' or 'strict'; ``grant``: allotment just taken from the
    ledger for the pair; ``charge``: bytes counted per task waiting or leased; ``keep``:
    allotment a pair keeps beyond its usage before it gives the rest back."""

    bound: str = ""
    grant: int = 0
    charge: int = 0
    keep: int = 0


@lazy_dataclass(frozen=True)
class Memory:
    """A Valkey server's memory (INFO memory): ``maxmemory`` (0: none) and ``used``."""

    maxmemory: int
    used: int

    @property
    def free(self) -> int | None:
        """Bytes left before maxmemory; None without one."""
        return None if self.maxmemory <= 0 else max(0, self.maxmemory - self.used)


@lazy_dataclass(frozen=True)
class FinishMark:
    """A task's completion marker (lua/task_finished.lua): its end (``done``, ``dead`` or
    ``deleted``), the attempt it ended, and when (ms, the server's clock)."""

    state: str
    attempt: int
    at_ms: int

    @classmethod
    def of(cls, text: str | None) -> FinishMark | None:
        """The marker stored as '<state>|<attempt>|<ms>'; None for none."""
        if text is None:
            return None
        state, _, rest = text.partition("|")
        attempt, _, ms = rest.partition("|")
        return cls(state, int(attempt or 0), int(ms or 0))


@lazy_dataclass(frozen=True)
class ModeObservation:
    mode: str
    epoch: str
    inflight: int
    ready: int
    flipped: bool
    ready_bytes: int = 0


@lazy_dataclass(frozen=True)
class LeaseInfo:
    id: str
    token: str
    attempt: int
    started_ms: int
    worker: str | None
    deadline_ms: int


@lazy_dataclass(frozen=True)
class RemovedLease:
    """A lease ``remove`` ended: its task, its token and the progress it kept (when it came,
    epoch ms; its JSON text), or None."""

    id: str
    token: str
    progress: tuple[int, str] | None


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _progress_entries(leases: Sequence[tuple[str, str]],
                      values: Sequence[Any]) -> dict[str, tuple[int, str]]:
    """The progress entries (``HMGET`` of a pair's progress hash) that belong to the (id,
    token) leases at their places: id -> (ms, JSON text)."""
    out: dict[str, tuple[int, str]] = {}
    for (task_id, token), raw in zip(leases, values, strict=True):
        if raw is None:
            continue
        owner, _, rest = _s(raw).partition("|")
        at, _, value = rest.partition("|")
        if owner == token and at.isdigit():
            out[task_id] = (int(at), value)
    return out


_INCLUDE = re.compile(r"^-- include: (\w+)", re.MULTILINE)


def script_source(name: str) -> str:
    """The text of ``lua/<name>.lua``, with the shared pieces it names on a line
    ``-- include: <piece>`` (``lua/<piece>.lua``) put before it (after its shebang line,
    if it has one): scripts cannot call each other, so what several of them need is shared
    at load time."""
    folder = resources.files("tierq.dal").joinpath("lua")
    body = folder.joinpath(f"{name}.lua").read_text("utf-8")
    pieces = [folder.joinpath(f"{piece}.lua").read_text("utf-8")
              for piece in dict.fromkeys(_INCLUDE.findall(body))]
    if not pieces:
        return body
    # A shebang line (``#!lua flags=...``) must stay the script's first line.
    shebang = ""
    if body.startswith("#!"):
        shebang, _, body = body.partition("\n")
        shebang += "\n"
    return shebang + "\n".join([*pieces, body])


class Scripts(Mapping[str, Script]):
    """The scripts of ``SCRIPTS`` registered on one client, each read and registered when
    first asked for: a request runs a few of the 36 (a claim three), and reading them all
    (their files and shared pieces) and hashing them cost a function's first request about
    as much as the rest of it. Iterating registers them all."""

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self._client = client
        self._registered: dict[str, Script] = {}

    def __getitem__(self, name: str) -> Script:
        script = self._registered.get(name)
        if script is None:
            if name not in SCRIPTS:
                raise KeyError(name)
            # two threads' first calls may both register it: the same text, the same hash
            script = self._registered.setdefault(
                name, self._client.register_script(script_source(name)))
        return script

    def __iter__(self) -> Iterator[str]:
        return iter(SCRIPTS)

    def __len__(self) -> int:
        return len(SCRIPTS)

    def register_all(self) -> int:
        """Read and register every script now (a long-running process's ``warm_up``: its
        first calls then read no file); how many were registered now."""
        before = len(self._registered)
        for name in SCRIPTS:
            self[name]
        return len(self._registered) - before


# A Valkey that cannot serve: no connection or no reply in time, or in cluster mode a master
# down (CLUSTERDOWN once the others notice), a slot no master serves, a slot being moved,
# or no node reachable or no agreed slot map (redis-py's RedisClusterException, which is
# not a RedisError; it also carries a refusal of a connection's credentials). The caller
# sees a 503 naming Valkey; redis-py's words go to the log.
VALKEY_DOWN: tuple[type[Exception], ...] = (
    redis.ConnectionError, redis.TimeoutError, ClusterError, SlotNotCoveredError,
    TryAgainError, RedisClusterException)

# no answer, or any other error: the slot map cannot say where a pair's keys live
_SLOT_MAP_UNKNOWN: tuple[type[Exception], ...] = (*VALKEY_DOWN, redis.RedisError)


def _source(script: Script) -> str:
    """A registered script's Lua text (redis-py keeps what it was given: ours are str)."""
    text = script.script
    return text if isinstance(text, str) else bytes(text).decode()


def _refused_credentials(exc: BaseException) -> bool:
    """Whether Valkey refused a connection's credentials, in ``exc`` or what caused it (a
    cluster client reports a node it could not reach as a cluster error)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, redis.AuthenticationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _push_call(queue: str, tenant: str, warm_max: int, warm_max_bytes: int, kind: str,
               now_ms: int, token: str, since_ms: int,
               items: Sequence[tuple[str, Place, bytes | str]], share: TenantShare | None
               ) -> PushReady:
    """``WarmTier.push``'s script call (without ``share``: no bound)."""
    if share is None:
        share = TenantShare()
    if len(items) > PUSH_TASKS_PER_CALL:
        raise ValueError(f"a push of {len(items)} tasks: at most {PUSH_TASKS_PER_CALL} "
                         "per call")
    return PushReady(
        PairKeys.of(queue, tenant), warm_max, kind, now_ms, token, warm_max_bytes,
        since_ms, share.bound, share.grant, share.charge, share.keep, items)


def _push_outcome(out: PushReply, noted: bool, tasks: int, queue: str,
                  tenant: str) -> PushOutcome:
    """``WarmTier.push``'s outcome of a parsed reply; ``LatePush`` when it came late."""
    if out.mode == "late":
        raise LatePush(f"the push of {tasks} task(s) of {queue!r}/{tenant!r} came "
                       "after the reconciler took its rows over")
    return PushOutcome(out.mode, out.refused, given_back=out.given_back, short=out.short,
                       freed=out.freed, ready_before=out.ready_before, slack=out.slack,
                       noted=noted, gone=out.gone)


def _kept(pushes: Sequence[PushAlong], replies: Sequence[Any], at: int) -> None:
    """Keep in each push sent along its two replies (the push's, then its note's), from
    ``replies[at]`` on; a failed note is logged (the push's outcome says it was not made)."""
    for push in pushes:
        push.sent, push.reply, noted = True, replies[at], replies[at + 1]
        push.noted = not isinstance(noted, Exception)
        if isinstance(noted, Exception) and not isinstance(noted, NoScriptError):
            log.warning("entering %r in the ready-tenant index of %r failed: %s",
                        push.tenant, push.queue, noted)
        at += 2


def _repeated_or(reply: ClaimReply) -> ClaimReply | Exception:
    """A pop's reply, or ``ClaimRepeated`` when it repeated a pop that ran before."""
    return ClaimRepeated(reply.repeated, reply.granted) if reply.repeated else reply


class _available:  # (lower case: used as a function, ``with _available(credentials):``)
    """Valkey's failures around a call as tierq's: not answering (or credentials refused)
    is ``WarmTierUnavailable``, out of memory ``WarmTierFull``. A class, not a generator's
    context manager: it wraps every call to Valkey, and a generator costs a microsecond
    more each time."""

    __slots__ = ("credentials",)

    def __init__(self, credentials: CredentialProvider | None = None) -> None:
        self.credentials = credentials

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            return
        if isinstance(exc, VALKEY_DOWN):
            if _refused_credentials(exc):
                # an IAM token signed with credentials that have since expired or been
                # replaced: the next connection signs a new one (dal/valkey_auth.py)
                forget = getattr(self.credentials, "forget", None)
                if callable(forget):
                    forget()
                raise WarmTierUnavailable("Valkey refused the connection's credentials",
                                          detail=str(exc)) from exc
            raise WarmTierUnavailable("Valkey is not answering", detail=str(exc)) from exc
        if isinstance(exc, redis.exceptions.OutOfMemoryError):
            # maxmemory reached (noeviction): a 503 with Retry-After, never a 500; callers
            # that can (admission) send the work cold instead
            raise WarmTierFull() from exc


@cache
def _driver_info() -> Any | None:
    """What each new connection tells the server of its client (``CLIENT SETINFO``: redis-py
    and its version), made once per process: without it redis-py reads its package's
    metadata for every connection it makes (about half a millisecond of CPU each). None on
    a redis-py without ``redis.driver_info``, which reads it then."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return None
    return DriverInfo()


def client_options(url: str, credential_provider: CredentialProvider | None = None
                   ) -> dict[str, Any]:
    """Connection options of the Valkey client for ``url``; ``credential_provider``: the
    user and password of each new connection (ElastiCache IAM tokens, dal/valkey_auth.py)."""
    options: dict[str, Any] = {"socket_timeout": 10, "socket_connect_timeout": 5,
                               "health_check_interval": 30}
    driver = _driver_info()
    if driver is not None:
        options["driver_info"] = driver
    if credential_provider is not None:
        options["credential_provider"] = credential_provider
    if url.startswith("rediss://"):
        # TLS (ElastiCache Serverless always): verify the chain and the host name, whatever
        # the installed redis-py's defaults (before 6.0 it skipped the host name)
        options.update(ssl_cert_reqs="required", ssl_check_hostname=True)
    return options


class ClusterClient(RedisCluster):
    """redis-py's cluster client, but a call that timed out is not sent again.

    redis-py sends a call again up to ten times (its default ``retry``) after a connection
    error or a timeout, reading the slot map anew each time. After a refused connection
    that is how a failover is followed: the call never reached a server. After a timeout
    it multiplied a hung master's cost by eleven (110 s at the 10 s socket timeout, past
    every function's time), and the call may have run. So a timeout goes up at once
    (``WarmTierUnavailable``), as on a single server after its one retry on a fresh
    connection (dal/direct_calls.py). A pipeline's command that timed out is still sent
    once more alone: redis-py's pipeline decides that by its own class, not this one. A
    claim's pop sent again after a reset answers its first run's leases (lua/claim.lua).
    """

    # (a fixed-length tuple in redis-py's stubs: this one is shorter)
    ERRORS_ALLOW_RETRY = tuple(  # type: ignore[assignment]
        error for error in RedisCluster.ERRORS_ALLOW_RETRY
        if error is not redis.exceptions.TimeoutError)


class HeldDrop:
    """A lease drop held back within ``WarmTier.holding_drop``, to go at the front of the
    next round trip the tier makes on the same thread (an ack's drop sent with the claim
    that follows it: logic/ack_claim.py).

    | what happened                                   | ``error``                        |
    | ----------------------------------------------- | -------------------------------- |
    | the drop went and was answered                  | None                             |
    | a drop's error reply (as ``release_pairs``      | that error                       |
    | raises it)                                      |                                  |
    | the round trip it went in failed, and so did    | the second failure (the first    |
    | the drop sent again alone                       | may have run it)                 |
    """

    __slots__ = ("commands", "error", "settle")

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] | None = None  # the held drop's, None: none held
        self.settle: Callable[[list[Any]], Any] | None = None  # what handles their replies
        self.error: Exception | None = None


class WarmTier:
    """The warm tier of every (queue, tenant), over one Valkey client."""

    def __init__(self, client: redis.Redis | RedisCluster) -> None:
        self.client = client
        # what gives each new connection its user and password (None: the URL's), told when
        # Valkey refuses them
        options = client.nodes_manager.connection_kwargs if isinstance(client, RedisCluster) \
            else client.connection_pool.connection_kwargs
        self.credentials: CredentialProvider | None = options.get("credential_provider")
        self.scripts = Scripts(client)
        # cluster clients route each call by its key slot themselves
        self.calls = None if isinstance(client, RedisCluster) else DirectCalls(client)
        # INFO memory per server (``memory``): when it was read (time.monotonic()) and what
        # it said; whether Valkey refused INFO (then never asked again)
        self._memory_seen: dict[str, tuple[float, Memory]] = {}
        self.info_refused = False
        from tierq.dal.throughput import ThroughputCounts  # it reads this module's scripts
        self.throughput: ThroughputCounts = ThroughputCounts(self)
        # the lease drop held on this thread (``holding_drop``)
        self._held = threading.local()

    @classmethod
    def from_url(cls, url: str, *, cluster: bool = False,
                 credential_provider: CredentialProvider | None = None) -> WarmTier:
        """A warm tier over a new client; its connections refuse any command of more
        arguments than ElastiCache Serverless takes (dal/command_limit.py)."""
        options = client_options(url, credential_provider)
        if cluster:
            # (a cluster client reads the slot map from a node as it is made: unreachable,
            # that is Valkey not answering, as for any call)
            with _available(credential_provider):
                return cls(ClusterClient.from_url(
                    url, connection_pool_class=LimitedConnectionPool, **options))
        return cls(redis.Redis.from_url(url, connection_class=connection_class(url),
                                        **options))

    def master_of(self, queue: str, tenant: str) -> str | None:
        """``host:port`` of the cluster master serving the pair's keys (from the client's
        slot map, no call); ``""`` for a single server; None when the map does not say."""
        return self._master_of_key(PairKeys.of(queue, tenant).ready)

    def index_master(self, queue: str, shard_tag: int | None = None) -> str | None:
        """``host:port`` of the master serving the queue's ready-tenant index, as
        ``master_of`` answers for a pair."""
        return self._master_of_key(QueueKeys.ready_tenants(queue, shard_tag))

    def _master_of_key(self, key: str) -> str | None:
        if not isinstance(self.client, RedisCluster):
            return ""
        try:
            node = self.client.get_node_from_key(key)
        except _SLOT_MAP_UNKNOWN:
            return None
        return None if node is None else f"{node.host}:{node.port}"

    def close(self) -> None:
        if self.calls is not None:
            self.calls.close()
        self.client.close()

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self.run_script(self.scripts[name], keys, args)

    def call(self, call: LuaCall[R]) -> R:
        """Run one typed script call (dal/lua_calls.py) and parse its reply."""
        keys, args = call.build()
        return call.parse(self.run_script(self.scripts[call.SCRIPT], keys, args))

    def run_script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a script registered on this tier's client, on the master of its keys' slot;
        ``WarmTierUnavailable`` / ``WarmTierFull`` when Valkey cannot answer."""
        ride: HeldDrop | None = getattr(self._held, "drop", None)
        if ride is not None and ride.commands is not None:
            reply = self._along(ride, [("EVALSHA", script.sha, len(keys), *keys, *args)])[0]
            if isinstance(reply, NoScriptError):  # (Valkey lost its scripts: loaded, run)
                return self.run_script(script, keys, args)
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
            return reply
        with _available(self.credentials):
            if self.calls is not None:
                return self.calls.script(script, keys, args)
            return self._cluster_script(script, keys, args)

    def _cluster_script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA on the master of the keys' slot; a master that does not know the script
        yet gets it with EVAL, on that master alone. (redis-py's Script would send SCRIPT
        LOAD to every master, so one master down would fail the pairs of all the others.)"""
        try:
            return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.client.eval(_source(script), len(keys), *keys, *args)

    def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies of several commands, sent together: one round trip on a single
        server; in cluster mode one per master their keys' slots live on (sent to all of
        them before any reply is read). An error reply is returned in its place, not
        raised; ``WarmTierUnavailable`` when Valkey does not answer. A drop held to ride
        (``holding_drop``) goes first in the same round trip."""
        ride: HeldDrop | None = getattr(self._held, "drop", None)
        if ride is not None and ride.commands is not None:
            return self._along(ride, commands)
        return self._pipeline(commands)

    def _pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """``pipeline``, without a held drop."""
        with _available(self.credentials):
            if self.calls is not None:
                return self.calls.pipeline(commands)
            cluster = self.client
            assert isinstance(cluster, RedisCluster)  # (a single server has its direct calls)
            pipe = cluster.pipeline(transaction=False)
            for args in commands:
                if args[0] == "EVALSHA" and int(args[2]) > 0:
                    # routed by its first key here: redis-py's cluster pipeline would ask a
                    # node for a script's keys first (COMMAND GETKEYS), a round trip each
                    pipe.execute_command(*args,
                                         target_nodes=cluster.get_node_from_key(args[3]))
                else:
                    pipe.execute_command(*args)
            return list(pipe.execute(raise_on_error=False))

    @contextmanager
    def holding_drop(self) -> Iterator[HeldDrop]:
        """Within the block, a lease drop ``release_pairs`` makes on this thread, carrying no
        answers and no pushes (and, in cluster mode, no reservations to give back), is held
        while none is, not sent: it goes at the front of the next script call or pipeline
        the tier makes on this thread, one round trip for both. Should that round trip
        fail, the drop is sent again alone. One still held when the block ends is sent
        then, alone. Whatever the drop's replies raise is kept in the ``HeldDrop``
        (``error``), not raised where it went: the caller raises it
        (logic/ack_claim.py)."""
        if getattr(self._held, "drop", None) is not None:
            raise RuntimeError("a lease drop is held on this thread already")
        held = HeldDrop()
        self._held.drop = held
        try:
            yield held
        except BaseException:
            self._send_held(held)
            if held.error is not None:  # (the block's own error goes up: this one is told)
                log.warning("a held lease drop failed after its block failed: %s",
                            held.error)
            raise
        self._send_held(held)

    def holding(self) -> bool:
        """Whether a lease drop would be held on this thread (within ``holding_drop``)."""
        return getattr(self._held, "drop", None) is not None

    def _send_held(self, held: HeldDrop) -> None:
        """``holding_drop``'s end: the drop still held, if any, sent alone; its error kept
        in ``held``."""
        self._held.drop = None
        if held.commands is not None:
            with suppress(Exception):  # (kept in held.error for the caller)
                self._along(held, [])

    def _along(self, held: HeldDrop, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies of ``commands``, sent after the drop ``held`` keeps in one round trip;
        the drop's replies handled by its own code, its error kept in ``held``. When that
        round trip fails, the drop is sent again alone (each lease is dropped by its token:
        a drop run twice drops it once), then the round trip's error is raised."""
        drop, settle = held.commands, held.settle
        assert drop is not None and settle is not None
        held.commands = held.settle = None
        try:
            replies = self._pipeline([*drop, *commands])
        except Exception as exc:
            held.error = exc
            if commands:
                try:
                    settle(self._pipeline(drop))
                except Exception as again:
                    held.error = again
                else:
                    held.error = None
            raise
        try:
            settle(replies[:len(drop)])
        except Exception as exc:
            held.error = exc
        return replies[len(drop):]

    def server_time(self, key: str) -> float:
        """The server's clock (epoch seconds); in cluster mode the clock of the master that
        serves ``key`` (so a read of that key needs no other master up)."""
        with _available(self.credentials):
            if isinstance(self.client, RedisCluster):
                node = self.client.get_node_from_key(key)
                seconds, micros = self.client.execute_command(
                    "TIME", target_nodes=node)
            else:
                seconds, micros = self._command("TIME")
        return int(seconds) + int(micros) / 1e6

    def _command(self, *args: Any) -> Any:
        with _available(self.credentials):
            if self.calls is not None:
                return self.calls.command(*args)
            if isinstance(self.client, RedisCluster):  # routes the call by its key's slot
                return self.client.execute_command(*args)
        raise AssertionError("a single server's client always has its direct calls")

    # -- a tenant's own limits on the HTTP API (logic/tenant_limits.py) ---------------

    def tenant_request(self, tenant: str, *, rate: float, burst: int) -> int:
        """Take one token of the tenant's request bucket: 0, or the ms until one."""
        return self.call(TenantRequests(TenantKeys.of(tenant), rate, burst))

    def poll_begin(self, key: str, *, cap: int, reservation: str, hold_ms: int) -> bool:
        """Take one of the ``cap`` long-poll places of ``key`` (a tenant's
        ``TenantKeys.polls``, or ``ALL_POLLS_KEY``) for up to ``hold_ms``."""
        return self.call(LongPolls(PollKey(key), cap, reservation, hold_ms))

    def poll_end(self, key: str, reservation: str) -> None:
        """Give the place back (one command: an expired one is gone already)."""
        self._command("ZREM", key, reservation)

    # -- waits for a task's end (logic/waits.py) ---------------------------------------

    def task_finished(self, queue: str, tenant: str, items: Sequence[tuple[str, str, int]],
                      *, ttl_ms: int, cap: int, charge: int = 0) -> int:
        """Mark the pair's tasks (id, state, attempt) finished for ``ttl_ms`` (at most
        ``cap`` markers kept, fewer under a tenant's bound: ``charge`` > 0) and wake their
        waiters (lua/task_finished.lua); how many waiters were reached."""
        k = PairKeys.of(queue, tenant)
        return sum(self.call(TaskFinished(k, ttl_ms, cap, charge, part))
                   for part in chunks(items, TaskFinished.items_per_call()))

    def finished_of(self, queue: str, tenant: str, task_id: str) -> FinishMark | None:
        """The task's completion marker, of either generation (lua/task_wait.lua, one
        call); None when it has none (whether or not the pair's markers went early)."""
        mark = FinishMark.of(self.call(TaskWait(PairKeys.of(queue, tenant), task_id, 0, 0)))
        return None if mark is not None and mark.state == MARKERS_DROPPED else mark

    def wait_begin(self, queue: str, tenant: str, task_id: str, *,
                   ttl_ms: int) -> FinishMark | None:
        """Register a wait for the task's message (kept ``ttl_ms`` after the pair's last
        registration) and look for its marker, in one atomic call (lua/task_wait.lua): call
        it once subscribed to the task's channel (``finished_channel``), so a finish either
        left the marker this answers or publishes to the subscription. None when it has
        none; a mark of state ``MARKERS_DROPPED`` when it has none but the pair's markers
        went early lately (the task may have ended: read its row again)."""
        return FinishMark.of(self.call(TaskWait(PairKeys.of(queue, tenant), task_id, 1,
                                                ttl_ms)))

    def wait_end(self, queue: str, tenant: str, task_id: str) -> None:
        """Take a registration of ``wait_begin`` back (a finish may have taken it)."""
        self.call(TaskWait(PairKeys.of(queue, tenant), task_id, -1, 0))

    @contextmanager
    def finished_channel(self, queue: str, tenant: str,
                         task_id: str) -> Iterator[Callable[[float], str | None]]:
        """Subscribe to the task's channel (SSUBSCRIBE: the pair's slot, on its master) for
        the block; it gets a function that waits up to its argument's seconds for the
        message and returns the marker it carries, '<state>|<attempt>|<ms>' (None: none
        came). The subscription is
        confirmed by the server before the block starts, so a marker looked for inside the
        block closes the race with a finish that came before it."""
        channel = f"{PairKeys.of(queue, tenant).finished}:{task_id}"
        cluster = isinstance(self.client, RedisCluster)
        with _available(self.credentials):
            pubsub: Any = self.client.pubsub()  # type: ignore[no-untyped-call]
        try:
            def message(timeout: float) -> dict[str, Any] | None:
                with _available(self.credentials):
                    if cluster:
                        got = pubsub.get_sharded_message(timeout=timeout)
                    else:
                        got = pubsub.get_message(timeout=timeout)
                return got if isinstance(got, dict) else None

            def receive(seconds: float, kind: str = "smessage") -> str | None:
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    got = message(left)
                    if got is not None and _s(got.get("type")) == kind:
                        return _s(got.get("data"))
                return None

            with _available(self.credentials):
                pubsub.ssubscribe(channel)
            if receive(SUBSCRIBE_SECONDS, "ssubscribe") is None:
                raise WarmTierUnavailable("Valkey did not confirm a subscription",
                                          detail=channel)
            yield receive
        finally:
            try:
                pubsub.close()
            except Exception:  # (the connection is dropped either way)
                log.debug("closing a subscription failed", exc_info=True)

    # -- admission ---------------------------------------------------------------------

    def push(self, queue: str, tenant: str, *, warm_max: int, warm_max_bytes: int, kind: str,
             now_ms: int, token: str, since_ms: int,
             items: Sequence[tuple[str, Place, bytes | str]],
             share: TenantShare | None = None, note: bool = False,
             shard_tag: int | None = None) -> PushOutcome:
        """Push (id, place, blob) items, at most ``PUSH_TASKS_PER_CALL``; ``since_ms``: when
        the admission began (at or before the ``state_since`` its rows were written with);
        ``share``: how it counts against its tenant's bound (lua/push_ready.lua ARGV 7-10).
        ``note``: on a single server, enter the tenant in the queue's ready-tenant index
        (``shard_tag``'s) in the same round trip, after the push (a pipeline runs in
        order); a cluster holds the index in another slot, where a pipeline keeps no order,
        so there the caller notes itself (``noted`` False). Raises ``LatePush`` when the
        reconciler has taken the admission's rows over (nothing was pushed), and
        ``WarmTierFull`` when Valkey is out of memory (nothing was pushed). Without
        ``share``: no bound (``TenantShare()``)."""
        call = _push_call(queue, tenant, warm_max, warm_max_bytes, kind, now_ms, token,
                          since_ms, items, share)
        noted = False
        if note and self.calls is not None:
            out, noted = self._push_noted(call, queue, tenant, shard_tag)
        else:
            out = self.call(call)
        return _push_outcome(out, noted, len(items), queue, tenant)

    def push_along(self, queue: str, tenant: str, *, warm_max: int, warm_max_bytes: int,
                   kind: str, now_ms: int, token: str, since_ms: int,
                   items: Sequence[tuple[str, Place, bytes | str]],
                   share: TenantShare | None = None,
                   shard_tag: int | None = None) -> PushAlong | None:
        """``push`` (with ``note``) made ready to send in ``release``'s round trip of the
        same pair; None in cluster mode, where a pipeline keeps no order across masters
        (the caller pushes on its own)."""
        if self.calls is None:
            return None
        call = _push_call(queue, tenant, warm_max, warm_max_bytes, kind, now_ms, token,
                          since_ms, items, share)
        index = ReadyTenantsNote(_Index(QueueKeys.ready_tenants(queue, shard_tag)), [tenant])
        return PushAlong(queue, tenant, call, index, len(items))

    def pushed_along(self, along: PushAlong) -> PushOutcome:
        """The outcome of a push sent along (``push_along``), raised as ``push`` raises
        (``LatePush``, ``WarmTierFull``, ``WarmTierUnavailable``). A push that was not sent,
        or whose script Valkey did not know, is sent now on its own (the note is then the
        caller's)."""
        reply, noted = along.reply, along.noted
        if not along.sent or isinstance(reply, NoScriptError):
            reply, noted = self.call(along.call), False
        elif isinstance(reply, Exception):
            with _available(self.credentials):
                raise reply
        else:
            reply = along.call.parse(reply)
        return _push_outcome(reply, noted, along.tasks, along.queue, along.tenant)

    def push_pairs(self, pushes: Sequence[PushAlong]) -> None:
        """Send pushes made by ``push_along`` in one pipeline (a single server: in order),
        each followed by its tenant's note, as ``push`` with ``note`` sends each; every
        reply is kept in its push for ``pushed_along``, never raised here.
        ``WarmTierUnavailable`` when Valkey does not answer (nothing kept; it rises from
        ``admission.dispatch`` as a push's own would)."""
        push_sha = self.scripts[PushReady.SCRIPT].sha
        note_sha = self.scripts[ReadyTenantsNote.SCRIPT].sha
        commands: list[tuple[Any, ...]] = []
        for push in pushes:
            commands += [evalsha(push.call, push_sha), evalsha(push.note, note_sha)]
        _kept(pushes, self.pipeline(commands), 0)

    def _push_noted(self, call: PushReady, queue: str, tenant: str,
                    shard_tag: int | None) -> tuple[PushReply, bool]:
        """The push and the note of its tenant in one pipeline (a single server); whether
        the note was made. A script the server does not know is loaded by a call of its
        own: the push alone then, and the note is the caller's."""
        index = ReadyTenantsNote(_Index(QueueKeys.ready_tenants(queue, shard_tag)), [tenant])
        pushed, noted = self.pipeline([
            evalsha(call, self.scripts[PushReady.SCRIPT].sha),
            evalsha(index, self.scripts[ReadyTenantsNote.SCRIPT].sha)])
        if isinstance(pushed, NoScriptError):
            return self.call(call), False
        if isinstance(pushed, Exception):
            with _available(self.credentials):
                raise pushed
        if isinstance(noted, Exception) and not isinstance(noted, NoScriptError):
            log.warning("entering %r in the ready-tenant index of %r failed: %s", tenant,
                        queue, noted)
        return call.parse(pushed), not isinstance(noted, Exception)

    # -- a tenant's share of the warm tier (logic/tenant_budget.py) --------------------------

    def ledger_take(self, tenant: str, queue: str, *, want: int, bound: int,
                    now_ms: int) -> int:
        """Take up to ``want`` bytes of the tenant's bound for the pair (queue, tenant)
        from its ledger (lua/warm_ledger.lua); returns the bytes granted."""
        return self.call(WarmLedger(TenantKeys.of(tenant), "take", queue, want, bound,
                                    now_ms, 0, 0)).amount

    def ledger_set(self, tenant: str, queue: str, *, allot: int | None, freed: int,
                   now_ms: int, quiet_ms: int) -> int:
        """Tell the ledger the pair gave bytes back: ``freed`` is its count of bytes given
        back so far (meta ``freed``), ``allot`` its allotment after a shrink (None: a
        push's report, which only lowers the entry); lua/warm_ledger.lua 'set'. Returns the
        ledger's total after."""
        return self.call(WarmLedger(TenantKeys.of(tenant), "set", queue,
                                    "" if allot is None else allot, 0, now_ms, quiet_ms,
                                    freed)).total

    def ledger_cancel(self, tenant: str, queue: str, *, amount: int) -> int:
        """Take a grant the pair never received (its push wrote nothing) out of the
        ledger (lua/warm_ledger.lua 'cancel'); returns the ledger's total after."""
        return self.call(WarmLedger(TenantKeys.of(tenant), "cancel", queue, amount, 0, 0, 0,
                                    0)).total

    def ledger_total(self, tenant: str) -> int:
        """The bytes the tenant's pairs hold allotted, as its ledger counts them."""
        raw = self._command("HGET", TenantKeys.of(tenant).warm, "~total")
        return 0 if raw is None else int(raw)

    def ledger_queues(self, tenant: str, count: int) -> list[str]:
        """Up to ``count`` queues holding an allotment in the tenant's ledger, at random
        (HRANDFIELD: O(count), whatever the ledger's size)."""
        raw = self._command("HRANDFIELD", TenantKeys.of(tenant).warm, count)
        return [q for q in (_s(x) for x in raw or []) if q != "~total"]

    def shrink_allot(self, queue: str, tenant: str, *, charge: int,
                     keep: int) -> tuple[int, int, int]:
        """Lower the pair's allotment to its usage plus ``keep`` (lua/allot_shrink.lua);
        returns (bytes freed, allotment after, the pair's count of bytes given back so
        far)."""
        return self.call(AllotShrink(PairKeys.of(queue, tenant), charge, keep))

    def pair_usage(self, queue: str, tenant: str, *, charge: int) -> tuple[int, int, int]:
        """(usage, allotment, the usage's completion markers) of the pair
        (lua/warm_usage.lua), changing nothing: the allotment it could give back is the
        difference, and the markers give way to tasks (a push may take their room)."""
        k = PairKeys.of(queue, tenant)
        replies = self.pipeline([("ZCARD", k.ready), ("ZCARD", k.leased), ("ZCARD", k.gone),
                                 ("HMGET", k.meta, "bytes", "allot", "progress", "newer"),
                                 ("HLEN", k.finished), ("HLEN", k.finished_prev)])
        for reply in replies:
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
        (ready, leased, stones, (raw_bytes, raw_allot, raw_progress, raw_newer), *generations
         ) = replies
        used = (0 if raw_bytes is None else max(0, int(raw_bytes))) if int(ready) else 0
        # the leases' progress, the replacements kept for pushes, the tombstones, the markers
        used += sum(0 if raw is None else max(0, int(raw)) for raw in (raw_progress, raw_newer))
        used += int(stones) * GONE_CHARGE
        markers = sum(max(0, int(n) - MARKER_OWN_FIELDS) for n in generations) * MARKER_CHARGE
        return (used + markers + (int(ready) + int(leased)) * charge,
                0 if raw_allot is None else int(raw_allot), markers)

    # -- the server's memory ---------------------------------------------------------------

    def memory(self, queue: str, tenant: str, *, fresh: bool = False) -> Memory | None:
        """The memory of the Valkey server that holds the pair's keys (``INFO memory`` of its
        master), read at most every MEMORY_READ_EVERY seconds per server (``fresh``: now,
        whatever was read before); None when that
        server refuses INFO (ElastiCache's users: remembered, never asked again by this
        client) or does not answer."""
        if self.info_refused:
            return None
        node = self.master_of(queue, tenant)
        if node is None:
            return None
        now = time.monotonic()
        seen = self._memory_seen.get(node)
        if seen is not None and now - seen[0] < MEMORY_READ_EVERY and not fresh:
            return seen[1]
        try:
            with _available(self.credentials):
                if isinstance(self.client, RedisCluster):
                    target = self.client.get_node_from_key(PairKeys.of(queue, tenant).ready)
                    info = self.client.info("memory", target_nodes=target)
                else:
                    info = self.client.info("memory")
        except redis.ResponseError as exc:
            # NOPERM (an ACL without INFO: ElastiCache's users), or INFO renamed away
            log.info("Valkey refused INFO (%s): free memory is not known; the warm tier's "
                     "capacity comes from TIERQ_WARM_CAPACITY_BYTES", exc)
            self.info_refused = True
            return None
        except WarmTierUnavailable:
            return None
        if "used_memory" not in info:  # (a cluster client answers per node)
            info = next(iter(info.values()), {})
        found = Memory(int(info.get("maxmemory", 0) or 0), int(info.get("used_memory", 0)))
        self._memory_seen[node] = (now, found)
        return found

    def forget_memory(self) -> None:
        """Read the servers' memory afresh on the next ``memory`` call."""
        self._memory_seen.clear()

    def admission_begin(self, queue: str, tenant: str, *, now_ms: int, token: str,
                        force_cold: bool = False) -> str:
        return self.call(AdmissionBegin(PairKeys.of(queue, tenant), now_ms, token, force_cold))

    def admission_begin_fits(self, pairs: Sequence[tuple[str, str, int, int, AdmittedSize]],
                             *, now_ms: int, token: str, stale_ms: int) -> list[str]:
        """``admission_begin`` for several pairs at once, each (queue, tenant, warm_max,
        warm_max_bytes, what the caller will push: the bytes of its first task, its tasks,
        their bytes): a pair whose warm set could not take that first task turns cold, one
        that can records the caller's tasks as about to be pushed (lua/admission_begin.lua).
        One round trip on a single server (one per master in cluster mode); the modes in
        the order given."""
        calls = [AdmissionBegin(PairKeys.of(queue, tenant), now_ms, token, False, warm_max,
                                warm_max_bytes, max(1, size[0]), size[1], size[2], stale_ms)
                 for queue, tenant, warm_max, warm_max_bytes, size in pairs]
        if len(calls) == 1:
            return [self.call(calls[0])]
        sha = self.scripts[AdmissionBegin.SCRIPT].sha
        replies = self.pipeline([evalsha(call, sha) for call in calls])
        modes: list[str] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):
                modes.append(self.call(call))  # (Valkey lost its scripts: loaded)
                continue
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
            modes.append(call.parse(reply))
        return modes

    def go_cold(self, queue: str, tenant: str, *, now_ms: int, token: str) -> None:
        """Turn the pair cold and register the admission ``token`` as in flight, even while
        Valkey is out of memory (go_cold.lua); end it with ``admission_end``."""
        self.call(GoCold(PairKeys.of(queue, tenant), now_ms, token))

    def admission_end(self, queue: str, tenant: str, token: str) -> None:
        self.call(AdmissionEnd(PairKeys.of(queue, tenant), token))

    def mode(self, queue: str, tenant: str, *, op: str, now_ms: int, stale_ms: int,
             warm_max: int, warm_max_bytes: int, expected_epoch: str = "") -> ModeObservation:
        out = self.call(AdmissionMode(PairKeys.of(queue, tenant), op, now_ms, stale_ms,
                                      warm_max, expected_epoch, warm_max_bytes))
        return ModeObservation(out.mode, out.epoch, out.inflight, out.ready, out.flipped,
                               out.ready_bytes)

    # -- claims and leases -------------------------------------------------------------

    def claim(self, queue: str, tenant: str, *, n: int, now_ms: int, lease_ms: int,
              token_prefix: str, worker: str, max_bytes: int = 0,
              strict: bool = False, per_task_bytes: int = 0) -> tuple[int, str, list[Claimed]]:
        """Returns (ready left, mode, claimed). ``max_bytes`` (0: no cap) caps what the
        tasks handed out cost in a Lambda response: each task's JSON text with one more
        byte per quote and backslash, plus ``per_task_bytes`` for the fields around it
        (lua/claim.lua). The first task always comes unless ``strict``; tasks past the cap
        stay in their places in line."""
        left, mode, claimed, _, _ = self.claim_limited(
            queue, tenant, n=n, now_ms=now_ms, lease_ms=lease_ms, token_prefix=token_prefix,
            worker=worker, max_bytes=max_bytes, strict=strict, per_task_bytes=per_task_bytes)
        return left, mode, claimed

    @property
    def single_server(self) -> bool:
        """Whether every key is on one server (not a cluster): a script may then touch the
        keys of several slots (a claim's queue-wide take rides in its first pair's script)."""
        return self.calls is not None

    def claim_limited(self, queue: str, tenant: str, *, n: int, now_ms: int, lease_ms: int,
                      token_prefix: str, worker: str, max_bytes: int = 0,
                      strict: bool = False, per_task_bytes: int = 0,
                      tenant_max_leased: int = 0, tenant_rate: tuple[float, int] | None = None,
                      first_k: int = 0, take: QueueTake | None = None,
                      timeout_seconds: int | None = None,
                      ) -> tuple[int, str, list[Claimed], int, int]:
        """``claim`` under the tenant's limits: ``tenant_max_leased`` (0: none) and
        ``tenant_rate`` (per_second, burst) cut ``n`` atomically with the pop. The leases
        are numbered from ``first_k + 1`` (a claim across pairs numbers on from one pair to
        the next). ``take`` (single server only): the claim's queue-wide take, made first in
        the same script, with the leases' deadline; ``n`` is cut to what it grants.
        Returns (ready left, mode, claimed, retry_after_ms, granted): retry_after_ms is
        when more may be had, 0 when the limits did not cut the claim; granted is what
        ``take`` granted (-1 without one). ``timeout_seconds``: the queue's time limit of
        an attempt, recorded with each lease whose task has none of its own (lua/claim.lua);
        a lease's deadline is then at most its claim's ``now_ms`` plus its limit."""
        riding: ClaimTake | None = None
        if take is not None:
            if not self.single_server:
                raise ValueError("a queue-wide take rides in a pair's claim on a single "
                                 "server only (its keys are in another slot)")
            q_second, q_burst = take.rate if take.rate is not None else (0.0, 0)
            riding = ClaimTake(QueueKeys.held(take.queue, take.pool),
                               QueueKeys.counts(take.queue, take.pool),
                               QueueKeys.of(take.queue).bucket, take.want, take.holder,
                               take.max_held, wire_float(q_second), q_burst, take.shares)
        out = self.call(Claim(
            PairKeys.of(queue, tenant), n, now_ms, lease_ms, token_prefix, worker,
            max_bytes=max_bytes, strict=strict, per_task_bytes=per_task_bytes,
            tenant_max_leased=tenant_max_leased, tenant_rate=tenant_rate, first_k=first_k,
            timeout_seconds=timeout_seconds or 0, take=riding))
        if out.repeated:
            raise ClaimRepeated(out.repeated, out.granted)
        return out.left, out.mode, out.claimed, out.retry_after_ms, out.granted

    def claim_pairs(self, calls: Sequence[Claim]) -> list[ClaimReply | Exception]:
        """The pops of several pairs (lua/claim.lua each, as ``claim_limited`` without a
        take) in one pipeline: one round trip on a single server, one per master
        in cluster mode. A script Valkey lost is loaded and that pop run again. Each pop's
        reply or error is returned in its place, never raised here: the caller records
        every pop that leased tasks before it raises the first error (a failing claim gives
        back what it popped). The errors are as ``claim_limited`` would raise them
        (``WarmTierUnavailable``, ``WarmTierFull``, a script's error reply, ``ClaimRepeated``
        for a pop sent again after its reply was lost); a Valkey that does not answer at
        all raises ``WarmTierUnavailable``."""
        if not calls:
            return []
        sha = self.scripts[Claim.SCRIPT].sha
        try:
            replies = self.pipeline([evalsha(call, sha) for call in calls])
        except WarmTierUnavailable as exc:
            if self.single_server:
                raise
            if isinstance(exc.__cause__, redis.ConnectionError | redis.TimeoutError):
                # a master refused its connection: redis-py's cluster pipeline takes every
                # master's connection before it writes, and after the writes keeps such
                # errors in their places, so nothing ran; each pop on its own, so the pairs
                # of the masters that answer are popped (logic/claim_isolation.py)
                return [self._call_or_error(call) for call in calls]
            # (another error may come after the writes, some pops run: none is sent again)
            return [exc] * len(calls)
        out: list[ClaimReply | Exception] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):  # (the script did not run: run it again)
                out.append(self._call_or_error(call))
                continue
            if isinstance(reply, Exception):
                out.append(self._as_raised(reply))
            else:
                out.append(_repeated_or(call.parse(reply)))
        return out

    def _call_or_error(self, call: Claim) -> ClaimReply | Exception:
        """One pop's reply, or the error it raised."""
        try:
            return _repeated_or(self.call(call))
        except Exception as exc:
            return exc

    def _as_raised(self, error: Exception) -> Exception:
        """A pipeline's error reply as a call of its own would raise it (``_available``)."""
        try:
            with _available(self.credentials):
                raise error
        except Exception as exc:
            return exc

    # -- limits: queue-wide capacity (lua/capacity_pool.lua) --------------------------------

    def take_capacity(self, queue: str, pool: str, *, want: int, now_ms: int,
                      deadline_ms: int, holder: str, max_held: int = 0,
                      rate: tuple[float, int] | None = None, give_back_tokens: int = 0,
                      give_back_past: int | None = None) -> CapacityTaken:
        """Take up to ``want`` units of a queue's capacity, in one script on the queue's
        own slot (lua/queue_capacity.lua): with ``max_held``, one entry ``holder`` in the
        pool ``pool`` (at most ``max_held`` units held whose deadline is after ``now_ms``)
        for the units ``<holder>1`` .. ``<holder>N``, until ``deadline_ms``; with ``rate``
        (per_second, burst), tokens of the queue's bucket (the server's clock). With
        ``want`` 0, what an earlier take did not use is given back instead: tokens
        (``give_back_tokens``) and the units of ``holder``'s take past the first
        ``give_back_past``."""
        out = self.call(QueueCapacity(
            PoolKeys(QueueKeys.held(queue, pool), QueueKeys.counts(queue, pool),
                     QueueKeys.of(queue).bucket),
            want, now_ms, deadline_ms, holder, max_held, rate, give_back_tokens,
            give_back_past))
        return CapacityTaken(out.taken, out.retry_after_ms, out.held)

    def extend_capacity(self, queue: str, pool: str, *, now_ms: int,
                        deadlines: Sequence[tuple[str, int]]) -> list[int]:
        """Move reservation units still held and whose deadline is after ``now_ms`` on,
        (unit, deadline_ms) each, never earlier (lua/capacity_extend.lua: one given back,
        swept or expired is not made again). Returns each unit's deadline after, in the
        order given, 0 for one not held."""
        if not deadlines:
            return []
        groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for i, (unit, deadline) in enumerate(deadlines):
            holder, k = split_unit(unit)
            groups.setdefault((holder, deadline), []).append((i, k))
        keys = PoolKeys(QueueKeys.held(queue, pool), QueueKeys.counts(queue, pool), "")
        room = CapacityExtend.items_per_call()  # the groups' arguments per call
        after = [0] * len(deadlines)
        args: list[Any] = []
        order: list[int] = []
        for (holder, deadline), units in groups.items():
            for part in chunks(units, room - 3):  # (a group larger than a call: in parts)
                if len(args) + 3 + len(part) > room:
                    self._extend_units(CapacityExtend(keys, now_ms, args), order, after)
                    args, order = [], []
                args += (holder, deadline, len(part), *(k for _, k in part))
                order += (i for i, _ in part)
        self._extend_units(CapacityExtend(keys, now_ms, args), order, after)
        return after

    def _extend_units(self, call: CapacityExtend, order: list[int], after: list[int]) -> None:
        """One capacity_extend call of ``extend_capacity``: deadlines into ``after``."""
        if not order:
            return
        for i, deadline in zip(order, self.call(call), strict=True):
            after[i] = deadline

    @staticmethod
    def return_capacity_call(queue: str, pool: str, groups: Sequence[str]) -> ScriptCall:
        """The call of ``return_capacity`` for units as ``unit_groups`` or
        ``token_groups`` gives them (for ``release(then=...)``)."""
        call = CapacityFree(PoolKeys(QueueKeys.held(queue, pool),
                                     QueueKeys.counts(queue, pool), ""), groups)
        keys, args = call.build()
        return ScriptCall(call.SCRIPT, keys, tuple(args))

    def return_capacity(self, queue: str, pool: str, units: Sequence[str], *,
                        tokens: bool = False) -> int:
        """Give back reservation units (finished or unused), each at most once
        (lua/capacity_free.lua); ``tokens``: the units held by these lease tokens
        (``reservation_of``). Returns how many were given back (not given back before; a
        take whose deadline has passed counts until a take sweeps it)."""
        if not units:
            return 0
        freed = 0
        keys = PoolKeys(QueueKeys.held(queue, pool), QueueKeys.counts(queue, pool), "")
        # at worst a group of one per unit: holder, 1, k
        for part in chunks(units, CapacityFree.items_per_call() // 3):
            freed += self.call(CapacityFree(
                keys, token_groups(part) if tokens else unit_groups(part)))
        return freed

    def capacity_use(self, queue: str, pool: str, *, now_ms: int,
                     rate: tuple[float, int] | None = None) -> tuple[int, float | None]:
        """(units of the pool held whose deadline is ahead, tokens in the queue's bucket
        now or None without ``rate``); changes nothing."""
        return self.call(CapacityUse(UseKeys(QueueKeys.held(queue, pool),
                                             QueueKeys.of(queue).bucket), now_ms, rate,
                                     UseCounts(QueueKeys.counts(queue, pool))))

    def pair_limit_use(self, queue: str, tenant: str, *, now_ms: int,
                       rate: tuple[float, int] | None = None) -> tuple[int, float | None]:
        """(the pair's leases whose deadline is ahead, tokens in the tenant's bucket now or
        None without ``rate``); changes nothing."""
        k = PairKeys.of(queue, tenant)
        return self.call(CapacityUse(UseKeys(k.leased, k.bucket), now_ms, rate))

    def verify(self, queue: str, tenant: str, *, now_ms: int,
               members: Sequence[str]) -> list[bool]:
        """Whether each lease (a member ``lease_member(id, token)``) is held and unexpired:
        one ZMSCORE (a token not issued for that id names no member). It marks nothing: a
        heartbeat's check; an ack's or a nack's is ``verify_tenants``."""
        return [d is not None and float(d) > now_ms
                for d in self._deadlines(PairKeys.of(queue, tenant).leased, members)]

    def ack_check_join(self, mail: AckMail, leases: Sequence[tuple[str, int]], *, now_ms: int,
                       lock_ms: int, most: int
                       ) -> tuple[list[bool], str | None, str, list[str]]:
        """Check one pair's leases (``leases``: member and attempt), each held marked as
        ending, and join the pair's mailbox of acks committed together with those held
        (lua/ack_check_join.lua), in one call."""
        request = mail.reply.rpartition(":")[2]
        return self.call(AckCheckJoin(mail, now_ms, request, lock_ms, most, leases))

    def ack_look(self, mail: AckMail, entry: str, *, lock_ms: int,
                 most: int) -> tuple[str, list[str]]:
        """A waiting ack looks at its pair's mailbox again (lua/ack_look.lua)."""
        return self.call(AckLook(mail, entry, lock_ms, most))

    def ack_answer(self, mail: AckMail, owner: str, answers: Sequence[tuple[str, bytes]], *,
                   most: int, lock_ms: int, reply_ttl_ms: int) -> tuple[list[str], int]:
        """Send each waiting ack its answer (its reply list, expiring after
        ``reply_ttl_ms``), then forget those requests and go on with the entries that came
        meanwhile or let the lock go (lua/ack_pass.lua), in one round trip: (the entries
        taken, how many answers Valkey refused). Raises when the pass itself failed."""
        along = AnswersAlong(mail, owner, answers, most=most, lock_ms=lock_ms,
                             reply_ttl_ms=reply_ttl_ms)
        if not answers:
            return self.call(along.call()), 0
        self._answered(along, self.pipeline(along.commands(self.scripts[AckPass.SCRIPT].sha)))
        if along.error is not None:
            with _available(self.credentials):
                raise along.error
        return along.taken, along.refused

    def _answered(self, along: AnswersAlong, replies: Sequence[Any]) -> None:
        """Keep in ``along`` what its commands answered (``replies``: theirs, in order); a
        pass whose script Valkey lost is loaded and run again."""
        along.sent = True
        passed = replies[-1]
        if isinstance(passed, NoScriptError):
            try:
                passed = self.call(along.call())
            except Exception as exc:
                passed = exc
        if isinstance(passed, Exception):
            along.error = passed
            return
        along.taken = along.call().parse(passed)
        along.refused = sum(1 for r in replies[:-1:2] if isinstance(r, Exception))

    def ack_reply_wait(self, mail: AckMail, seconds: float) -> bytes | None:
        """The answer to this ack, waited for at most ``seconds`` (``BLPOP``); None."""
        got = self._command("BLPOP", mail.reply, seconds)
        return None if got is None else bytes(got[1])

    def verify_tenants(self, queue: str, members: Mapping[str, Sequence[str]], *,
                       now_ms: int) -> dict[str, list[bool]]:
        """An ack's or a nack's check of several tenants' leases of ``queue``, by tenant:
        whether each lease (a member ``lease_member(id, token)``) is held and unexpired,
        each one held marked as ending so that a release of it takes nothing
        (lua/lease_check.lua). One script call, or a pipeline of them (one round trip on a
        single server; one per master in cluster mode)."""
        calls: list[LeaseCheck] = []
        spans: list[tuple[str, int]] = []  # (tenant, its calls), in order
        for tenant, names in members.items():
            leased = PairKeys.of(queue, tenant)
            parts = [LeaseCheck(leased, now_ms, part)
                     for part in chunks(names, LeaseCheck.items_per_call())]
            calls += parts
            spans.append((tenant, len(parts)))
        if not calls:
            return {tenant: [] for tenant in members}
        if len(calls) == 1:  # (the usual ack: one tenant's leases, one call)
            return {tenant: (self.call(calls[0]) if n else [])
                    for tenant, n in spans}
        held = self._checked(calls, self.pipeline(
            [evalsha(call, self.scripts[LeaseCheck.SCRIPT].sha) for call in calls]))
        out: dict[str, list[bool]] = {}
        at = 0
        for tenant, n in spans:
            out[tenant] = [ok for reply in held[at:at + n] for ok in reply]
            at += n
        return out

    def _checked(self, calls: Sequence[LeaseCheck], replies: Sequence[Any]) -> list[list[bool]]:
        """The parsed replies of pipelined lease checks; a script Valkey lost is loaded and
        run again; any other error reply is raised."""
        out: list[list[bool]] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):  # (Valkey lost its scripts: loaded)
                out.append(self.call(call))
                continue
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
            out.append(call.parse(reply))
        return out

    def _deadlines(self, leased: str, members: Sequence[str]) -> list[Any]:
        """ZMSCORE of the members, in calls within the argument limit."""
        out: list[Any] = []
        for part in chunks(members, ZMSCORE_PER_CALL):
            out += self._command("ZMSCORE", leased, *part)
        return out

    def lease_indexed(self, queue: str, ids: Mapping[str, Sequence[str]]
                      ) -> dict[str, list[str]]:
        """Of each tenant's task ids (``ids``: by tenant), those its pair's lease index
        (``lease_of``) names: a lease, or a release's mark, whether or not it still holds.
        One HMGET per pair and IDS_PER_CALL ids, all in one pipeline (one round trip on a
        single server; one per master in cluster mode)."""
        commands: list[tuple[Any, ...]] = []
        asked: list[tuple[str, Sequence[str]]] = []
        for tenant, names in ids.items():
            lease_of = PairKeys.of(queue, tenant).lease_of
            for part in chunks(names, IDS_PER_CALL):
                commands.append(("HMGET", lease_of, *part))
                asked.append((tenant, part))
        replies = self.pipeline(commands) if commands else []
        out: dict[str, list[str]] = {}
        for (tenant, part), reply in zip(asked, replies, strict=True):
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
            named = [task_id for task_id, entry in zip(part, reply, strict=True)
                     if entry is not None]
            if named:
                out.setdefault(tenant, []).extend(named)
        return out

    def lease_deadlines(self, queue: str, tenant: str,
                        members: Sequence[str]) -> list[int | None]:
        """The deadline (epoch ms) of each lease (a member ``lease_member(id, token)``),
        None when it is not held; 0 marks one the reaper is expiring. One ZMSCORE."""
        return [None if d is None else int(float(d))
                for d in self._deadlines(PairKeys.of(queue, tenant).leased, members)]

    def release(self, queue: str, tenant: str, members: Sequence[str], *,
                acked: int = 0, then: ScriptCall | None = None,
                finished: TaskFinished | None = None, push: PushAlong | None = None) -> int:
        """Drop these leases (members ``lease_member(id, token)``: lua/lease_drop.lua, which
        also forgets each task's lease and its claim's record once it holds no lease); a
        lease that was re-issued since has another token and is left alone. Returns how
        many were dropped. ``acked``: tasks of the pair just acked, counted in the same
        round trip (dal/throughput.py). ``then``: a script that must run after the drop
        (giving back the leases' queue-wide reservations): on a single server in the same
        round trip, in order; in cluster mode (other slots, no order across masters) once
        the drop has answered. ``finished``: the pair's completion markers
        (lua/task_finished.lua, in the pair's slot), sent right after the drop in its round
        trip; an error of theirs is logged, not raised (logic/waits.py: best-effort).
        ``push``: a push of the pair's tasks (``push_along``), sent last in the round trip;
        its reply is kept in it for ``pushed_along``, never raised here. One pair of
        ``release_pairs``."""
        return self.release_pairs(queue, [PairDrop(tenant, members, acked, finished, push)],
                                  then=then)[0]

    def release_pairs(self, queue: str, drops: Sequence[PairDrop], *,
                      then: ScriptCall | None = None,
                      answers: AnswersAlong | None = None) -> list[int]:
        """``release`` of several pairs of ``queue`` in one pipeline: one round trip on a
        single server, one per master in cluster mode. It holds every pair's drop (calls of
        at most ``LeaseDrop.items_per_call()`` members: ElastiCache's argument limit), then
        the pairs' markers and throughput counts, then ``then`` (single server: after every
        drop, in order), then the pushes. In cluster mode ``then`` runs once every drop has
        answered, and not when one failed (a reservation may outlive its lease, never the
        reverse). A script Valkey lost is loaded and run again; every reply is dealt with
        before the first error of a drop is raised. Returns how many leases each pair
        dropped, in order (a pair without members sends nothing). ``answers``: a
        committer's answers and pass sent last in the same round trip (their outcome kept
        in it; not sent when no pair has members). Within ``holding_drop``, a drop it may
        hold goes with the next round trip instead: it returns zeros then, and its error
        goes to the ``HeldDrop``."""
        sha = self.scripts[LeaseDrop.SCRIPT].sha
        calls: list[LeaseDrop] = []
        spans: list[int] = []  # each pair's drop calls, in order
        acked: dict[str, int] = {}
        for d in drops:
            parts = [LeaseDrop(PairKeys.of(queue, d.tenant), part)
                     for part in chunks(list(dict.fromkeys(d.members)),
                                        LeaseDrop.items_per_call())] if d.members else []
            calls += parts
            spans.append(len(parts))
            if parts and d.acked > 0:
                acked[d.tenant] = acked.get(d.tenant, 0) + d.acked
        if not calls:
            return [0] * len(drops)
        sent = [d for d, n in zip(drops, spans, strict=True) if n]
        marked = [d for d in sent if d.finished is not None]
        pushes = [d.push for d in sent if d.push is not None]
        after: list[tuple[Any, ...]] = []
        if then is not None and self.calls is not None:
            after = [("EVALSHA", self.scripts[then.name].sha, len(then.keys), *then.keys,
                      *then.args)]
        ride: HeldDrop | None = getattr(self._held, "drop", None)
        if ride is not None and (ride.commands is not None or answers is not None or pushes
                                 or (then is not None and self.calls is None)):
            # (one drop is held; answers and pushes are read right after it; in cluster
            # mode the reservations go back after the drop, before the next claim's take)
            ride = None
        if len(calls) == 1 and not acked and not after and not marked and not pushes \
                and answers is None and ride is None:
            alone = self.call(calls[0])  # (a lone drop: no pipeline)
            self._then(then)
            return [alone if n else 0 for n in spans]
        counts, notes = self.throughput.along(queue, {t: (0, n) for t, n in acked.items()}) \
            if acked else ([], [])
        commands = [evalsha(call, sha) for call in calls]
        commands += [evalsha(d.finished, self.scripts[TaskFinished.SCRIPT].sha)
                     for d in marked if d.finished is not None]
        commands += [*counts, *after]
        if pushes:
            push_sha = self.scripts[PushReady.SCRIPT].sha
            note_sha = self.scripts[ReadyTenantsNote.SCRIPT].sha
            for push in pushes:
                commands += [evalsha(push.call, push_sha), evalsha(push.note, note_sha)]
        answered = 0
        if answers is not None:
            along = answers.commands(self.scripts[AckPass.SCRIPT].sha)
            answered = len(along)
            commands += along
        def settle(replies: list[Any]) -> list[int]:
            return self._dropped(queue, replies, calls, spans, marked, counts, notes, after,
                                 then, pushes, answers, answered)

        if ride is not None:  # (held: it goes with the next round trip, ``holding_drop``)
            ride.commands, ride.settle = commands, settle
            return [0] * len(drops)
        return settle(self.pipeline(commands))

    def _dropped(self, queue: str, replies: list[Any], calls: Sequence[LeaseDrop],
                 spans: Sequence[int], marked: Sequence[PairDrop], counts: Sequence[Any],
                 notes: list[Any], after: Sequence[Any], then: ScriptCall | None,
                 pushes: Sequence[PushAlong], answers: AnswersAlong | None,
                 answered: int) -> list[int]:
        """``release_pairs``' replies handled, in its order (its docstring)."""
        if answers is not None:
            self._answered(answers, replies[len(replies) - answered:])
        # (the pushes' two replies each, last: kept for pushed_along)
        _kept(pushes, replies, len(calls) + len(marked) + len(counts) + len(after))
        error: Exception | None = None
        dropped: list[int] = []
        for call, reply in zip(calls, replies, strict=False):
            if isinstance(reply, NoScriptError):  # (Valkey lost its scripts: loaded)
                try:
                    reply = self.call(call)
                except Exception as exc:  # (raised once every reply is dealt with)
                    reply = exc
            if isinstance(reply, Exception):
                error = error or reply
                dropped.append(0)
            else:
                dropped.append(call.parse(reply))
        at = len(calls)
        for d in marked:
            if d.finished is not None:
                self._marked(queue, d.tenant, d.finished, replies[at])
            at += 1
        count_replies = replies[at:at + len(counts)]
        at += len(counts)
        if after:
            if isinstance(replies[at], NoScriptError):
                self._then(then)  # (Valkey lost its scripts: _run loads it again)
            # (another error there: the reservations end at their deadline)
        elif error is None:
            self._then(then)
        self.throughput.settle(queue, counts, count_replies, notes)
        if error is not None:
            with _available(self.credentials):
                raise error
        out: list[int] = []
        at = 0
        for n in spans:
            out.append(sum(dropped[at:at + n]))
            at += n
        return out

    def _marked(self, queue: str, tenant: str, call: TaskFinished, reply: Any) -> None:
        """The reply of ``release``'s completion markers: a script Valkey lost is run again;
        another error is logged, not raised (the ack it follows is committed, and its
        waiters answer at the end of their wait)."""
        try:
            if isinstance(reply, NoScriptError):
                self.call(call)
            elif isinstance(reply, Exception):
                raise reply
        except Exception as exc:  # (best-effort, as logic/waits.py's finished)
            log.warning("waits: %d task(s) of %r/%r ended, their waiters not told (they "
                        "answer at the end of their wait): %s: %s", len(call.items), queue,
                        tenant, type(exc).__name__, str(exc)[:200])

    def _then(self, call: ScriptCall | None) -> None:
        """``release``'s script after the drop, on its own; best-effort: what it would have
        given back ends at its deadline (the lease deadline) anyway, and the drop it
        follows (an ack's, whose outcome is committed) must not fail for it."""
        if call is None:
            return
        try:
            self._run(call.name, call.keys, call.args)
        except (WarmTierUnavailable, WarmTierFull):
            log.warning("giving back reservations failed (%s); they end at their deadline",
                        call.keys[0], exc_info=True)

    def take_back(self, queue: str, tenant: str, *, now_ms: int,
                  members: Sequence[str]) -> set[str]:
        """Drop those of these leases whose deadline is still ahead, atomically with the
        check (release_leases.lua); returns the members dropped. A lease the reaper has
        listed is never among them."""
        if not members:
            return set()
        k = PairKeys.of(queue, tenant)
        taken: set[str] = set()
        for part in chunks(list(dict.fromkeys(members)), ReleaseLeases.items_per_call()):
            taken.update(self.call(ReleaseLeases(k, now_ms, part)))
        return taken

    def extend(self, queue: str, tenant: str, *, now_ms: int,
               leases: Sequence[tuple[str, str, int]]) -> list[int]:
        """New deadline (ms) per (id, token, extend_ms), or 0 when not owned / expired."""
        k = PairKeys.of(queue, tenant)
        out: list[int] = []
        for part in chunks(leases, LeaseExtend.items_per_call()):
            out += self.call(LeaseExtend(k, now_ms, [
                (lease_member(task_id, token), extend_ms) for task_id, token, extend_ms in part]))
        return out

    def keep_progress(self, queue: str, tenant: str, *, now_ms: int,
                      items: Sequence[tuple[str, str]], share: TenantShare | None = None
                      ) -> tuple[list[int | None], int]:
        """Keep each (lease member, progress JSON) with its lease, as of ``now_ms``
        (lua/lease_progress.lua), held to the tenant's share as ``share`` says (its
        ``bound``, ``grant``, with the first call only, and ``charge``): per item
        ``PROGRESS_KEPT``, ``PROGRESS_NOT_HELD``, ``PROGRESS_NO_ROOM`` or, for an item of a
        call that 'ask' found short (nothing of it written), None; and the bytes those
        calls were short. Refused (``WarmTierFull``) while Valkey is out of memory."""
        share = TenantShare() if share is None else share
        k = PairKeys.of(queue, tenant)
        out: list[int | None] = []
        short = 0
        grant = share.grant
        for part in chunks(items, LeaseProgress.items_per_call()):
            codes, part_short = self.call(LeaseProgress(
                k, now_ms, part, share.bound, grant, share.charge))
            grant = 0  # (added to the allotment by the first call)
            if part_short:
                short += part_short
                out += [None] * len(part)
            else:
                out += codes
        return out, short

    def progress_of(self, queue: str, tenant: str,
                    leases: Sequence[tuple[str, str]]) -> dict[str, tuple[int, str]]:
        """The progress kept with each (id, token) lease that has some: id -> (when it
        came, epoch ms; its JSON text). An entry of another token (an older or newer
        lease of the task) is not this lease's. One HMGET."""
        if not leases:
            return {}
        progress = PairKeys.of(queue, tenant).progress
        values: list[Any] = []
        for part in chunks([task_id for task_id, _ in leases], per_call(2)):
            values += self._command("HMGET", progress, *part)
        return _progress_entries(leases, values)

    def verify_with_progress(self, queue: str, tenant: str, *, now_ms: int,
                             leases: Sequence[tuple[str, str]],
                             ) -> tuple[list[bool], dict[str, tuple[int, str]]]:
        """``verify_tenants`` of one tenant's (id, token) leases (each one held marked as
        ending) and their ``progress_of``, in one round trip (the pair's slot: one
        master)."""
        if not leases:
            return [], {}
        k = PairKeys.of(queue, tenant)
        members = [lease_member(task_id, token) for task_id, token in leases]
        checks = [LeaseCheck(k, now_ms, part)
                  for part in chunks(members, LeaseCheck.items_per_call())]
        reads = [("HMGET", k.progress, *part)
                 for part in chunks([task_id for task_id, _ in leases], per_call(2))]
        sha = self.scripts[LeaseCheck.SCRIPT].sha
        replies = self.pipeline([*(evalsha(call, sha) for call in checks), *reads])
        for reply in replies[len(checks):]:
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
        held = self._checked(checks, replies[:len(checks)])
        values = [v for reply in replies[len(checks):] for v in reply]
        return ([ok for reply in held for ok in reply], _progress_entries(leases, values))

    def lease_limits(self, queue: str, tenant: str, members: Sequence[str]) -> list[int | None]:
        """The time limit (epoch ms) of each lease (a member), None for one without a
        limit or not held. One ZMSCORE per chunk."""
        return [None if d is None else int(float(d))
                for d in self._deadlines(PairKeys.of(queue, tenant).limits, members)]

    def expired(self, queue: str, tenant: str, *, now_ms: int,
                limit: int) -> list[tuple[str, str, int]]:
        """(id, token, attempt) of leases past their deadline, oldest first."""
        return self.call(LeaseExpired(PairKeys.of(queue, tenant), now_ms, limit))

    def missing(self, queue: str, tenant: str, ids: Sequence[str], *, fence_ms: int,
                cursor: str | None = None,
                cursor_field: str = "reconcile_after") -> list[str] | None:
        """Which of ``ids`` are neither waiting (their data in the data hash) nor leased
        (lua/missing.lua: lookups by id);
        None while the pair's lease index is not complete (``index_leases``). When some
        are, the pair's fence is raised to ``fence_ms``: a push of an admission that began
        before it is refused from then on (``LatePush``). ``cursor`` (not None): a
        reconciler's cursor to keep in the pair's meta, in ``cursor_field``
        (``reconcile_after``: over the pair's warm rows; ``members_after``: over its batch
        rows; ``reaper_cursors`` reads them; '' forgets it)."""
        k = PairKeys.of(queue, tenant)
        parts = list(chunks(ids, IDS_PER_CALL)) or [[]]
        found: list[str] = []
        for i, part in enumerate(parts):
            # ('' leaves the kept cursor as it is, '0' forgets it: lua/missing.lua)
            keep = "" if cursor is None or i < len(parts) - 1 else (cursor or "0")
            out = self.call(Missing(k, fence_ms, cursor_field, keep, part))
            if out is None:
                return None
            found += out
        return found

    def reaper_cursors(self, queue: str, tenant: str) -> ReaperCursors:
        """The reaper's cursors kept in the pair's meta, read in one command: the
        reconciler's over the pair's warm rows and over its batch rows ('' when none: from
        the start; kept by ``missing``), and ``prune_started``'s over its ``started`` index
        (None when none)."""
        raw = self._command("HMGET", PairKeys.of(queue, tenant).meta, "reconcile_after",
                            "started_after", "members_after")
        reconcile_after, started_after, members_after = raw or (None, None, None)
        return ReaperCursors(
            "" if reconcile_after is None else _s(reconcile_after),
            None if started_after is None else _s(started_after),
            "" if members_after is None else _s(members_after))

    def index_leases(self, queue: str, tenant: str, *,
                     slices: int = LEASE_INDEX_SLICES_PER_VISIT) -> bool:
        """Complete the pair's lease index for leases made by a tierq that kept none
        (lua/lease_index.lua), at most ``slices`` slices; whether it is complete."""
        k = PairKeys.of(queue, tenant)
        return any(self.call(LeaseIndex(k, LEASE_INDEX_SLICE)) for _ in range(slices))

    def remove(self, queue: str, tenant: str, places: Sequence[Place], *,
               gone_ms: int | None = None, gone_ttl_ms: int = 0) -> int:
        """Take these tasks (their ready-set places) out of the warm tier entirely: waiting,
        their data, their leases (lua/remove.lua: found by the id in each member). Returns
        how many were waiting or leased. ``gone_ms`` (a cancel, a delete, a replace into
        the future): each task's tombstone is kept ``gone_ttl_ms`` (at most ``GONE_CAP`` a
        pair), so a push that read the task as ready before leaves it out."""
        return self.remove_leased(queue, tenant, places, gone_ms=gone_ms,
                                  gone_ttl_ms=gone_ttl_ms)[0]

    def remove_leased(self, queue: str, tenant: str, places: Sequence[Place], *,
                      gone_ms: int | None = None, gone_ttl_ms: int = 0,
                      with_leases: bool = True) -> tuple[int, list[RemovedLease]]:
        """``remove``, and the leases it ended, each with the progress it kept (read by the
        script that ended it): what the caller gives back and writes to their rows. Without
        ``with_leases``, only waiting tasks leave (a held one keeps its lease and data; every id
        still gets its tombstone) and no lease is ended."""
        k = PairKeys.of(queue, tenant)
        members = [at.member for at in places]
        count = 0
        leases: list[RemovedLease] = []
        if gone_ms is not None and gone_ttl_ms <= 0:
            raise ValueError("a tombstone needs a positive gone_ttl_ms")
        stone = "" if gone_ms is None else gone_ms
        made = False
        for part in chunks(members, IDS_PER_CALL):
            out = self.call(Remove(k, stone, gone_ttl_ms, GONE_CAP, "1" if with_leases else "0",
                                   part))
            count += out.count
            made = made or out.made
            for task_id, token, entry in out.leases:
                progress = _progress_entries([(task_id, token)], [entry]).get(task_id)
                leases.append(RemovedLease(task_id, token, progress))
        if made and gone_ms is not None:
            self.note_lapses(queue, tenant, gone_ms + gone_ttl_ms)
        return count, leases

    def lower_tombstones(self, queue: str, tenant: str, lapses: Sequence[tuple[str, int]]
                         ) -> None:
        """Make the tombstones these (id, lapses at ms) name lapse by then at the latest;
        an id without one gets none (``ZADD XX LT``: Redis >= 6.2). For a replace that
        brings a task due sooner than an earlier replace into the future said: its
        tombstone (lua/remove.lua) must not keep out the push that finds it due. An error
        reply (out of memory) is ignored: the tombstone then lapses when it was to."""
        if not lapses:
            return
        k = PairKeys.of(queue, tenant)
        flat: list[Any] = []
        for task_id, at_ms in lapses:
            flat += [at_ms, task_id]
        self.pipeline([["ZADD", k.gone, "XX", "LT", *flat]])

    def remove_ready(self, queue: str, tenant: str, places: Sequence[Place]) -> list[str]:
        """Remove these tasks (their ready-set places) only while they wait in the ready set
        (claimed ones are left alone); returns the ids removed."""
        k = PairKeys.of(queue, tenant)
        members = [at.member for at in places]
        return [x for part in chunks(members, IDS_PER_CALL)
                for x in self.call(RemoveReady(k, part))]

    def update_ready(self, queue: str, tenant: str,
                     items: Sequence[tuple[str, Place, bytes]], *, warm_max_bytes: int,
                     share: TenantShare | None = None, now_ms: int = 0,
                     ttl_ms: int = 0) -> UpdateOutcome:
        """Replace the data of (id, place, blob) items already in the warm tier (a new
        priority moves the task to its new place), their growth counted against the
        pair's allotment (``share``: its ``grant`` goes with the first call). An item not
        waiting leaves its replacement in the pair's ``newer`` entries (counted with the
        growth; a mark when it does not fit), lapsing ``ttl_ms`` after ``now_ms``: a push
        that read the task before the replace writes it instead of its own blob, or refuses
        the task for a mark (lua/update_ready.lua, lua/push_ready.lua). Stops at the
        first call whose growth does not fit (lua/update_ready.lua). Raises
        ``WarmTierFull`` when Valkey is out of memory (that call changed nothing)."""
        k = PairKeys.of(queue, tenant)
        found = done = 0
        share = TenantShare() if share is None else share
        grant = share.grant
        made = False
        try:
            for part in chunks(items, UpdateReady.items_per_call()):
                out = self.call(UpdateReady(k, warm_max_bytes, share.bound, grant,
                                            share.charge, now_ms, ttl_ms, NEWER_MAX_BYTES,
                                            [(at.member, at.score, blob)
                                             for _, at, blob in part]))
                grant = 0
                if out.made:  # (a call that made the key: noted once its calls are done)
                    made = True
                if out.status != "ok":
                    return UpdateOutcome(found, done, short=out.amount
                                         if out.status == "allot" else 0,
                                         over=out.status == "over")
                found += out.amount
                done += len(part)
            return UpdateOutcome(found, done)
        finally:
            if made:
                self.note_lapses(queue, tenant, now_ms + ttl_ms)

    def replace_cold(self, queue: str, tenant: str, places: Sequence[Place], *, now_ms: int,
                     ttl_ms: int) -> list[str]:
        """Send replaced tasks cold whose replacement the warm tier cannot keep
        (lua/replace_cold.lua): waiting ones leave the ready set (their ids are returned,
        for the caller to mark their rows cold); each of the others keeps a mark, lapsing
        ``ttl_ms`` after ``now_ms``, that makes a push of it refuse it. Allowed while
        Valkey is out of memory."""
        k = PairKeys.of(queue, tenant)
        removed: list[str] = []
        made = False
        try:
            for part in chunks(places, ReplaceCold.items_per_call()):
                out = self.call(ReplaceCold(k, now_ms, ttl_ms,
                                            [(at.member, at.score) for at in part]))
                removed += out.removed
                made = made or out.made
        finally:
            if made:
                self.note_lapses(queue, tenant, now_ms + ttl_ms)
        return removed

    def stats(self, queue: str, tenant: str) -> tuple[int, int, str]:
        """(ready, leased, mode) of one (queue, tenant)."""
        out = self.call(TierStats(PairKeys.of(queue, tenant)))
        return out.ready, out.leased, out.mode

    def stats_of(self, queue: str, tenants: Sequence[str]) -> list[tuple[int, int, str]]:
        """``stats`` of several tenants of ``queue``, in one pipeline (one round trip per
        master in cluster mode)."""
        if not tenants:
            return []
        script = self.scripts[TierStats.SCRIPT]
        replies = self.pipeline([evalsha(TierStats(PairKeys.of(queue, t)), script.sha)
                                 for t in tenants])
        out: list[tuple[int, int, str]] = []
        for tenant, reply in zip(tenants, replies, strict=True):
            if isinstance(reply, NoScriptError):  # (Valkey lost its scripts: loaded)
                out.append(self.stats(queue, tenant))
                continue
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
            stats = TierStats.parse_reply(reply)
            out.append((stats.ready, stats.leased, stats.mode))
        return out

    # -- the queues' ready-tenant indexes (logic/ready_tenants.py) ----------------------

    def note_ready_tenants(self, queue: str, tenants: Sequence[str],
                           shard_tag: int | None = None) -> None:
        """Enter tenants in the queue's ready-tenant index (lua/ready_tenants_note.lua: a
        ZADD at score 0, allowed while Valkey is out of memory)."""
        key = QueueKeys.ready_tenants(queue, shard_tag)
        for part in chunks(sorted(set(tenants)), ReadyTenantsNote.items_per_call()):
            self.call(ReadyTenantsNote(_Index(key), part))

    def drop_ready_tenants(self, queue: str, shard_tag: int | None = None) -> None:
        """Delete the queue's ready-tenant index (a purge of the queue)."""
        self._command("UNLINK", QueueKeys.ready_tenants(queue, shard_tag))

    def forget_ready_tenants(self, queue: str, tenants: Sequence[str],
                             shard_tag: int | None = None) -> None:
        """Take tenants out of the queue's ready-tenant index (ZREM)."""
        key = QueueKeys.ready_tenants(queue, shard_tag)
        for part in chunks(sorted(set(tenants)), per_call(2)):
            self._command("ZREM", key, *part)

    def ready_tenants_after(self, queue: str, after: str | None, limit: int,
                            shard_tag: int | None = None) -> list[str]:
        """Up to ``limit`` tenants of the queue's ready-tenant index, by name after
        ``after`` and then on from the first (wrapping round, each at most once): one
        ``ZRANGE … BYLEX LIMIT``, or with ``after`` both halves in one pipeline (one round
        trip: a queue of one tenant wraps round at every claim)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        key = QueueKeys.ready_tenants(queue, shard_tag)
        if not after:
            return [_s(t) for t in self._command("ZRANGE", key, "-", "+", "BYLEX",
                                                 "LIMIT", 0, limit)]
        replies = self.pipeline([("ZRANGE", key, "(" + after, "+", "BYLEX", "LIMIT", 0, limit),
                                 ("ZRANGE", key, "-", "[" + after, "BYLEX", "LIMIT", 0, limit)])
        for reply in replies:
            if isinstance(reply, Exception):  # (a cluster's pipeline returns its errors)
                with _available(self.credentials):
                    raise reply
        first = [_s(t) for t in replies[0]]
        return first + [_s(t) for t in replies[1][:limit - len(first)]]

    def ready_counts(self, queue: str, tenants: Sequence[str]) -> list[int]:
        """How many tasks each tenant's warm set of ``queue`` holds ready, in one pipeline
        (one round trip per master in cluster mode, not one per tenant)."""
        replies = self._ready_replies(queue, tenants)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return [int(reply) for reply in replies]

    def ready_counts_each(self, queue: str, tenants: Sequence[str]) -> list[int | None]:
        """As :meth:`ready_counts`, with None in place of a tenant whose reply was an error
        (its ready set in a state ``ZCARD`` refuses): one broken pair costs its own count."""
        return [None if isinstance(reply, Exception) else int(reply)
                for reply in self._ready_replies(queue, tenants)]

    def _ready_replies(self, queue: str, tenants: Sequence[str]) -> list[Any]:
        """Each tenant's ``ZCARD`` of its ready set, or the error it replied, in one
        pipeline."""
        if not tenants:
            return []
        return list(self.pipeline([("ZCARD", PairKeys.of(queue, t).ready) for t in tenants]))

    def ready_heads(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """The ids first in line of each priority in these pairs' ready sets (at most ten a
        pair: a line is in the order its tasks became ready within a priority, so the
        longest-waiting warm task is among them), one ``ZRANGE … LIMIT 0 1`` per priority,
        all in one pipeline."""
        commands: list[tuple[Any, ...]] = []
        for queue, tenant in pairs:
            key = PairKeys.of(queue, tenant).ready
            for priority in range(PRIORITY_MIN, PRIORITY_MAX + 1):
                # a priority's entries, short and long forms (core/ordering.py)
                low = (PRIORITY_MAX - priority) * SPLIT
                commands.append(("ZRANGE", key, low, low + SPLIT, "BYSCORE", "LIMIT", 0, 1))
        if not commands:
            return []
        heads: list[str] = []
        for reply in self.pipeline(commands):
            if isinstance(reply, Exception):
                with _available(self.credentials):
                    raise reply
            heads += (task_of(_s(member)) for member in reply)
        return heads

    def ready_bytes(self, queue: str, tenant: str) -> int:
        """The bytes of task data the pair's warm set holds, as counted (the meta field
        ``bytes``, lua/warm_bytes.lua; 0 when missing)."""
        return self.call(TierStats(PairKeys.of(queue, tenant))).ready_bytes

    def count_ready_bytes(self, queue: str, tenant: str) -> int:
        """The same, counted from the data hash itself (O(tasks); checks and tests)."""
        k = PairKeys.of(queue, tenant)
        with _available(self.credentials):
            fields = [f for f in self.client.hkeys(k.data) if f != b"~encoding"]
            pipe = self.client.pipeline(transaction=False)
            for field in fields:
                pipe.hstrlen(k.data, field)
            return sum(pipe.execute()) if fields else 0

    def leases(self, queue: str, tenant: str) -> list[LeaseInfo]:
        """Every current lease of one (queue, tenant)."""
        k = PairKeys.of(queue, tenant)
        with _available(self.credentials):
            pipe = self.client.pipeline(transaction=False)
            pipe.zrange(k.leased, 0, -1, withscores=True)
            pipe.hgetall(k.claims)
            members, claims = pipe.execute()
        made = {_s(prefix): _s(raw) for prefix, raw in claims.items()}
        # (a deadline of 0 marks a lease the reaper is expiring: not current)
        return [self._lease_info(_s(m), int(deadline), made) for m, deadline in members
                if deadline > 0]

    def running_page(self, queue: str, tenant: str, *, after: tuple[int, str] | None = None,
                     limit: int = 1000) -> tuple[list[LeaseInfo], tuple[int, str] | None]:
        """Up to ``limit`` (at most ``RUNNING_CALL_LEASES``) current leases of one pair
        after ``after`` (started ms, id), in that order (lua/running_page.lua: it reads the
        page, not the pair's leases). Returns the leases and where the next page starts
        after, None when none follows. A call reads at most ``limit`` +
        ``RUNNING_SCAN_SLACK`` entries: it may return fewer leases than ``limit`` (entries
        of ended or expiring leases passed over) with a position to go on from."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        limit = min(limit, RUNNING_CALL_LEASES)
        page, last = self.call(RunningPage(PairKeys.of(queue, tenant), after, limit,
                                           limit + RUNNING_SCAN_SLACK))
        leases = [LeaseInfo(lease.id, lease.token, attempt_of_token(lease.token) or 0,
                            lease.started_ms, lease.record.partition("|")[2] or None,
                            lease.deadline_ms) for lease in page]
        return leases, last

    def prune_started(self, queue: str, tenant: str, cursor: str | None) -> bool:
        """Read one call's slice of the pair's ``started`` index after ``cursor`` (the one
        kept in its meta, ``started_after``: ``reaper_cursors``), which removes the entries
        of ended leases on the way (lua/running_page.lua), and keep the cursor for the next
        call; whether the slice reached the end (the cursor then starts over). Entries only
        a tierq that ended leases without ``started`` leaves behind, which ``/running``
        reads would otherwise be the only ones to remove."""
        k = PairKeys.of(queue, tenant)
        raw = cursor
        after = parse_started_cursor(cursor)
        _, last = self.call(RunningPage(k, after, RUNNING_CALL_LEASES,
                                        RUNNING_CALL_LEASES + RUNNING_SCAN_SLACK))
        if last is not None:
            self._command("HSET", k.meta, "started_after", f"{last[0]}|{last[1]}")
        elif raw is not None:
            self._command("HDEL", k.meta, "started_after")
        return last is None

    def lease_of(self, queue: str, tenant: str, task_id: str) -> LeaseInfo | None:
        """The task's current lease, found by its id (lua/lease_of.lua: three lookups);
        None when it holds none (or the reaper is expiring it)."""
        out = self.call(LeaseOf(PairKeys.of(queue, tenant), task_id))
        if out is None or out.deadline_ms <= 0:
            return None  # (deadline 0: being expired by the reaper)
        made = {claim_prefix(out.token): out.record} if out.record else {}
        return self._lease_info(lease_member(task_id, out.token), out.deadline_ms, made)

    @staticmethod
    def _lease_info(member: str, deadline_ms: int, claims: dict[str, str]) -> LeaseInfo:
        task_id, token, attempt = split_member(member)
        started, _, worker = claims.get(claim_prefix(token), "0|").partition("|")
        return LeaseInfo(task_id, token, attempt, int(started), worker or None, deadline_ms)

    # -- lapsed replacements and tombstones: the index of lapses --------------------------

    def note_lapses(self, queue: str, tenant: str, lapse_ms: int) -> None:
        """Enter the pair in the index of lapses at ``lapse_ms``, or raise it to that
        (lua/lapse_index.lua): the reaper then drops the pair's lapsed ``newer`` entries
        and tombstones, though the pair goes idle. Best effort: a note that fails is
        logged, and what has lapsed goes at the pair's next push, replace or cancel (or at
        the note of the next call that makes the key again)."""
        try:
            self.call(LapseIndex(_Index(LAPSES_KEY), [(lapse_member(queue, tenant), "",
                                                       lapse_ms)]))
        except (WarmTierUnavailable, WarmTierFull, redis.RedisError):
            log.warning("noting %r/%r in the index of lapses failed: its lapsed entries go "
                        "at its next push, replace or cancel", queue, tenant, exc_info=True)

    def due_lapses(self, now_ms: int, limit: int) -> list[tuple[str, str, int]]:
        """The first ``limit`` pairs of the index of lapses due by ``now_ms``: (queue,
        tenant, their score in the index)."""
        raw = self._command("ZRANGEBYSCORE", LAPSES_KEY, "-inf", now_ms, "WITHSCORES",
                            "LIMIT", 0, limit) or []
        pairs = (list(zip(raw[::2], raw[1::2], strict=True))
                 if raw and not isinstance(raw[0], (list, tuple)) else raw)
        out: list[tuple[str, str, int]] = []
        for member, score in pairs:
            queue, _, tenant = _s(member).partition("|")
            out.append((queue, tenant, int(float(score))))
        return out

    def sweep_pairs(self, pairs: Sequence[tuple[str, str]], *, now_ms: int,
                    limit: int = LAPSE_SWEEP_ENTRIES) -> list[SweepReply | Exception]:
        """Drop each pair's lapsed ``newer`` entries (at most ``limit``) and tombstones
        (lua/pair_sweep.lua), in one pipeline (one round trip per master); per pair its
        reply, or the error its master answered. A pipeline that fails whole (a master
        down) is sent again pair by pair, so the other masters' pairs are swept."""
        if not pairs:
            return []
        calls = [PairSweep(PairKeys.of(q, t), now_ms, limit) for q, t in pairs]
        script = self.scripts[PairSweep.SCRIPT]
        try:
            replies: list[Any] = self.pipeline([evalsha(call, script.sha) for call in calls])
        except WarmTierUnavailable:
            replies = [None] * len(calls)
        out: list[SweepReply | Exception] = []
        for call, reply in zip(calls, replies, strict=True):
            if reply is None or isinstance(reply, NoScriptError):  # (alone; or loaded)
                try:
                    out.append(self.call(call))
                except (WarmTierUnavailable, WarmTierFull, redis.RedisError) as exc:
                    out.append(exc)
            elif isinstance(reply, Exception):
                out.append(reply)
            else:
                out.append(call.parse(reply))
        return out

    def reschedule_lapses(self, moves: Sequence[tuple[str, str, int, int | None]]) -> int:
        """Move each (queue, tenant, seen, next) of the index of lapses to ``next`` (None:
        out of the index), only while its score is still ``seen`` (lua/lapse_index.lua: a
        note that came meanwhile wins); how many moved."""
        items = [(lapse_member(q, t), seen, "" if next_ms is None else next_ms)
                 for q, t, seen, next_ms in moves]
        return sum(self.call(LapseIndex(_Index(LAPSES_KEY), part))
                   for part in chunks(items, LapseIndex.items_per_call()))

    def drop_pair(self, queue: str, tenant: str, *, fence_ms: int | None = None) -> None:
        """Delete every warm-tier key of one (queue, tenant). UNLINK: a large set is freed
        off the server's main thread, so the call costs O(1) per key.

        ``fence_ms`` (a purge: the caller's clock) leaves the pair's meta holding only a
        fence at that instant, in the same transaction: a push whose admission began before
        it (a mover's promotion or an enqueue's push that read rows the purge deleted) is
        late and leaves its rows to the reconciler (lua/push_ready.lua), which finds them
        gone; without it such a push would put purged tasks back in line."""
        k = PairKeys.of(queue, tenant)
        keys = (k.ready, k.data, k.leased, k.claims, k.meta, k.inflight, k.bucket, k.lease_of,
                k.started, k.finished, k.finished_prev, k.waiters, k.progress, k.limits,
                k.gone, k.newer, k.newer_at)
        with _available(self.credentials):
            if fence_ms is None:
                self.client.unlink(*keys)
                return
            pipe = self.client.pipeline(transaction=True)  # (one slot: the pair's tag)
            pipe.unlink(*keys)
            pipe.hset(k.meta, "fence", fence_ms)
            pipe.execute()

    def is_ready(self, queue: str, tenant: str, task_id: str) -> bool:
        """Whether the task waits in the pair's ready set (its blob is in the data hash)."""
        with _available(self.credentials):
            return bool(self.client.hexists(PairKeys.of(queue, tenant).data, task_id))

    def ping(self) -> bool:
        """Whether Valkey answers; on a single server, on the connection this thread's calls
        use (dal/direct_calls.py: opened now if it was not, so a worker that pings before its
        loop has its first call's connection made)."""
        with _available(self.credentials):
            if self.calls is not None:
                return bool(self.calls.command("PING"))
            return bool(self.client.ping())
