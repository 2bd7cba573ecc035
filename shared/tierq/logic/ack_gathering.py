"""Acks of one (queue, tenant) committed together (``TIERQ_ACK_GROUP_COMMIT``): the deletes
of acks that arrive while another's commit is under way go into PostgreSQL in one statement
and one commit, so workers that ack in small batches cost the database fewer commits.

Each ack has checked its leases already (logic/leases.py ``verify``) and drops them itself
after its delete is committed, as it does alone: only the delete is gathered, and the answer
200 still comes after its commit. The gathering lives on the pair's slot (lua/ack_gather.lua,
lua/ack_pass.lua; ``AckMail``): acks of different tenants never share a mailbox, a lock or a
commit, and a shard's acks have a mailbox of their own.

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
                                             again every ``POLL_SECONDS``
its committer's delete failed                (answer ``E``) deletes its own rows alone
the lock went with the ack still in line     takes the lock and commits as above
the lock went, the ack taken, no answer      its committer stopped (its lock expired after
(``orphan``)                                 ``lock_ms``): deletes its own rows alone
Valkey refuses or does not answer            deletes its own rows alone
===========================================  ===============================================

An ack that deletes alone after its committer stopped may find its rows gone (that commit
went through before the committer stopped): they are answered as ``not_found`` rejections,
and the group they held is released by the reaper's pass over held groups; every other
answer is the one the ack would have had alone. The rows deleted are those ``ack_delete``
deletes (warm, of the attempt leased, no waiter), each ack's own ids and attempts checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from tierq.dal.store.rows import AckedRow
from tierq.dal.warm_tier import AckMail
from tierq.errors import WarmTierFull, WarmTierUnavailable
from tierq.logic.context import Context

# Acks one commit carries at most: its own and those it takes from the mailbox.
MOST_ENTRIES = 32
# How often a waiting ack looks at the mailbox again without an answer, seconds (its
# committer may have stopped, or let the lock go while the ack was still in line).
POLL_SECONDS = 0.05
# Commits a committer makes for acks that came during its own before it lets the lock go:
# its own caller waits meanwhile.
MOST_PASSES = 3
# How long an answer waits for its ack in Valkey, ms (an ack gone meanwhile never reads it).
REPLY_TTL_MS = 60_000


@dataclass(frozen=True, slots=True)
class Entry:
    """One ack's delete as its mailbox holds it: ``<request> <ids> <attempts>``."""

    request: str
    ids: list[str]
    attempts: list[int]

    @property
    def text(self) -> str:
        return f"{self.request} {','.join(self.ids)} {','.join(map(str, self.attempts))}"

    @classmethod
    def parse(cls, text: str) -> Entry:
        request, ids, attempts = text.split(" ")
        return cls(request, ids.split(","), [int(a) for a in attempts.split(",")])


def lock_ms(ctx: Context) -> int:
    """How long a committer's lock lasts without its passes: past its statement's timeout,
    so that only a committer that stopped loses it."""
    return max(5_000, ctx.settings.statement_timeout_ms + 5_000)


def delete_acked(ctx: Context, queue: str, tenant: str, ids: Sequence[str],
                 attempts: Sequence[int]) -> list[AckedRow]:
    """The rows of ``tenant``'s acked tasks ``ids`` (each leased at its attempt) deleted and
    committed, together with other acks of the pair where they meet (the module's table)."""
    mine = Entry(os.urandom(8).hex(), list(ids), list(attempts))
    mail = AckMail.of(queue, tenant, ctx.id_tag, mine.request)
    hold_ms = lock_ms(ctx)
    try:
        role, entries = ctx.warm.ack_gather(mail, mine.text, lock_ms=hold_ms,
                                            most=MOST_ENTRIES - 1, mode="join")
    except (WarmTierUnavailable, WarmTierFull):
        return _alone(ctx, queue, tenant, mine)
    if role == "commit":
        return _commit(ctx, queue, tenant, mail, mine, [Entry.parse(e) for e in entries],
                       hold_ms)
    return _wait(ctx, queue, tenant, mail, mine, hold_ms)


def _delete(ctx: Context, queue: str, tenant: str, entries: Sequence[Entry]) -> list[AckedRow]:
    """One statement and commit for the rows of ``entries``."""
    ids = [i for e in entries for i in e.ids]
    attempts = [a for e in entries for a in e.attempts]
    if min(attempts) == max(attempts):
        return ctx.store.ack_delete(queue, ids, [tenant], attempts[0])
    return ctx.store.ack_delete_by_attempt(queue, ids, [tenant] * len(ids), attempts)


def _alone(ctx: Context, queue: str, tenant: str, mine: Entry) -> list[AckedRow]:
    ctx.ack_commits.alone += 1
    return _delete(ctx, queue, tenant, [mine])


def _answer(entry: Entry, deleted: dict[str, AckedRow]) -> bytes:
    """A waiting ack's answer: ``D`` and its rows deleted, ``[[id, group], …]``."""
    return b"D" + orjson.dumps([[i, deleted[i].grp] for i in entry.ids if i in deleted])


def _commit(ctx: Context, queue: str, tenant: str, mail: AckMail, mine: Entry,
            waiting: list[Entry], hold_ms: int) -> list[AckedRow]:
    """As the pair's committer: delete ``mine`` and ``waiting`` in one commit, answer the
    waiting acks, go on with those that came meanwhile; ``mine``'s rows deleted."""
    own: list[AckedRow] = []
    batch = [mine, *waiting]
    passes = 0
    counts = ctx.ack_commits
    while True:
        try:
            rows = _delete(ctx, queue, tenant, batch)
        except BaseException:
            # (each waiting ack deletes its rows alone: its own error, if any, is its answer)
            _send(ctx, mail, mine, [(e.request, b"E") for e in waiting], 0, hold_ms)
            raise
        counts.commits += 1
        counts.committed += len(batch)
        deleted = {r.id: r for r in rows}
        if passes == 0:
            own = [deleted[i] for i in mine.ids if i in deleted]
        more = _send(ctx, mail, mine, [(e.request, _answer(e, deleted)) for e in waiting],
                     MOST_ENTRIES if passes < MOST_PASSES else 0, hold_ms)
        if not more:
            return own
        waiting = batch = [Entry.parse(e) for e in more]
        passes += 1


def _send(ctx: Context, mail: AckMail, mine: Entry, answers: list[tuple[str, bytes]],
          most: int, hold_ms: int) -> list[str]:
    """The answers sent and the acks taken next (lua/ack_pass.lua); none when Valkey did not
    answer (the waiting acks then find their committer gone and delete alone)."""
    try:
        return ctx.warm.ack_answer(mail, mine.text, answers, most=most, lock_ms=hold_ms,
                                   reply_ttl_ms=REPLY_TTL_MS)
    except (WarmTierUnavailable, WarmTierFull):
        return []


def _wait(ctx: Context, queue: str, tenant: str, mail: AckMail, mine: Entry,
          hold_ms: int) -> list[AckedRow]:
    """As a waiting ack: its answer, or a commit of its own (the module's table)."""
    while True:
        try:
            answer = ctx.warm.ack_reply_wait(mail, POLL_SECONDS)
            if answer is None:
                role, got = ctx.warm.ack_gather(mail, mine.text, lock_ms=hold_ms,
                                                most=MOST_ENTRIES - 1, mode="look")
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
