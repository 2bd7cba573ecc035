"""Acks of one (queue, tenant) committed together (``TIERQ_ACK_GROUP_COMMIT``): the deletes
of acks that arrive while another's commit is under way go into PostgreSQL in one statement
and one commit, so workers that ack in small batches cost the database fewer commits.

An ack of one tenant's tasks without results checks its leases and joins the pair's mailbox
in one call (lua/ack_check_join.lua: the check as ``leases.verify`` makes it, marks
included); it drops its leases itself after its rows' commit, as it does alone: only the
delete is gathered, and the answer 200 still comes after its commit. The gathering lives on
the pair's slot (lua/ack_look.lua, lua/ack_pass.lua; ``AckMail``): acks of different
tenants never share a mailbox, a lock or a commit, and a shard's acks have a mailbox of
their own.

===========================================  ===============================================
an ack's delete                              what it does
===========================================  ===============================================
finds the pair's committer lock free         takes it; deletes its own rows and those of the
                                             acks waiting in the mailbox (at most
                                             ``MOST_ENTRIES`` in all) in one statement; sends
                                             each its rows; goes on with the acks that came
                                             meanwhile (``MOST_PASSES`` times at most), then
                                             lets the lock go
finds it held                                waits in the mailbox for its answer, looking
                                             again after ``POLL_SECONDS``; past
                                             ``WAIT_ALONE_SECONDS`` deletes alone
its committer's delete failed                (answer ``E``) deletes its own rows alone
the lock went with the ack still in line     takes the lock and commits as above
taken, the lock not its taker's, no answer   its committer stopped (its lock expired after
(``orphan``)                                 ``lock_ms``, or was let go): deletes alone
a task another ack of the batch, or of an    (answer ``E``) deletes alone: each checks its
earlier pass of its committer, names too     own attempt; a batch member an ack ended is
                                             left out (``not_found``)
Valkey at ``maxmemory`` at the join          checks as usual and deletes its own rows alone
Valkey refuses or does not answer later      deletes its own rows alone
===========================================  ===============================================

An ack that deletes alone after its committer stopped, or after its wait, may find its rows
gone (that commit went through first): they are answered as ``not_found`` rejections,
and the group they held is released by the reaper's pass over held groups; every other
answer is the one the ack would have had alone. The rows deleted are those ``ack_delete``
deletes (warm, of the attempt leased, no waiter), each ack's own ids and attempts checked.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from tierq.core.batch_ids import batch_member
from tierq.core.lazy import lazy_module
from tierq.dal.lua_calls import AckCheckJoin
from tierq.dal.store.rows import AckedRow
from tierq.dal.warm_tier import AckMail, AnswersAlong
from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic import batch_rows
from tierq.logic.context import Context, to_ms
from tierq.logic.leases import Verified

if TYPE_CHECKING:
    from tierq.models import lease_outcomes
    from tierq.models.lease_outcomes import AckItem, Rejection
    from tierq.models.leases import ClaimedTask
else:
    lease_outcomes = lazy_module("tierq.models.lease_outcomes")

log = logging.getLogger(__name__)

# Acks one commit carries at most: its own and those it takes from the mailbox.
MOST_ENTRIES = 32
# How long a waiting ack waits for an answer before it looks at the mailbox again, seconds:
# the first wait, doubled after each look up to the last (its committer may have stopped,
# or let the lock go while the ack was still in line; an answer wakes it at once).
POLL_SECONDS = (0.05, 0.2)
# How long an ack waits in all before it deletes alone, seconds: going alone is always safe
# (of two deletes of a row one wins), and an HTTP function's time is short (29 s).
WAIT_ALONE_SECONDS = 2.0
# Commits a committer makes for acks that came during its own before it lets the lock go,
# and the time it may spend on them, seconds: its own caller waits meanwhile.
MOST_PASSES = 3
PASSES_SECONDS = 0.5
# How long an answer waits for its ack in Valkey, ms (an ack gone meanwhile never reads it).
REPLY_TTL_MS = 60_000


@dataclass(frozen=True, slots=True)
class Entry:
    """One ack's delete as its mailbox holds it: ``<request> <ids> <attempts>``."""

    request: str
    ids: list[str]
    attempts: list[int]
    text: str

    @classmethod
    def parse(cls, text: str) -> Entry:
        request, ids, attempts = text.split(" ")
        return cls(request, ids.split(","), [int(a) for a in attempts.split(",")], text)


