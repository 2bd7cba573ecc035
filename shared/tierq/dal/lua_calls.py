"""The typed boundary of the warm tier's Lua scripts: one object per script, its call built
and its reply parsed in one place.

Each class states what its script (``lua/<SCRIPT>.lua``) reads, by name and in order:

| declaration     | what it names                                                     |
| --------------- | ----------------------------------------------------------------- |
| ``KEYS``        | ``KEYS[1..]``: fields of the key set the call holds (``on``)      |
| ``ARGS``        | the fixed ``ARGV[1..]``: attributes of the call, read by name     |
| ``ITEM``        | what each item adds after them (bulk scripts), in that order      |
| ``EXTRA_KEYS``  | keys that follow ``KEYS`` only when the call has them (``extra``) |
| ``EXTRA_ARGS``  | arguments that follow ``ARGS`` only then                          |
| ``GROUPED``     | the items are groups of their own length (``ITEM``: their head)   |

Each class is a frozen dataclass generated on first use (``tierq.core.lazy``): a function
pays at its cold start for none of them, and at its first request for the ones it calls.

``build()`` returns (keys, args) and ``parse(reply)`` the typed result; ``items_per_call``
sizes a bulk call within ElastiCache Serverless's argument limit (dal/command_limit.py).
Changing an argument changes the script and its class: ``tests/unit/test_lua_calls.py``
checks each class against the indexes its script reads, and
``tests/integration/test_lua_round_trip.py`` runs each one on Valkey and on a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from itertools import chain
from operator import attrgetter
from typing import Any, ClassVar, Generic, TypeVar

from tierq.core.ids import attempt_of_token
from tierq.core.lazy import lazy_dataclass
from tierq.dal.command_limit import per_call

R = TypeVar("R", covariant=True)

# One claimed task as the claim script returns it: (id, attempt, lease token, task JSON), the
# strings undecoded (bytes). A tuple, not an object: a claim hands out hundreds of them.
Claimed = tuple[bytes, int, bytes, bytes]


def text(value: Any) -> str:
    """A reply's string (Valkey answers bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def wire_float(value: float) -> str:
    """A float as the scripts read it (``tonumber`` of its repr)."""
    return repr(float(value))


@cache
def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of an object that gives these attributes of it, as a tuple."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return attrgetter(*names)


class LuaCall(Generic[R]):
    """One call of one script: ``KEYS`` name attributes of ``on``, ``ARGS`` attributes of
    the call itself, ``ITEM`` the fields of each of ``items`` (an item of one field is the
    value itself, not a tuple)."""

    SCRIPT: ClassVar[str]
    KEYS: ClassVar[tuple[str, ...]]
    ARGS: ClassVar[tuple[str, ...]] = ()
    ITEM: ClassVar[tuple[str, ...]] = ()
    EXTRA_KEYS: ClassVar[tuple[str, ...]] = ()
    EXTRA_ARGS: ClassVar[tuple[str, ...]] = ()
    GROUPED: ClassVar[bool] = False

    on: Any
    items: Sequence[Any] = ()

    def extra(self) -> Any | None:
        """What ``EXTRA_KEYS`` and ``EXTRA_ARGS`` are read from (None: the call has none)."""
        return None

    def build(self) -> tuple[tuple[str, ...], list[Any]]:
        """(keys, args) as the script reads them."""
        keys = _getter(self.KEYS)(self.on)
        args = list(_getter(self.ARGS)(self))
        extra = self.extra()
        if extra is not None:
            keys += _getter(self.EXTRA_KEYS)(extra)
            args += _getter(self.EXTRA_ARGS)(extra)
        if self.items:
            args += self.item_args()
        return keys, args

    def item_args(self) -> list[Any]:
        """The items' arguments, each item's ``ITEM`` fields in turn."""
        width = len(self.ITEM)
        if width == 1 or self.GROUPED:  # (the items are the arguments themselves)
            return list(self.items)
        if set(map(len, self.items)) - {width}:
            item = next(item for item in self.items if len(item) != width)
            raise ValueError(f"{self.SCRIPT}: an item of {len(item)} fields, expected "
                             f"{width} ({', '.join(self.ITEM)})")
        return list(chain.from_iterable(self.items))

    def parse(self, reply: Any) -> R:
        raise NotImplementedError

    @classmethod
    def items_per_call(cls) -> int:
        """How many items one call of the script takes (EVALSHA, its sha and key count,
        the keys and fixed arguments, then ``ITEM`` per item); for ``GROUPED`` items, how
        many of their arguments. Worked out once per class (asked per pair and call)."""
        n = _ITEMS_PER_CALL.get(cls)
        if n is None:
            fixed = 3 + len(cls.KEYS) + len(cls.EXTRA_KEYS) + len(cls.ARGS) \
                + len(cls.EXTRA_ARGS)
            n = _ITEMS_PER_CALL[cls] = per_call(fixed, 1 if cls.GROUPED
                                                else max(1, len(cls.ITEM)))
        return n


_ITEMS_PER_CALL: dict[type, int] = {}  # (LuaCall.items_per_call, by class)


# -- claims ---------------------------------------------------------------------------------


@lazy_dataclass(frozen=True)
class ClaimReply:
    """What claim.lua answers: the ready tasks left, the pair's mode, the claimed tasks,
    when more may be had (0: the limits did not cut the claim) and what the queue-wide take
    granted (-1 without one). ``repeated``: the call ran before and its reply was lost, and
    these are the (id, lease token) of the leases that first run made (mode ``repeat``,
    nothing claimed); ``granted`` is then what a take riding with that run granted (-1:
    none, or not known under a rate alone)."""

    left: int
    mode: str
    claimed: list[Claimed]
    retry_after_ms: int
    granted: int
    repeated: tuple[tuple[str, str], ...] = ()


@lazy_dataclass(frozen=True)
class ClaimTake:
    """The queue-wide take riding in a claim's script (claim.lua ``EXTRA_KEYS`` and
    ``EXTRA_ARGS``; single server only)."""

    pool: str
    counts: str
    bucket: str
    want: int
    holder: str
    max_held: int
    rate_per_second: str
    rate_burst: int
    shares: int


