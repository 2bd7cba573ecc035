"""Settling a batch: the function's outcome turned into acks, nacks and releases of its
tasks (the table of :mod:`tierq.logic.dispatch`).

Records a valid response reports are read per group, as a FIFO queue's consumer writes them
(Powertools' ``SqsFifoPartialProcessor`` reports the record that failed and every later one,
or only its group's later ones): a group's first reported record is nacked (an attempt
counted), its later reported records were never run, so they are released (no attempt,
their places kept) and the group's order holds on redelivery. A reported record without a
group is nacked."""

from __future__ import annotations

from collections.abc import Sequence

from tierq.logic import leases
from tierq.logic.context import Context
from tierq.logic.dispatch.counters import DispatchCounts
from tierq.logic.dispatch.events import in_group_order, read_response
from tierq.logic.dispatch.invocation import Consumer, Invocation, safe_name
from tierq.models.lease_outcomes import NackItem, ReleaseItem
from tierq.models.leases import ClaimedTask

# What settle writes as last_error (see the module's documentation).
ITEM_FAILURE = "batch_item_failure"
INVALID_RESPONSE = "invalid_batch_response"
FUNCTION_ERROR = "function_error"
INVOKE_FAILED = "invoke_failed"


def _nack_all(ctx: Context, queue: str, tasks: Sequence[ClaimedTask], error: str,
              counts: DispatchCounts, *, may_run_on: bool = False) -> None:
    """Nack ``tasks``. ``may_run_on``: the invocation may still be running (its outcome is
    unknown), so each task runs again no sooner than its lease would have ended (which
    covers the function's timeout), nor sooner than the queue's backoff says."""
    if not tasks:
        return
    retry_in: list[float | None] = [None] * len(tasks)
    if may_run_on:
        now = ctx.now()
        policy = ctx.queue_settings.get(queue).backoff.policy()
        retry_in = [max(policy.delay(t.attempt), t.lease_expires_at.timestamp() - now, 0.0)
                    for t in tasks]
    result = leases.nack(ctx, queue, [
        NackItem(id=t.id, lease_token=t.lease_token, error=error, retry_in_seconds=delay)
        for t, delay in zip(tasks, retry_in, strict=True)])
    counts.retried += len(result.retried)
    counts.dead += len(result.dead)


def release_tasks(ctx: Context, queue: str, tasks: Sequence[ClaimedTask],
                  counts: DispatchCounts) -> None:
    if not tasks:
        return
    result = leases.release(ctx, queue, [ReleaseItem(id=t.id, lease_token=t.lease_token)
                                         for t in tasks])
    counts.released += len(result.released)


def settle(ctx: Context, consumer: Consumer, tasks: Sequence[ClaimedTask],
           invocation: Invocation) -> DispatchCounts:
    """Record the outcome of one invocation (see the module's documentation)."""
    counts = DispatchCounts()
    queue = consumer.queue
    if invocation.outcome == "throttled":
        counts.throttled += 1
        release_tasks(ctx, queue, tasks, counts)
        return counts
    if invocation.outcome == "not_invoked":
        counts.consumer_errors += 1
        release_tasks(ctx, queue, tasks, counts)
        return counts
    counts.dispatched += len(tasks)
    if invocation.outcome == "function_error":
        counts.consumer_errors += 1
        _nack_all(ctx, queue, tasks,
                  f"{FUNCTION_ERROR}: {safe_name(invocation.error, 'Unhandled')}", counts)
        return counts
    if invocation.outcome != "ok":  # failed: the outcome is unknown
        counts.consumer_errors += 1
        _nack_all(ctx, queue, tasks,
                  f"{INVOKE_FAILED}: {safe_name(invocation.error, 'Unknown')}", counts,
                  may_run_on=True)
        return counts
    failed, invalid = read_response(invocation.payload, [str(t.id) for t in tasks])
    done = [t for t in tasks if str(t.id) not in failed]
    if done:
        counts.acked += len(leases.ack(ctx, queue, done).acked)
    reported = [t for t in tasks if str(t.id) in failed]
    if invalid:
        _nack_all(ctx, queue, reported, INVALID_RESPONSE, counts)
        return counts
    retried, given_back = split_reported(reported)
    # (the group's later tasks go back to their places before its failed one is retried,
    # so no claim between the two finds the retry ready without them)
    release_tasks(ctx, queue, given_back, counts)
    _nack_all(ctx, queue, retried, ITEM_FAILURE, counts)
    return counts


def split_reported(reported: Sequence[ClaimedTask]) -> tuple[list[ClaimedTask],
                                                              list[ClaimedTask]]:
    """The reported tasks to nack (each group's first by seq, and those without a group)
    and those to release (each group's later ones), in group order."""
    retried: list[ClaimedTask] = []
    given_back: list[ClaimedTask] = []
    seen: set[str] = set()
    for task in in_group_order(reported):
        if task.group is None:
            retried.append(task)
        elif task.group in seen:
            given_back.append(task)
        else:
            seen.add(task.group)
            retried.append(task)
    return retried, given_back