@dataclass(slots=True)
class Joined:
    """An ack's leases checked and, for those held, its delete's place in the pair's
    mailbox (``check_and_join``): ``role`` ``commit`` (the lock is its own; ``taken`` the
    acks it commits with its own), ``wait`` or ``none`` (no lease held: nothing joined)."""

    tenant: str
    valid: list[Verified]
    mail: AckMail
    entry: str | None
    role: str
    taken: list[str]
    hold_ms: int
    # as the committer, its first answers and pass, to send with its lease drop
    # (``after_drop`` reads what they did); the time its passes may take, from its commit
    along: AnswersAlong | None = None
    passes_end: float = 0.0
    # as the committer, the tasks its passes carried (``_apart``)
    carried: set[str] = field(default_factory=set)


def lock_ms(ctx: Context) -> int:
    """How long a committer's lock lasts without its passes: past the pool's wait for a
    connection and its statement's timeout (``Settings`` refuses the gathering without one),
    and 5 s more. It does not count a wait outside those two, such as RDS Proxy's borrow
    timeout before the statement starts: a committer held up past the lock loses it like one
    that stopped, and the acks it gathered delete alone (the module's table; a row that
    commit deleted first is answered ``not_found``, never acked twice)."""
    settings = ctx.settings
    return settings.statement_timeout_ms + math.ceil(settings.db_pool_timeout * 1000) + 5_000


def check_and_join(ctx: Context, queue: str, items: Sequence[AckItem | ClaimedTask],
                   rejected: list[Rejection], tenants: dict[str, list[Verified]]
                   ) -> Joined | None:
    """``leases.verify`` of an ack whose items are one tenant's, fitting one call, and the
    delete of its leases held joined to the pair's mailbox in the same call
    (lua/ack_check_join.lua); leases not held are added to ``rejected`` (not_owner).
    ``tenants``: the items' ``leases.by_tenant``, whose refusals the caller recorded. None:
    not such an ack, or Valkey at ``maxmemory`` refused the join (the leases it marked
    check again as held): the caller verifies as usual and deletes alone."""
    if len(tenants) != 1:
        return None
    [(tenant, entries)] = tenants.items()
    if len(entries) > AckCheckJoin.items_per_call():
        return None
    request = os.urandom(8).hex()
    mail = AckMail.of(queue, tenant, ctx.id_tag, request)
    hold = lock_ms(ctx)
    try:
        held, entry, role, taken = ctx.warm.ack_check_join(
            mail, [(v.member, v.attempt) for v in entries], now_ms=to_ms(ctx.now()),
            lock_ms=hold, most=MOST_ENTRIES - 1)
    except WarmTierFull:
        return None
    except WarmTierUnavailable:
        _let_go(ctx, mail, request)  # (the call may have run and taken the lock)
        raise
    valid = [v for v, ok in zip(entries, held, strict=True) if ok]
    if len(valid) < len(entries):
        rejected.extend(lease_outcomes.Rejection(id=items[v.index].id, reason="not_owner")
                        for v, ok in zip(entries, held, strict=True) if not ok)
    return Joined(tenant, valid, mail, entry, role, taken, hold)