@lazy_dataclass(frozen=True)
class Claim(LuaCall[ClaimReply]):
    """Claim up to ``n`` ready tasks of a pair and lease each one (lua/claim.lua), each
    lease with its task's time limit (its own, else ``timeout_seconds``, the queue's; 0:
    none) recorded in ``limits``."""

    SCRIPT: ClassVar[str] = "claim"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "leased", "claims", "meta", "bucket",
                                       "lease_of", "started", "limits")
    ARGS: ClassVar[tuple[str, ...]] = (
        "n", "now_ms", "lease_ms", "token_prefix", "worker", "max_bytes", "strict_word",
        "per_task_bytes", "tenant_max_leased", "tenant_per_second", "tenant_burst", "first_k",
        "timeout_seconds")
    EXTRA_KEYS: ClassVar[tuple[str, ...]] = ("pool", "counts", "bucket")
    EXTRA_ARGS: ClassVar[tuple[str, ...]] = ("want", "holder", "max_held", "rate_per_second",
                                             "rate_burst", "shares")

    on: Any
    n: int
    now_ms: int
    lease_ms: int
    token_prefix: str
    worker: str
    max_bytes: int = 0
    strict: bool = False
    per_task_bytes: int = 0
    tenant_max_leased: int = 0
    tenant_rate: tuple[float, int] | None = None
    first_k: int = 0
    timeout_seconds: int = 0
    take: ClaimTake | None = None

    @property
    def strict_word(self) -> str:
        return "strict" if self.strict else ""

    @property
    def tenant_per_second(self) -> str:
        return wire_float(self.tenant_rate[0] if self.tenant_rate else 0.0)

    @property
    def tenant_burst(self) -> int:
        return self.tenant_rate[1] if self.tenant_rate else 0

    def extra(self) -> ClaimTake | None:
        return self.take

    def parse(self, reply: Any) -> ClaimReply:
        mode = text(reply[1])
        if mode == "repeat":  # (after the four fields, per lease of the first run: id, token)
            return ClaimReply(int(reply[0]), mode, [], 0, int(reply[3]), tuple(zip(
                [text(x) for x in reply[4::2]], [text(x) for x in reply[5::2]], strict=True)))
        # after the four fields, per task: id, attempt, lease token, JSON
        claimed: list[Claimed] = list(zip(reply[4::4], reply[5::4], reply[6::4], reply[7::4],
                                          strict=True))
        return ClaimReply(int(reply[0]), mode, claimed, int(reply[2]), int(reply[3]))


# -- admission ------------------------------------------------------------------------------


@lazy_dataclass(frozen=True)
class PushReply:
    """What push_ready.lua answers: the pair's mode after (``late``: nothing written, the
    reconciler took the rows over; ``allot``: nothing written, ``short`` bytes of allotment
    missing), the bytes of allotment given back, the ids refused, the pair's count of bytes
    given back so far (``freed``, for the ledger), the tasks waiting before the push and
    the allotment left beyond the pair's usage after it (``slack``), and how many tasks it
    left out as cancelled or deleted (``gone``: neither pushed nor refused)."""

    mode: str
    given_back: int
    short: int
    refused: list[str]
    freed: int = 0
    ready_before: int = 0
    slack: int = 0
    gone: int = 0


@lazy_dataclass(frozen=True)
class PushReady(LuaCall[PushReply]):
    """Push items into a pair's warm set (lua/push_ready.lua): (id, place, blob) each, as
    the admission makes them (logic/admission.py ``PushItem``).

    The script reads the items in two columns, the (score, member) pairs as ZADD takes them,
    then the (id, blob) pairs as HSET does: four arguments per item all the same."""

    SCRIPT: ClassVar[str] = "push_ready"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "meta", "inflight", "leased",
                                       "lease_of", "gone", "newer", "newer_at", "finished",
                                       "finished_prev")
    ARGS: ClassVar[tuple[str, ...]] = ("warm_max", "kind", "now_ms", "token",
                                       "warm_max_bytes", "since_ms", "bound", "grant",
                                       "charge", "keep")
    ITEM: ClassVar[tuple[str, ...]] = ("score", "member", "id", "blob")

    on: Any
    warm_max: int
    kind: str
    now_ms: int
    token: str
    warm_max_bytes: int
    since_ms: int
    bound: str
    grant: int
    charge: int
    keep: int
    items: Sequence[Any] = ()

    def item_args(self) -> list[Any]:
        # columns: every item's (score, member), then every item's (id, blob)
        zadd: list[Any] = []
        hset: list[Any] = []
        for task_id, (score, member), blob in self.items:
            zadd += (score, member)
            hset += (task_id, blob)
        return zadd + hset

    def parse(self, reply: Any) -> PushReply:
        mode = text(reply[0])
        if mode == "late":
            return PushReply(mode, 0, 0, [])
        if mode == "allot":
            return PushReply(mode, 0, int(reply[1]), [])
        return PushReply(mode, int(reply[1]), 0, [text(x) for x in reply[6:]],
                         freed=int(reply[2]), ready_before=int(reply[3]),
                         slack=int(reply[4]), gone=int(reply[5]))


@lazy_dataclass(frozen=True)
class UpdateReply:
    """What update_ready.lua answers: ``ok`` with how many tasks were found, ``allot``
    with the bytes of allotment missing, or ``over`` (the growth does not fit the pair's
    allotment); nothing replaced but with ``ok``. ``made``: the call made the pair's
    ``newer_at`` (the caller enters the pair in the index of lapses)."""

    status: str
    amount: int
    made: bool = False


