"""What push delivery did: a batch's counts (:class:`DispatchCounts`), a queue's counters
since its first batch and the tenant its last batch served, both on the queue's own slot."""

from __future__ import annotations

from dataclasses import dataclass, fields

from tierq.logic.context import Context


@dataclass
class DispatchCounts:
    """What dispatching did (a pass's, or since a dispatcher started)."""

    batches: int = 0
    dispatched: int = 0  # tasks handed to a function
    acked: int = 0
    retried: int = 0  # nacked, to run again
    dead: int = 0  # nacked out of attempts
    released: int = 0  # given back without an attempt (throttled, not invoked, oversize)
    throttled: int = 0  # invocations the function's concurrency refused
    consumer_errors: int = 0  # invocations that failed (function error, refused, cut off)

    def add(self, other: DispatchCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def minus(self, other: DispatchCounts) -> DispatchCounts:
        return DispatchCounts(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                                 for f in fields(self)})

    def metrics(self) -> dict[str, int]:
        """The CloudWatch counts of these numbers."""
        return {"Dispatched": self.dispatched, "Throttled": self.throttled,
                "ConsumerErrors": self.consumer_errors}


# What the REST metrics show of a queue's push delivery: counters since the queue's first
# batch, in a hash on the queue's own key (no TTL), written once per batch.
COUNTER_FIELDS = ("batches", "dispatched", "acked", "retried", "dead", "released",
                  "throttled", "consumer_errors")


def counters_key(queue: str) -> str:
    return f"tq:{{{queue}}}:dispatch"


# How long the tenant a queue's last batch served is kept for a new dispatcher to resume
# its turns after (a queue not dispatched for this long starts again at the first name).
TURN_TTL_SECONDS = 86_400


def turn_key(queue: str, shard_tag: int | None = None) -> str:
    """Where the tenant a queue's last batch served is kept, on the queue's own slot; per
    shard (each shard's dispatcher goes round its own tenants)."""
    return f"tq:{{{queue}}}:turn" + ("" if shard_tag is None else f":{shard_tag}")


def record_counts(ctx: Context, queue: str, counts: DispatchCounts, *,
                  turn: str | None = None) -> None:
    """Add a batch's counts to the queue's counters and, with ``turn``, keep the tenant the
    batch served as where a new dispatcher resumes the queue's turns: one round trip."""
    values = {name: getattr(counts, name) for name in COUNTER_FIELDS if getattr(counts, name)}
    if not values and turn is None:
        return
    pipe = ctx.warm.client.pipeline(transaction=False)
    for name, value in values.items():
        pipe.hincrby(counters_key(queue), name, value)
    if turn is not None:
        pipe.set(turn_key(queue, ctx.id_tag), turn, ex=TURN_TTL_SECONDS)
    pipe.execute()


def saved_turn(ctx: Context, queue: str) -> str | None:
    """The tenant the queue's last batch served, as :func:`record_counts` kept it."""
    raw = ctx.warm.client.get(turn_key(queue, ctx.id_tag))
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def read_counts(ctx: Context, queue: str) -> DispatchCounts:
    """The counters of a queue's push delivery (zeros for a queue never dispatched)."""
    raw = ctx.warm.client.hgetall(counters_key(queue))
    values = {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}
    return DispatchCounts(**{name: values.get(name, 0) for name in COUNTER_FIELDS})