def delete_joined(ctx: Context, queue: str, joined: Joined) -> list[AckedRow]:
    """The rows of the joined ack's leases held deleted and committed: by its own commit
    with the acks it took, or by another's (the module's table)."""
    if joined.entry is None:
        return []
    mine = Entry.parse(joined.entry)
    if joined.role != "commit":
        return _wait(ctx, queue, joined.tenant, joined.mail, mine, joined.hold_ms)
    joined.passes_end = time.monotonic() + PASSES_SECONDS
    own, answers = _first_pass(ctx, queue, joined.tenant, joined.mail, mine,
                               [Entry.parse(e) for e in joined.taken], joined.hold_ms,
                               joined.carried)
    joined.along = AnswersAlong(joined.mail, mine.request, answers, most=MOST_ENTRIES,
                                lock_ms=joined.hold_ms, reply_ttl_ms=REPLY_TTL_MS,
                                until=joined.passes_end)
    return own


def answer_now(ctx: Context, joined: Joined) -> None:
    """Send the committer's first answers and pass now rather than with its lease drop
    when it committed others' acks: its ack has more PostgreSQL work before the drop
    (flows, groups), which must not hold the acks it answers past their wait. A committer
    that answers none sends its pass with its drop, no round trip more: the pair's lock is
    then held through that work, and acks that come meanwhile wait in the mailbox for the
    pass, which takes them (or, past ``PASSES_SECONDS``, for their next look)."""
    along = joined.along
    if along is None or along.sent or joined.entry is None or not along.answers:
        return
    taken = _send(ctx, joined.mail, Entry.parse(joined.entry), list(along.answers),
                  along.call().most, joined.hold_ms)
    along.sent, along.taken, along.refused, along.error = True, taken, 0, None


def after_drop(ctx: Context, queue: str, joined: Joined) -> None:
    """The committer's first answers and pass, sent with its lease drop (or now, when the
    drop did not send them or failed), and the passes for the acks it took meanwhile."""
    along = joined.along
    if along is None or joined.entry is None:
        return
    mine = Entry.parse(joined.entry)
    if along.sent and along.error is None:
        if along.refused:
            log.warning("%d answers to gathered acks were refused by Valkey; those acks "
                        "delete alone", along.refused)
        more = along.taken
    else:  # (sent again: an answer twice is read once, a request forgotten twice is gone)
        more = _send(ctx, joined.mail, mine, list(along.answers), along.most, joined.hold_ms)
    _go_on(ctx, queue, joined.tenant, joined.mail, mine, more, joined.hold_ms,
           joined.passes_end, joined.carried)


def _delete(ctx: Context, queue: str, tenant: str, entries: Sequence[Entry]) -> list[AckedRow]:
    """One statement and commit for the rows of ``entries``."""
    ids = [i for e in entries for i in e.ids]
    attempts = [a for e in entries for a in e.attempts]
    owners = [tenant] * len(ids)  # (each row's tenant, as leases.ack passes them)
    return batch_rows.finish_plain(ctx, queue, ids, owners, attempts)


def _alone(ctx: Context, queue: str, tenant: str, mine: Entry) -> list[AckedRow]:
    """``mine`` in a statement and commit of its own, less the batch members an earlier
    commit already ended (``_already_ended``)."""
    ctx.ack_commits.alone += 1
    ended = _already_ended(ctx, tenant, mine.ids)
    if ended:
        kept = [n for n, i in enumerate(mine.ids) if i not in ended]
        if not kept:
            return []
        mine = Entry(mine.request, [mine.ids[n] for n in kept],
                     [mine.attempts[n] for n in kept], mine.text)
    return _delete(ctx, queue, tenant, [mine])


def _already_ended(ctx: Context, tenant: str, ids: Sequence[str]) -> set[str]:
    """The batch members among ``ids`` whose places an ack already ended: left out of an
    ack that goes alone, so they are answered not found, as rows an earlier ack deleted
    are. Such an ack is often a retry that the committer set apart from the first
    (``_apart``) and that runs after its commit; the end of a member is an append, which
    does not see an earlier one (architecture.md, *Batch rows*). Free when no id is a
    member's."""
    if not any(batch_member(i) for i in ids):
        return set()
    return ctx.store.members_acked(ids, tenant)