@lazy_dataclass(frozen=True)
class UpdateReady(LuaCall[UpdateReply]):
    """Replace the data of tasks already in the warm tier (lua/update_ready.lua), their
    growth counted against the pair's share of its tenant's bound (``bound`` '', 'ask' or
    'strict', ``grant`` and ``charge`` as push_ready takes them)."""

    SCRIPT: ClassVar[str] = "update_ready"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "meta", "leased", "newer",
                                       "newer_at", "gone", "finished", "finished_prev")
    ARGS: ClassVar[tuple[str, ...]] = ("warm_max_bytes", "bound", "grant", "charge",
                                       "now_ms", "ttl_ms", "newer_max_bytes")
    ITEM: ClassVar[tuple[str, ...]] = ("member", "score", "blob")

    on: Any
    warm_max_bytes: int
    bound: str = ""
    grant: int = 0
    charge: int = 0
    now_ms: int = 0
    ttl_ms: int = 0
    newer_max_bytes: int = 0
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> UpdateReply:
        return UpdateReply(text(reply[0]), int(reply[1]), int(reply[2]) == 1)


@lazy_dataclass(frozen=True)
class ColdReply:
    """What replace_cold.lua answers: the ids of the waiting tasks it took out, and whether
    it made the pair's ``newer_at`` (its marks: the caller enters the pair in the index of
    lapses)."""

    removed: list[str]
    made: bool


@lazy_dataclass(frozen=True)
class ReplaceCold(LuaCall[ColdReply]):
    """Send replaced tasks cold whose replacement the warm tier cannot keep
    (lua/replace_cold.lua): waiting ones leave the ready set, the others keep a mark that
    makes a push of them refuse them (lapsing ``ttl_ms`` after ``now_ms``). Items: (member,
    score) of each task's place."""

    SCRIPT: ClassVar[str] = "replace_cold"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "meta", "newer", "newer_at")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "ttl_ms")
    ITEM: ClassVar[tuple[str, ...]] = ("member", "score")

    on: Any
    now_ms: int
    ttl_ms: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> ColdReply:
        return ColdReply([text(x) for x in reply[1:]], int(reply[0]) == 1)


# -- leases ---------------------------------------------------------------------------------


@lazy_dataclass(frozen=True)
class LeaseCheck(LuaCall[list[bool]]):
    """An ack's or a nack's check of its leases (lua/lease_check.lua): per member, whether
    the lease is held with its deadline after ``now_ms``; each one held is marked as ending,
    so a release of it takes nothing."""

    SCRIPT: ClassVar[str] = "lease_check"
    KEYS: ClassVar[tuple[str, ...]] = ("leased",)
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms",)
    ITEM: ClassVar[tuple[str, ...]] = ("member",)

    on: Any
    now_ms: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[bool]:
        return [x == 1 for x in reply]


@lazy_dataclass(frozen=True)
class LeaseDrop(LuaCall[int]):
    """End these leases (members ``<id>|<token>``, lua/lease_drop.lua), their progress and
    their tasks' ``newer`` entries with them; answers how many were ended."""

    SCRIPT: ClassVar[str] = "lease_drop"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "lease_of", "claims", "started", "progress",
                                       "meta", "limits", "newer", "newer_at")
    ITEM: ClassVar[tuple[str, ...]] = ("member",)

    on: Any
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> int:
        return int(reply)


@lazy_dataclass(frozen=True)
class ReleaseLeases(LuaCall[list[str]]):
    """End those of these leases whose deadline is after ``now_ms`` (lua/release_leases.lua);
    answers the members ended."""

    SCRIPT: ClassVar[str] = "release_leases"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "lease_of", "claims", "started", "progress",
                                       "meta", "limits")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms",)
    ITEM: ClassVar[tuple[str, ...]] = ("member",)

    on: Any
    now_ms: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[str]:
        return [text(m) for m in reply]


@lazy_dataclass(frozen=True)
class LeaseExtend(LuaCall[list[int]]):
    """Move leases' deadlines on (lua/lease_extend.lua): per (member, extend_ms) item, the
    new deadline, or 0 for a lease not held or past its deadline."""

    SCRIPT: ClassVar[str] = "lease_extend"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "limits")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms",)
    ITEM: ClassVar[tuple[str, ...]] = ("member", "extend_ms")

    on: Any
    now_ms: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[int]:
        return [int(x) for x in reply]


# What lua/lease_progress.lua answers per lease.
PROGRESS_NOT_HELD, PROGRESS_KEPT, PROGRESS_NO_ROOM = 0, 1, 2


@lazy_dataclass(frozen=True)
class LeaseProgress(LuaCall[tuple[list[int], int]]):
    """Keep the progress heartbeats carry with their leases (lua/lease_progress.lua), held
    to the tenant's share (``bound``, ``grant``, ``charge``: as ``PushReady``'s): (per
    (member, progress JSON) item ``PROGRESS_KEPT``, ``PROGRESS_NOT_HELD`` (no lease held
    with its deadline ahead) or ``PROGRESS_NO_ROOM`` (held, the progress refused for the
    share), bytes short: with 'ask', ``([], short)`` when nothing was written)."""

    SCRIPT: ClassVar[str] = "lease_progress"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "progress", "meta", "ready", "data", "gone",
                                       "finished", "finished_prev")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "bound", "grant", "charge")
    ITEM: ClassVar[tuple[str, ...]] = ("member", "progress")

    on: Any
    now_ms: int
    items: Sequence[Any] = ()
    bound: str = ""
    grant: int = 0
    charge: int = 0

    def parse(self, reply: Any) -> tuple[list[int], int]:
        if reply and text(reply[0]) == "allot":
            return [], int(reply[1])
        return [int(x) for x in reply], 0


@lazy_dataclass(frozen=True)
class LeaseExpired(LuaCall[list[tuple[str, str, int]]]):
    """List and mark up to ``limit`` leases past their deadline (lua/lease_expired.lua):
    (id, token, attempt) each."""

    SCRIPT: ClassVar[str] = "lease_expired"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "limits")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "limit")

    on: Any
    now_ms: int
    limit: int

    def parse(self, reply: Any) -> list[tuple[str, str, int]]:
        out = []
        for raw in reply:
            task_id, _, token = text(raw).partition("|")
            out.append((task_id, token, attempt_of_token(token) or 0))
        return out


