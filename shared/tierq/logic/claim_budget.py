"""The budget of one claim: the bytes its answer may carry and the instant it must answer by.

A claim never holds leases it will not answer with. ``max_bytes`` sizes the tasks as the
response carries them (``tierq.core.sizing.body_cost`` of their JSON); the warm tier puts
back what is past it, and the first task always comes. ``answer_by`` (a ``time.monotonic()``
instant) is when the claim must return: no pop starts at or after it, and no inline refill
starts that could end after it (:meth:`ClaimBudget.may_refill`).

| state                    | ``remaining_bytes()``   | ``exhausted`` | ``expired()``            |
| ------------------------ | ----------------------- | ------------- | ------------------------ |
| no byte cap (``0``)      | 0 (no cap)              | never         | as ``answer_by`` says    |
| cap, room left           | what is left            | no            | as ``answer_by`` says    |
| cap, used up             | 1 (strict: none fits)   | yes           | as ``answer_by`` says    |
| no ``answer_by``         | as above                | as above      | never                    |
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from tierq.config import Settings
from tierq.core.ids import new_token_prefix
from tierq.core.sizing import body_cost

# A claim with a time limit (the platform's cut-off less the time its caller needs to send
# the answer, see aws/http/routes/claims.py) starts an inline refill only while the refill
# can end in time. A refill may wait the pool timeout (TIERQ_DB_POOL_TIMEOUT) for a
# connection, then run its statements: REFILL_WORK_ALLOWANCE seconds for one promotion
# batch (whose row locks it waits 200 ms for at most) and its pushes. While the claim holds
# popped tasks, the statement timeout (TIERQ_STATEMENT_TIMEOUT_MS) bounds them instead. A
# refill skipped so is done by the scheduled cold -> warm mover.
REFILL_WORK_ALLOWANCE = 2.0
# the longest queue or tenant name (models.names.NAME_PATTERN)
LONGEST_NAME = 64


def _task_fields_cost() -> int:
    """What a claimed task costs in a response beyond its blob's JSON text.

    The blob holds its payload and key (lua/claim.lua). The other fields are counted at
    their longest (names of 64 characters, a lease token with 20-digit numbers,
    40-character timestamps, 20-digit numbers), as the runtime sends them (body_cost), with
    the comma between two tasks.
    """
    name = "n" * LONGEST_NAME
    number = -(2**63)
    longest = {
        "id": "00000000-0000-0000-0000-000000000000",
        "queue": name,
        "tenant": name,
        "key": None,  # the key's JSON text is in the blob
        "priority": number,
        "payload": None,  # so is the payload's
        "attempt": number,
        "max_attempts": number,
        "lease_token": f"{new_token_prefix(name)}{number}~{number}",
        "lease_expires_at": "0" * 40,
        "redelivered": False,
        "enqueued_at": "0" * 40,
        "parents": None,  # a released task's are in its blob ("pa": logic/flows.py)
        "group": None,  # so is a grouped task's group ("g": logic/groups.py)
        "timeout_seconds": number,  # its queue's, when the blob has none ("to")
    }
    # a traced task's trace context is in its blob as "tr" and answered as "trace": three
    # more bytes (a task without one answers no trace at all)
    trace_key = len('"trace"') - len('"tr"')
    return body_cost(orjson.dumps(longest)) + 1 + trace_key


# Per task, on top of its blob's JSON text (see _task_fields_cost).
TASK_FIELDS_COST = _task_fields_cost()


@dataclass
class ClaimBudget:
    """What is left of one claim's bytes and time (see the module's documentation)."""

    max_bytes: int = 0  # 0: no cap
    answer_by: float | None = None  # time.monotonic(): no pop at or after it
    used_bytes: int = 0

    @property
    def exhausted(self) -> bool:
        """Whether the byte cap is used up."""
        return self.max_bytes > 0 and self.used_bytes >= self.max_bytes

    @property
    def per_task_bytes(self) -> int:
        """What each task costs beyond its blob (0 without a byte cap)."""
        return TASK_FIELDS_COST if self.max_bytes else 0

    def remaining_bytes(self) -> int:
        """The byte budget of the next pop: 0 for no cap, else at least 1."""
        return 0 if self.max_bytes == 0 else max(1, self.max_bytes - self.used_bytes)

    def charge(self, blobs: Iterable[bytes]) -> None:
        """Count the popped tasks' blobs (and their other fields) against the byte cap."""
        if self.max_bytes:
            for blob in blobs:
                self.used_bytes += body_cost(blob) + TASK_FIELDS_COST

    def time_left(self) -> float:
        """Seconds until ``answer_by`` (infinite without one)."""
        return math.inf if self.answer_by is None else self.answer_by - time.monotonic()

    def expired(self) -> bool:
        """Whether the claim must answer now: no further pop."""
        return self.time_left() <= 0

    def may_refill(self, settings: Settings, *, holding: bool) -> bool:
        """Whether an inline refill started now ends before ``answer_by``.

        It may wait the pool timeout for a connection, then runs its statements. While it
        holds popped tasks, it must end in time whatever PostgreSQL does: the statement
        timeout, which PostgreSQL enforces, bounds its long statement. Holding none,
        REFILL_WORK_ALLOWANCE will do: should it overrun, nothing is stranded, as no pop
        follows a refill once the time is up.
        """
        if self.answer_by is None:
            return True
        work = REFILL_WORK_ALLOWANCE
        if holding:
            if not settings.statement_timeout_ms:
                return False  # no bound on the statements
            work = max(work, settings.statement_timeout_ms / 1000)
        return self.time_left() > settings.db_pool_timeout + work