def _let_go(ctx: Context, mail: AckMail, request: str) -> None:
    """Let the pair's lock go if it is ``request``'s, best-effort (lua/ack_pass.lua): after
    a call whose reply never came; the acks it took find their taker gone and go alone."""
    try:
        ctx.warm.ack_answer(mail, request, [], most=0, lock_ms=1, reply_ttl_ms=REPLY_TTL_MS)
    except Exception:  # (Valkey not answering: the lock expires after its time)
        log.warning("letting a pair's committer lock go failed", exc_info=True)


def _rows_of(entry: Entry, deleted: dict[str, AckedRow]) -> list[AckedRow]:
    """The rows of ``entry`` among those deleted, taken out."""
    return [row for row in (deleted.pop(i, None) for i in entry.ids) if row is not None]


def _answer(entry: Entry, deleted: dict[str, AckedRow]) -> bytes:
    """A waiting ack's answer: ``D`` and its rows deleted, ``[[id, group], …]``."""
    return b"D" + orjson.dumps([[r.id, r.grp] for r in _rows_of(entry, deleted)])


def _apart(batch: list[Entry], carried: set[str]) -> tuple[list[Entry], list[Entry]]:
    """(the entries one statement may carry, those naming a task an earlier one names, in
    this batch or in ``carried``, the tasks an earlier pass of this committer carried):
    two acks of one task (a retry, or a late ack of an expired attempt beside the next
    attempt's) each check their own attempt, so the later ones delete alone, after
    (``_alone``, which finds a batch member an earlier pass ended). ``carried`` gains
    the tasks carried (committed, or not when the statement fails: the committer then
    stops)."""
    kept: list[Entry] = []
    alone: list[Entry] = []
    for entry in batch:
        if carried.isdisjoint(entry.ids):
            kept.append(entry)
            carried.update(entry.ids)
        else:
            alone.append(entry)
    return kept, alone


def _first_pass(ctx: Context, queue: str, tenant: str, mail: AckMail, mine: Entry,
                waiting: list[Entry], hold_ms: int, carried: set[str]
                ) -> tuple[list[AckedRow], list[tuple[str, bytes]]]:
    """As the pair's committer: delete ``mine`` and ``waiting`` in one commit; (``mine``'s
    rows deleted, the answers to send). Its statement failing: the waiting acks are
    answered ``E`` (each deletes alone), the lock let go, and the error raised: nothing of
    this ack was committed."""
    batch, alone = _apart([mine, *waiting], carried)
    answers = [(e.request, b"E") for e in alone]
    try:
        rows = _delete(ctx, queue, tenant, batch)
    except BaseException:
        answers += [(e.request, b"E") for e in batch if e is not mine]
        _send(ctx, mail, mine, answers, 0, hold_ms)
        raise
    ctx.ack_commits.commits += 1
    ctx.ack_commits.committed += len(batch)
    deleted = {r.id: r for r in rows}
    own = _rows_of(mine, deleted)
    answers += [(e.request, _answer(e, deleted)) for e in batch if e is not mine]
    return own, answers


def _commit(ctx: Context, queue: str, tenant: str, mail: AckMail, mine: Entry,
            waiting: list[Entry], hold_ms: int) -> list[AckedRow]:
    """As the pair's committer after a wait (``ack_look.lua`` gave it the lock): its first
    pass, its answers sent at once, then the passes for the acks taken meanwhile."""
    ends = time.monotonic() + PASSES_SECONDS
    carried: set[str] = set()
    own, answers = _first_pass(ctx, queue, tenant, mail, mine, waiting, hold_ms, carried)
    more = _send(ctx, mail, mine, answers, MOST_ENTRIES, hold_ms)
    _go_on(ctx, queue, tenant, mail, mine, more, hold_ms, ends, carried)
    return own