@lazy_dataclass(frozen=True)
class LeaseIndex(LuaCall[bool]):
    """One slice of completing a pair's lease index (lua/lease_index.lua); answers whether
    it is complete."""

    SCRIPT: ClassVar[str] = "lease_index"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "lease_of", "claims", "meta")
    ARGS: ClassVar[tuple[str, ...]] = ("slice",)

    on: Any
    slice: int

    def parse(self, reply: Any) -> bool:
        return bool(int(reply))


@lazy_dataclass(frozen=True)
class RunningLease:
    """One lease of a running page: its task, token, deadline, start and claim record
    (``<started_ms>|<worker>``, '' when none)."""

    id: str
    token: str
    deadline_ms: int
    started_ms: int
    record: str


@lazy_dataclass(frozen=True)
class RunningPage(LuaCall[tuple[list[RunningLease], tuple[int, str] | None]]):
    """A page of a pair's running leases after (started ms, id) (lua/running_page.lua):
    the leases and where the next page starts after (None when none follows)."""

    SCRIPT: ClassVar[str] = "running_page"
    KEYS: ClassVar[tuple[str, ...]] = ("started", "lease_of", "leased", "claims")
    ARGS: ClassVar[tuple[str, ...]] = ("after_ms", "after_id", "limit", "scan")

    on: Any
    after: tuple[int, str] | None
    limit: int
    scan: int

    @property
    def after_ms(self) -> str:
        return "" if self.after is None else str(self.after[0])

    @property
    def after_id(self) -> str:
        return "" if self.after is None else self.after[1]

    def parse(self, reply: Any) -> tuple[list[RunningLease], tuple[int, str] | None]:
        # { state, last_ms, last_id, then per lease: id, token, deadline, started, record }
        state, last_ms, last_id = text(reply[0]), text(reply[1]), text(reply[2])
        leases = [RunningLease(text(reply[i]), text(reply[i + 1]), int(float(reply[i + 2])),
                               int(float(reply[i + 3])), text(reply[i + 4]))
                  for i in range(3, len(reply), 5)]
        if state == "end" or not last_ms:
            return leases, None
        return leases, (int(float(last_ms)), last_id)


# -- the reconciler and removals ------------------------------------------------------------


@lazy_dataclass(frozen=True)
class Missing(LuaCall[list[str] | None]):
    """Which of these ids are neither waiting nor leased (lua/missing.lua); None while the
    pair's lease index is not complete. ``cursor``, kept in the meta's ``field``
    (``reconcile_after`` or ``members_after``): '' keeps the kept cursor, '0' forgets it,
    anything else is kept."""

    SCRIPT: ClassVar[str] = "missing"
    KEYS: ClassVar[tuple[str, ...]] = ("data", "leased", "lease_of", "meta")
    ARGS: ClassVar[tuple[str, ...]] = ("fence_ms", "field", "cursor")
    ITEM: ClassVar[tuple[str, ...]] = ("id",)

    on: Any
    fence_ms: int
    field: str
    cursor: str
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[str] | None:
        if text(reply[0]) == "indexing":
            return None
        return [text(x) for x in reply[1:]]


@lazy_dataclass(frozen=True)
class Removed:
    """What remove.lua answers: how many tasks were ready or leased, and the leases it
    ended, each (id, token, its progress entry ``<token>|<ms>|<json>`` or None).
    ``made``: the call made the pair's ``gone`` (the caller enters the pair in the index
    of lapses)."""

    count: int
    leases: list[tuple[str, str, str | None]]
    made: bool = False


@lazy_dataclass(frozen=True)
class Remove(LuaCall[Removed]):
    """Take tasks (their ready-set members) out of the warm tier entirely, waiting or leased
    (lua/remove.lua; ``leases`` '0': waiting ones only); answers how many were, and the
    leases it ended. ``gone_ms`` (a
    cancel or delete; '' for none): each id's tombstone, kept ``ttl_ms`` and at most
    ``cap`` of them, which makes every later push leave the task out."""

    SCRIPT: ClassVar[str] = "remove"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "leased", "meta", "lease_of", "claims",
                                       "started", "progress", "limits", "gone")
    ARGS: ClassVar[tuple[str, ...]] = ("gone_ms", "ttl_ms", "cap", "leases")
    ITEM: ClassVar[tuple[str, ...]] = ("member",)

    on: Any
    gone_ms: int | str = ""
    ttl_ms: int = 0
    cap: int = 0
    leases: str = "1"  # '0': waiting tasks only, leases and their data left alone
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> Removed:
        rest = reply[2:]
        return Removed(int(reply[0]), [
            (text(rest[i]), text(rest[i + 1]), None if rest[i + 2] is None
             else text(rest[i + 2])) for i in range(0, len(rest), 3)], int(reply[1]) == 1)


# -- a tenant's share of the warm tier ------------------------------------------------------


@lazy_dataclass(frozen=True)
class LedgerReply:
    """What warm_ledger.lua answers: the bytes granted (``take``) or the entry after
    (``set``, ``cancel``), and the ledger's total after."""

    amount: int
    total: int


@lazy_dataclass(frozen=True)
class WarmLedger(LuaCall[LedgerReply]):
    """Take from or correct a tenant's warm-tier ledger (lua/warm_ledger.lua)."""

    SCRIPT: ClassVar[str] = "warm_ledger"
    KEYS: ClassVar[tuple[str, ...]] = ("warm",)
    ARGS: ClassVar[tuple[str, ...]] = ("op", "queue", "amount", "bound", "now_ms", "quiet_ms",
                                       "freed")

    on: Any
    op: str
    queue: str
    amount: int | str
    bound: int
    now_ms: int
    quiet_ms: int
    freed: int

    def parse(self, reply: Any) -> LedgerReply:
        return LedgerReply(int(reply[0]), int(reply[1]))


@lazy_dataclass(frozen=True)
class AllotShrink(LuaCall[tuple[int, int, int]]):
    """Lower a pair's allotment to its usage plus ``keep`` (lua/allot_shrink.lua): (bytes
    freed, allotment after, the pair's count of bytes given back so far)."""

    SCRIPT: ClassVar[str] = "allot_shrink"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "meta", "leased", "gone", "finished",
                                       "finished_prev")
    ARGS: ClassVar[tuple[str, ...]] = ("charge", "keep")

    on: Any
    charge: int
    keep: int

    def parse(self, reply: Any) -> tuple[int, int, int]:
        return int(reply[0]), int(reply[1]), int(reply[2])


# -- admission modes ------------------------------------------------------------------------


@lazy_dataclass(frozen=True)
class AdmissionBegin(LuaCall[str]):
    """Register an admission in flight and answer the pair's mode (lua/admission_begin.lua);
    ``force_cold`` turns the pair cold first. ``first_bytes`` (0: none): the blob of the
    first task the caller will push; a warm set that could not take it (``warm_max``,
    ``warm_max_bytes``, with what admissions that found room are about to push) turns the
    pair cold, so the caller writes its rows cold at once; one that can records ``tasks``
    and ``bytes`` as about to be pushed by this admission (for ``stale_ms`` at most)."""

    SCRIPT: ClassVar[str] = "admission_begin"
    KEYS: ClassVar[tuple[str, ...]] = ("meta", "inflight", "ready", "data")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "token", "force_word", "warm_max",
                                       "warm_max_bytes", "first_bytes", "tasks", "bytes",
                                       "stale_ms")

    on: Any
    now_ms: int
    token: str
    force_cold: bool = False
    warm_max: int = 0
    warm_max_bytes: int = 0
    first_bytes: int = 0
    # with a first task: the caller's tasks and their bytes (recorded while it pushes them)
    tasks: int = 0
    bytes: int = 0
    stale_ms: int = 0

    @property
    def force_word(self) -> str:
        return "force_cold" if self.force_cold else ""

    def parse(self, reply: Any) -> str:
        return text(reply)


@lazy_dataclass(frozen=True)
class GoCold(LuaCall[str]):
    """Turn the pair cold and register an admission in flight (lua/go_cold.lua)."""

    SCRIPT: ClassVar[str] = "go_cold"
    KEYS: ClassVar[tuple[str, ...]] = ("meta", "inflight")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "token")

    on: Any
    now_ms: int
    token: str

    def parse(self, reply: Any) -> str:
        return text(reply)


@lazy_dataclass(frozen=True)
class AdmissionEnd(LuaCall[int]):
    """End an admission in flight (lua/admission_end.lua): 1 when it was registered. Drops
    its record of tasks about to be pushed, if any."""

    SCRIPT: ClassVar[str] = "admission_end"
    KEYS: ClassVar[tuple[str, ...]] = ("inflight", "meta")
    ARGS: ClassVar[tuple[str, ...]] = ("token",)

    on: Any
    token: str

    def parse(self, reply: Any) -> int:
        return int(reply)


@lazy_dataclass(frozen=True)
class ModeReply:
    """What admission_mode.lua answers."""

    mode: str
    epoch: str
    inflight: int
    ready: int
    flipped: bool
    ready_bytes: int


@lazy_dataclass(frozen=True)
class AdmissionMode(LuaCall[ModeReply]):
    """Observe a pair's mode, or flip it back to warm when it may (lua/admission_mode.lua)."""

    SCRIPT: ClassVar[str] = "admission_mode"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "meta", "inflight", "data")
    ARGS: ClassVar[tuple[str, ...]] = ("op", "now_ms", "stale_ms", "warm_max",
                                       "expected_epoch", "warm_max_bytes")

    on: Any
    op: str
    now_ms: int
    stale_ms: int
    warm_max: int
    expected_epoch: str
    warm_max_bytes: int

    def parse(self, reply: Any) -> ModeReply:
        return ModeReply(text(reply[0]), text(reply[1]), int(reply[2]), int(reply[3]),
                         bool(reply[4]), int(reply[5]))


@lazy_dataclass(frozen=True)
class StatsReply:
    """What tier_stats.lua answers: tasks ready and leased, the mode, the bytes counted."""

    ready: int
    leased: int
    mode: str
    ready_bytes: int


@lazy_dataclass(frozen=True)
class TierStats(LuaCall[StatsReply]):
    """A pair's counts and mode (lua/tier_stats.lua)."""

    SCRIPT: ClassVar[str] = "tier_stats"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "leased", "meta")

    on: Any

    def parse(self, reply: Any) -> StatsReply:
        return self.parse_reply(reply)

    @staticmethod
    def parse_reply(reply: Any) -> StatsReply:
        """The reply parsed without a call at hand (a pipeline's replies)."""
        return StatsReply(int(reply[0]), int(reply[1]), text(reply[2]), int(reply[3]))


# -- a task's lease and waiting tasks -------------------------------------------------------


@lazy_dataclass(frozen=True)
class LeaseOfReply:
    """A task's lease as lease_of.lua finds it: token, deadline (0: the reaper is expiring
    it), the claim's record ('' when none)."""

    token: str
    deadline_ms: int
    record: str


@lazy_dataclass(frozen=True)
class LeaseOf(LuaCall[LeaseOfReply | None]):
    """The lease a task holds, by its id (lua/lease_of.lua); None when none."""

    SCRIPT: ClassVar[str] = "lease_of"
    KEYS: ClassVar[tuple[str, ...]] = ("lease_of", "leased", "claims")
    ARGS: ClassVar[tuple[str, ...]] = ("id",)

    on: Any
    id: str

    def parse(self, reply: Any) -> LeaseOfReply | None:
        if not reply:
            return None
        return LeaseOfReply(text(reply[0]), int(float(reply[1])), text(reply[2]))


@lazy_dataclass(frozen=True)
class RemoveReady(LuaCall[list[str]]):
    """Remove tasks (their ready-set members) only while they wait (lua/remove_ready.lua);
    answers the ids removed."""

    SCRIPT: ClassVar[str] = "remove_ready"
    KEYS: ClassVar[tuple[str, ...]] = ("ready", "data", "meta")
    ITEM: ClassVar[tuple[str, ...]] = ("member",)

    on: Any
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[str]:
        return [text(x) for x in reply]