def _go_on(ctx: Context, queue: str, tenant: str, mail: AckMail, mine: Entry,
           more: list[str], hold_ms: int, ends: float, carried: set[str]) -> None:
    """The committer's further passes: commit and answer the acks its last pass took, then
    those of the next, ``MOST_PASSES`` times at most and until ``ends`` (its own caller
    waits meanwhile); the last pass lets the lock go. An ack naming a task an earlier pass
    carried (``carried``) is answered ``E`` and deletes alone (``_apart``).

    ===========================  =========================================================
    what fails                   what follows
    ===========================  =========================================================
    a pass's statement           the acks it carried are answered ``E`` (each deletes
                                 alone), the lock let go, logged: this ack's own rows,
                                 committed by its first pass, stay its answer
    sending answers or the pass  logged, the lock let go if Valkey takes it; the acks
                                 answered by no one find their committer gone
                                 (``orphan``)
    ===========================  =========================================================
    """
    passes = 1
    counts = ctx.ack_commits
    while more:
        batch, alone = _apart([Entry.parse(e) for e in more], carried)
        answers = [(e.request, b"E") for e in alone]
        try:
            rows = _delete(ctx, queue, tenant, batch)
        except BaseException:
            _send(ctx, mail, mine, answers + [(e.request, b"E") for e in batch], 0, hold_ms)
            log.warning("a commit of acks gathered for %r failed; they commit alone", queue,
                        exc_info=True)
            return
        counts.commits += 1
        counts.committed += len(batch)
        deleted = {r.id: r for r in rows}
        answers += [(e.request, _answer(e, deleted)) for e in batch]
        go_on = passes < MOST_PASSES and time.monotonic() < ends
        more = _send(ctx, mail, mine, answers, MOST_ENTRIES if go_on else 0, hold_ms)
        passes += 1


def _send(ctx: Context, mail: AckMail, mine: Entry, answers: list[tuple[str, bytes]],
          most: int, hold_ms: int) -> list[str]:
    """The answers sent and the acks taken next (lua/ack_pass.lua); none when the pass did
    not go through (logged, the lock let go if Valkey takes it: the waiting acks then find
    their committer gone and delete alone)."""
    try:
        taken, refused = ctx.warm.ack_answer(mail, mine.request, answers, most=most,
                                             lock_ms=hold_ms, reply_ttl_ms=REPLY_TTL_MS)
    except Exception:  # (the committer's own rows are committed: they stay its answer)
        log.warning("answering the acks gathered for a pair failed", exc_info=True)
        _let_go(ctx, mail, mine.request)
        return []
    if refused:
        log.warning("%d answers to gathered acks were refused by Valkey; those acks delete "
                    "alone", refused)
    return taken


def _wait(ctx: Context, queue: str, tenant: str, mail: AckMail, mine: Entry,
          hold_ms: int) -> list[AckedRow]:
    """As a waiting ack: its answer, or a commit of its own (the module's table); past
    ``WAIT_ALONE_SECONDS`` it deletes alone whatever the mailbox says."""
    give_up = time.monotonic() + WAIT_ALONE_SECONDS
    poll, longest = POLL_SECONDS
    while True:
        try:
            answer = ctx.warm.ack_reply_wait(mail, poll)
            if answer is None:
                if time.monotonic() > give_up:
                    log.warning("an ack of %r waited %.1f s for its committer; it commits "
                                "alone", queue, WAIT_ALONE_SECONDS)
                    return _alone(ctx, queue, tenant, mine)
                poll = min(2 * poll, longest)
                role, got = ctx.warm.ack_look(mail, mine.text, lock_ms=hold_ms,
                                              most=MOST_ENTRIES - 1)
                if role == "wait":
                    continue
                if role == "commit":
                    return _commit(ctx, queue, tenant, mail, mine,
                                   [Entry.parse(e) for e in got], hold_ms)
                if role == "orphan":
                    return _alone(ctx, queue, tenant, mine)
                answer = got[0].encode()
        except (WarmTierUnavailable, WarmTierFull):
            return _alone(ctx, queue, tenant, mine)
        if not answer.startswith(b"D"):
            return _alone(ctx, queue, tenant, mine)
        ctx.ack_commits.answered += 1
        return [AckedRow(i, g) for i, g in orjson.loads(answer[1:])]