@lazy_dataclass(frozen=True)
class ReadyTenantsNote(LuaCall[int]):
    """Enter tenants in a queue's ready-tenant index (lua/ready_tenants_note.lua); answers
    how many were new. ``on``: an object whose ``index`` is the index's key."""

    SCRIPT: ClassVar[str] = "ready_tenants_note"
    KEYS: ClassVar[tuple[str, ...]] = ("index",)
    ITEM: ClassVar[tuple[str, ...]] = ("tenant",)

    on: Any
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> int:
        return int(reply)


# -- acks committed together: the pair's mailbox (logic/ack_gathering.py) -----------------------


@lazy_dataclass(frozen=True)
class AckCheckJoin(LuaCall[tuple[list[bool], str | None, str, list[str]]]):
    """An ack's check of one pair's leases (as ``LeaseCheck``), then its delete's place in
    the pair's mailbox of acks committed together (lua/ack_check_join.lua): (held per
    item, this ack's entry or None when none is held, ``none`` / ``commit`` / ``wait``,
    the entries it takes). ``on``: the request's ``AckMail``; items (member, attempt)."""

    SCRIPT: ClassVar[str] = "ack_check_join"
    KEYS: ClassVar[tuple[str, ...]] = ("leased", "mailbox", "lock", "states")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "request", "lock_ms", "most")
    ITEM: ClassVar[tuple[str, ...]] = ("member", "attempt")

    on: Any
    now_ms: int
    request: str
    lock_ms: int
    most: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> tuple[list[bool], str | None, str, list[str]]:
        entry = None if reply[1] is None else text(reply[1])
        return [x == 1 for x in reply[0]], entry, text(reply[2]), [text(x) for x in reply[3:]]


@lazy_dataclass(frozen=True)
class AckLook(LuaCall[tuple[str, list[str]]]):
    """A waiting ack looks at its pair's mailbox again (lua/ack_look.lua): (``reply``,
    [the answer]), (``wait``, []), (``commit``, the entries it takes) or (``orphan``, []).
    ``on``: the request's ``AckMail``."""

    SCRIPT: ClassVar[str] = "ack_look"
    KEYS: ClassVar[tuple[str, ...]] = ("mailbox", "lock", "states", "reply")
    ARGS: ClassVar[tuple[str, ...]] = ("entry", "lock_ms", "most")

    on: Any
    entry: str
    lock_ms: int
    most: int

    def parse(self, reply: Any) -> tuple[str, list[str]]:
        return text(reply[0]), [text(x) for x in reply[1:]]


@lazy_dataclass(frozen=True)
class AckPass(LuaCall[list[str]]):
    """The committer of a pair's acks forgets the requests it answered (``items``), then goes
    on with the entries that came meanwhile (at most ``most``; 0: none) or lets the lock go
    (lua/ack_pass.lua); the entries it takes."""

    SCRIPT: ClassVar[str] = "ack_pass"
    KEYS: ClassVar[tuple[str, ...]] = ("mailbox", "lock", "states")
    ARGS: ClassVar[tuple[str, ...]] = ("owner", "most", "lock_ms")
    ITEM: ClassVar[tuple[str, ...]] = ("request",)

    on: Any
    owner: str
    most: int
    lock_ms: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[str]:
        return [text(x) for x in reply]


# -- lapsed replacements and tombstones: the reaper's sweep -----------------------------------


@lazy_dataclass(frozen=True)
class SweepReply:
    """What pair_sweep.lua answers: when the pair's first entry left lapses (ms; 0: none is
    left), and whether lapsed ``newer`` entries were left for a later call."""

    first_ms: int
    more: bool


@lazy_dataclass(frozen=True)
class PairSweep(LuaCall[SweepReply]):
    """Drop a pair's lapsed ``newer`` entries (at most ``limit``) and tombstones
    (lua/pair_sweep.lua)."""

    SCRIPT: ClassVar[str] = "pair_sweep"
    KEYS: ClassVar[tuple[str, ...]] = ("meta", "newer", "newer_at", "gone")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "limit")

    on: Any
    now_ms: int
    limit: int

    def parse(self, reply: Any) -> SweepReply:
        return SweepReply(int(reply[0]), int(reply[1]) == 1)


@lazy_dataclass(frozen=True)
class LapseIndex(LuaCall[int]):
    """Note pairs in the index of lapses, or move or take out those a sweep read
    (lua/lapse_index.lua); answers how many entries changed. Items: (member, seen, next),
    ``seen`` '' for a note, ``next`` '' to take the pair out. ``on``: an object whose
    ``index`` is the index's key."""

    SCRIPT: ClassVar[str] = "lapse_index"
    KEYS: ClassVar[tuple[str, ...]] = ("index",)
    ITEM: ClassVar[tuple[str, ...]] = ("member", "seen", "next")

    on: Any
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> int:
        return int(reply)


# -- queue-wide capacity (lua/capacity_pool.lua) --------------------------------------------


@lazy_dataclass(frozen=True)
class PoolKeys:
    """The keys of one capacity pool of a queue and the queue's token bucket."""

    pool: str
    counts: str
    bucket: str


@lazy_dataclass(frozen=True)
class CapacityReply:
    """What queue_capacity.lua answers: units taken, when asking again is worth it (ms) and
    the pool's units held after."""

    taken: int
    retry_after_ms: int
    held: int


@lazy_dataclass(frozen=True)
class QueueCapacity(LuaCall[CapacityReply]):
    """Take a queue's capacity, or give back what a take did not use (``want`` 0), in the
    queue's slot (lua/queue_capacity.lua)."""

    SCRIPT: ClassVar[str] = "queue_capacity"
    KEYS: ClassVar[tuple[str, ...]] = ("pool", "counts", "bucket")
    ARGS: ClassVar[tuple[str, ...]] = ("want", "now_ms", "deadline_ms", "holder", "max_held",
                                       "per_second", "burst", "give_back_tokens",
                                       "give_back_past_arg")

    on: PoolKeys
    want: int
    now_ms: int
    deadline_ms: int
    holder: str
    max_held: int
    rate: tuple[float, int] | None
    give_back_tokens: int = 0
    give_back_past: int | None = None

    @property
    def per_second(self) -> str:
        return wire_float(self.rate[0] if self.rate else 0.0)

    @property
    def burst(self) -> int:
        return self.rate[1] if self.rate else 0

    @property
    def give_back_past_arg(self) -> int | str:
        return "" if self.give_back_past is None else self.give_back_past

    def parse(self, reply: Any) -> CapacityReply:
        return CapacityReply(int(reply[0]), int(reply[1]), int(reply[2]))


@lazy_dataclass(frozen=True)
class CapacityFree(LuaCall[int]):
    """Give reservation units back, each at most once (lua/capacity_free.lua): ``items``
    are groups ``holder, m, k1 .. km`` (``warm_tier.unit_groups``); answers how many were
    given back."""

    SCRIPT: ClassVar[str] = "capacity_free"
    KEYS: ClassVar[tuple[str, ...]] = ("pool", "counts")
    ITEM: ClassVar[tuple[str, ...]] = ("holder", "count", "unit")
    GROUPED: ClassVar[bool] = True

    on: Any
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> int:
        return int(reply)


@lazy_dataclass(frozen=True)
class CapacityExtend(LuaCall[list[int]]):
    """Move reservation units on (lua/capacity_extend.lua): ``items`` are groups
    ``holder, deadline_ms, m, k1 .. km``; answers each unit's deadline after (0: not
    held), in the order given."""

    SCRIPT: ClassVar[str] = "capacity_extend"
    KEYS: ClassVar[tuple[str, ...]] = ("pool", "counts")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms",)
    ITEM: ClassVar[tuple[str, ...]] = ("holder", "deadline_ms", "count", "unit")
    GROUPED: ClassVar[bool] = True

    on: Any
    now_ms: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> list[int]:
        return [int(x) for x in reply]


@lazy_dataclass(frozen=True)
class UseKeys:
    """What capacity_use.lua reads: a set of holdings by deadline and a token bucket."""

    held: str
    bucket: str


@lazy_dataclass(frozen=True)
class UseCounts:
    """A pool's counts hash, read with its pool (capacity_use.lua KEYS 3)."""

    counts: str


@lazy_dataclass(frozen=True)
class CapacityUse(LuaCall[tuple[int, float | None]]):
    """How much of a limit is in use (lua/capacity_use.lua): the holdings whose deadline
    is ahead, and the bucket's tokens now (None without a rate); changes nothing."""

    SCRIPT: ClassVar[str] = "capacity_use"
    KEYS: ClassVar[tuple[str, ...]] = ("held", "bucket")
    ARGS: ClassVar[tuple[str, ...]] = ("now_ms", "per_second", "burst")
    EXTRA_KEYS: ClassVar[tuple[str, ...]] = ("counts",)

    on: UseKeys
    now_ms: int
    rate: tuple[float, int] | None
    pool: UseCounts | None = None

    @property
    def per_second(self) -> str:
        return wire_float(self.rate[0] if self.rate else 0.0)

    @property
    def burst(self) -> int:
        return self.rate[1] if self.rate else 0

    def extra(self) -> UseCounts | None:
        return self.pool

    def parse(self, reply: Any) -> tuple[int, float | None]:
        tokens = text(reply[1])
        return int(reply[0]), float(tokens) if tokens else None


# -- a tenant's own limits on the HTTP API --------------------------------------------------


@lazy_dataclass(frozen=True)
class TenantRequests(LuaCall[int]):
    """Take one token of a tenant's request bucket (lua/tenant_requests.lua): 0, or the ms
    until one."""

    SCRIPT: ClassVar[str] = "tenant_requests"
    KEYS: ClassVar[tuple[str, ...]] = ("requests",)
    ARGS: ClassVar[tuple[str, ...]] = ("per_second", "burst")

    on: Any
    rate: float
    burst: int

    @property
    def per_second(self) -> str:
        return wire_float(self.rate)

    def parse(self, reply: Any) -> int:
        return int(reply)


@lazy_dataclass(frozen=True)
class PollKey:
    """A set of long-poll places (a tenant's, or every caller's)."""

    polls: str


@lazy_dataclass(frozen=True)
class LongPolls(LuaCall[bool]):
    """Take one of ``cap`` long-poll places for ``hold_ms`` (lua/long_polls.lua): whether
    it was taken."""

    SCRIPT: ClassVar[str] = "long_polls"
    KEYS: ClassVar[tuple[str, ...]] = ("polls",)
    ARGS: ClassVar[tuple[str, ...]] = ("cap", "reservation", "hold_ms")

    on: Any
    cap: int
    reservation: str
    hold_ms: int

    def parse(self, reply: Any) -> bool:
        return int(reply) == 1


# -- waits for a task's end (logic/waits.py) ----------------------------------------------


@lazy_dataclass(frozen=True)
class TaskFinished(LuaCall[int]):
    """Mark tasks of one pair finished and wake their registered waiters
    (lua/task_finished.lua): each item is (id, state, attempt); answers how many waiters
    the messages reached. ``charge``: the tenant's per-task charge when it has a bound (the
    markers kept then fit the pair's room), 0 when it has none."""

    SCRIPT: ClassVar[str] = "task_finished"
    KEYS: ClassVar[tuple[str, ...]] = ("finished", "finished_prev", "waiters", "ready", "data",
                                       "meta", "leased", "gone")
    ARGS: ClassVar[tuple[str, ...]] = ("ttl_ms", "cap", "charge")
    ITEM: ClassVar[tuple[str, ...]] = ("id", "state", "attempt")

    on: Any
    ttl_ms: int
    cap: int
    charge: int
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> int:
        return int(reply)


@lazy_dataclass(frozen=True)
class TaskWait(LuaCall[str | None]):
    """One wait's registration for a task's message, and its marker (lua/task_wait.lua):
    ``step`` 1 registers and looks, 0 only looks, -1 takes a registration back; answers
    the marker text ('<state>|<attempt>|<ms>'), '~dropped' when there is none but the
    pair's markers went early lately, None when there is none."""

    SCRIPT: ClassVar[str] = "task_wait"
    KEYS: ClassVar[tuple[str, ...]] = ("finished", "finished_prev", "waiters", "meta")
    ARGS: ClassVar[tuple[str, ...]] = ("id", "step", "waiters_ttl_ms")

    on: Any
    id: str
    step: int
    waiters_ttl_ms: int

    def parse(self, reply: Any) -> str | None:
        return None if reply is None else text(reply)


# -- throughput counts (dal/throughput.py) -------------------------------------------------


@lazy_dataclass(frozen=True)
class RateKey:
    """A pair's throughput counts (``throughput.rate_key``)."""

    rate: str


@lazy_dataclass(frozen=True)
class RateAdd(LuaCall[int]):
    """Add to a pair's counts of the server's current second (lua/rate_add.lua); answers
    that second (epoch seconds)."""

    SCRIPT: ClassVar[str] = "rate_add"
    KEYS: ClassVar[tuple[str, ...]] = ("rate",)
    ARGS: ClassVar[tuple[str, ...]] = ("enqueued", "acked")

    on: Any
    enqueued: int
    acked: int

    def parse(self, reply: Any) -> int:
        return int(reply)


@lazy_dataclass(frozen=True)
class TenantsKey:
    """A queue's index of tenants with counts (``throughput.tenants_key``)."""

    tenants: str


@lazy_dataclass(frozen=True)
class RateTenants(LuaCall[int]):
    """Note tenants as counting now in the queue's index (lua/rate_tenants.lua); answers
    the server's second."""

    SCRIPT: ClassVar[str] = "rate_tenants"
    KEYS: ClassVar[tuple[str, ...]] = ("tenants",)
    ITEM: ClassVar[tuple[str, ...]] = ("tenant",)

    on: Any
    items: Sequence[Any] = ()

    def parse(self, reply: Any) -> int:
        return int(reply)


# -- idempotency records of claims and lease outcomes (logic/idempotency.py) ----------------


@lazy_dataclass(frozen=True)
class RecordKey:
    """One idempotency key's record (``idempotency.valkey_key``)."""

    record: str


@lazy_dataclass(frozen=True)
class RecordClaim:
    """What idem_claim.lua answers: whether the caller claimed a new record, else
    the record's body fingerprint, and its status and body once its request finished (None
    while it runs)."""

    claimed: bool
    fingerprint: bytes | None = None
    status: int | None = None
    body: bytes | None = None


@lazy_dataclass(frozen=True)
class IdempotencyClaim(LuaCall[RecordClaim]):
    """Claim a key's record for ``lease_ms``, or read the one there
    (lua/idem_claim.lua)."""

    SCRIPT: ClassVar[str] = "idem_claim"
    KEYS: ClassVar[tuple[str, ...]] = ("record",)
    ARGS: ClassVar[tuple[str, ...]] = ("fingerprint", "owner", "lease_ms")

    on: RecordKey
    fingerprint: bytes
    owner: str
    lease_ms: int

    def parse(self, reply: Any) -> RecordClaim:
        if int(reply[0]) == 1:
            return RecordClaim(True)
        # (Valkey ends a script's array at its first nil: an unfinished record's s and b)
        _, fingerprint, status, body = (list(reply) + [None] * 4)[:4]
        return RecordClaim(False, fingerprint, None if status is None else int(status), body)


@lazy_dataclass(frozen=True)
class IdempotencyFinish(LuaCall[bool]):
    """Keep a request's answer in the record the caller owns, for ``ttl_ms``
    (lua/idem_finish.lua); whether it was kept."""

    SCRIPT: ClassVar[str] = "idem_finish"
    KEYS: ClassVar[tuple[str, ...]] = ("record",)
    ARGS: ClassVar[tuple[str, ...]] = ("owner", "status", "body", "ttl_ms")

    on: RecordKey
    owner: str
    status: int
    body: bytes
    ttl_ms: int

    def parse(self, reply: Any) -> bool:
        return int(reply) == 1


@lazy_dataclass(frozen=True)
class IdempotencyAbandon(LuaCall[bool]):
    """Drop the record the caller owns (lua/idem_abandon.lua); whether it did."""

    SCRIPT: ClassVar[str] = "idem_abandon"
    KEYS: ClassVar[tuple[str, ...]] = ("record",)
    ARGS: ClassVar[tuple[str, ...]] = ("owner",)

    on: RecordKey
    owner: str

    def parse(self, reply: Any) -> bool:
        return int(reply) == 1


def evalsha(call: LuaCall[Any], sha: str) -> tuple[Any, ...]:
    """The call as one ``EVALSHA`` command of a pipeline."""
    keys, args = call.build()
    return ("EVALSHA", sha, len(keys), *keys, *args)


CALLS: tuple[type[LuaCall[Any]], ...] = (
    Claim, PushReady, UpdateReady, LeaseCheck, LeaseDrop, ReleaseLeases, LeaseExtend,
    LeaseExpired, LeaseProgress,
    LeaseIndex, RunningPage, Missing, Remove, WarmLedger, AllotShrink, AdmissionBegin,
    GoCold, AdmissionEnd, AdmissionMode, TierStats, LeaseOf, RemoveReady, ReadyTenantsNote,
    ReplaceCold, PairSweep, LapseIndex, QueueCapacity, CapacityFree, CapacityExtend,
    CapacityUse, TenantRequests, LongPolls, RateAdd, RateTenants, IdempotencyClaim,
    IdempotencyFinish, IdempotencyAbandon, TaskFinished, TaskWait, AckCheckJoin, AckLook,
    AckPass)
"""Every script with a typed call, as the tests visit them."""
