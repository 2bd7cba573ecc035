"""Push delivery: the dispatcher claims batches of the queues that name a consumer function
and calls it synchronously with an event shaped exactly like Amazon SQS's, so that a function
written for an SQS event source (Powertools' ``BatchProcessor(EventType.SQS)`` with
``process_partial_response``, its parser's ``SqsRecordModel``) runs unchanged.

The records are built by :mod:`tierq.logic.dispatch.events`.

| module                                     | concern                                        |
| ------------------------------------------ | ---------------------------------------------- |
| :mod:`tierq.logic.dispatch.events`         | the SQS event and the partial batch response   |
| :mod:`tierq.logic.dispatch.allow_list`     | which functions may be consumers               |
| :mod:`tierq.logic.dispatch.invocation`     | calling a function, its slots, its consumer    |
| :mod:`tierq.logic.dispatch.counters`       | what dispatching did, per queue                |
| :mod:`tierq.logic.dispatch.settle`         | acks, nacks and releases after an invocation   |
| :mod:`tierq.logic.dispatch.shares`         | the queues' and the tenants' fair shares       |
| :mod:`tierq.logic.dispatch.loop`           | the dispatcher: turns, widths, backoff         |

The dispatcher is given its consumer functions (the context's ``consumers``, set by the
entry point that builds the engine: tierq.aws.consumers on AWS, tierq.local.consumers
locally); nothing in this package is set process-wide.

A batch holds the tasks of one tenant (:meth:`Dispatcher._claim`): whatever a function does
with one tenant's records — raise with a record quoted in its message, time out — lands on
that tenant's tasks only. Each batch takes the next tenant with ready work in turn (round
robin over a window of the queue's ready-tenant index, :func:`tierq.logic.ready_tenants.
tenants_after`, by name after the tenant whose turn came last), so a tenant with a large
backlog gets one batch per turn like a tenant with one task, and a batch tries at most
``ready_tenants.DISPATCH_WINDOW`` tenants, however many the queue has registered (a tenant
found without work leaves the index). A tenant with nothing to claim, whose cold work finds
no room warm, or whose pair fails (its Valkey master not answering) passes its turn on; the
batch fails only when every listed tenant failed.

How many batches of a queue run at once follows the batches that find work, never the
length of the tenants' list (which may name tenants with nothing ready): a claim that got
tasks while more is likely ready (a full batch, other tenants listed) lets one more batch
start at once; an empty batch halves that number and backs the queue off only when no other
batch of it holds tasks. ``max_concurrency``, the queue's share of the dispatcher's threads
and its tenants' shares bound it.

Turns alone are not fair to slow invocations: a batch holds its slot until it is settled,
so a tenant whose invocations are slow comes to hold every slot of its queue (each of its
turns starts one more batch, which outlives the others'), and a queue without
``max_concurrency`` every thread of the dispatcher. Shares bound what a batch may start
(:mod:`tierq.logic.dispatch.shares`):

- A queue starts batches while it runs fewer than its share of the dispatcher's threads
  (``max_in_flight``), split max-min fairly (:func:`queue_shares`) among the queues with
  batches running (each counted for those) and the queues due to start some (each for its
  width, at most its cap): a queue that needs less leaves the rest to the others, and a
  queue alone may use every thread.
- A batch claims for a tenant only while the dispatcher's batches of that tenant (claiming
  or running: ``QueueState.running``) are fewer than its share of the queue's limit (its
  ``max_concurrency`` and its share of the threads): the limit over the tenants listed
  with ready work and those with batches running, rounded up, at least 1
  (:func:`tenant_share`). A tenant at its share passes its turn, unless no tenant under
  its share gives tasks: then the tenants at their share are tried in the same order, so
  a share binds only while another tenant gets work, and a part a tenant cannot use (its
  batch runs with nothing more ready; it cannot claim: warm tier full, master down, its
  own limits) goes to those that can. A tenant alone may use the whole limit.

A share never stops a batch that runs: work arriving beside slow batches gets its share as
they end, within one slow invocation.

Where the turns stand, and what that does not cover:

- The turn is taken when a batch starts claiming (so concurrent batches take successive
  tenants): a tenant that passes, fails or finds the warm tier full has had its turn.
- The dispatcher keeps the turn in its memory; the tenant each batch that got tasks served
  is also kept on the queue's own slot (``tq:{queue}:turn``, per shard, a day's TTL), read
  once by a new dispatcher (a fresh Lambda environment) to resume after it.
- Two dispatchers running at once (an invocation outliving the minute overlaps the next)
  each go round on their own: a tenant may get a batch from each in one turn.
- On a sharded deployment each shard's dispatcher goes round the tenants of its own shard,
  while ``max_concurrency`` is shared: turns are fair among a shard's tenants, and a shard's
  share of the queue's slots does not follow how many tenants it holds.
- A tenant's share counts one dispatcher's batches (in its memory: no round trip): two
  dispatchers running at once may each give a tenant its share, and a shard's dispatcher
  splits ``max_concurrency`` among its own shard's tenants, so a slow tenant alone on its
  shard may hold every slot of the queue while another shard's tenants wait; the slots in
  Valkey (:class:`InvocationSlots`) still bound the queue as a whole.
- The tenants counted are those of the batch's window (``DISPATCH_WINDOW``) and those
  running: a queue with more tenants ready shares as if it had that many. A tenant listed
  without ready work (the index lags) costs the others nothing: its part is lent.

The message of a failed invocation (the function's error message, the AWS SDK's) goes to the
dispatcher's log with the queue, the tenant and the function (:meth:`Dispatcher._log_outcome`),
never to the tasks.

The outcome (:func:`settle`), as for an SQS event source with ``ReportBatchItemFailures``,
and what each writes as the tasks' ``last_error``: only a code and a name, never a message
of the function or of the AWS SDK (those quote records, endpoints, ARNs, account ids):

=================================  ==============================  ===========================
outcome                            the tasks                       their ``last_error``
=================================  ==============================  ===========================
named in ``batchItemFailures``     nacked (backoff, max_attempts)  ``batch_item_failure``
not named (a valid response)       acked                           —
response not JSON, or naming an    all nacked                      ``invalid_batch_response``
item not in the batch, or none
function error (raised, timed      all nacked                      ``function_error: <type>``
out, ran out of memory)
outcome unknown (a 500, a read     all nacked, to run no sooner    ``invoke_failed: <name>``
timeout, a connection cut off)     than their lease's end
throttled                          released (no attempt); the      —
                                   queue backs off
refused before it ran (no such     released (no attempt); backs    —
function, access denied)           off longer
=================================  ==============================  ===========================

``<type>`` is Lambda's error type (the payload's ``errorType``, else the
``X-Amz-Function-Error`` header's ``Unhandled``) and ``<name>`` the AWS error code or the
botocore exception's class (``ServiceException``, ``ReadTimeoutError``), each kept only when
it is a plain name (:func:`safe_name`). Every ``last_error`` is at most 2 KiB
(:func:`tierq.logic.leases.clip_error`).

A batch holds at most ``batch_size`` tasks and at most what a synchronous invoke's request
may carry (6 MB): the claim is given a byte budget that leaves room for the records' fields
(:data:`RECORD_FIELDS_COST` each), and a batch that still came out larger gives its tail
back. Its lease covers the batching window, the function's timeout and the time to settle
(:meth:`Consumer.lease_seconds`), so no task is handed out twice while its invocation can
still be running; the invoke's read timeout is past the function's timeout and the SDK
makes one attempt only (tierq.aws.consumers).

``max_concurrency`` bounds the invocations running at once for a queue across every
dispatcher, through the limits of :mod:`tierq.logic.limits` (:class:`InvocationSlots`: the
queue's pool ``invocations``, reservations scored by their deadline on the queue's own
key, so a slot of a dispatcher that died frees itself when its lease would have expired):
each batch takes a slot before it claims, and gives it back once settled.

How the dispatcher is run (a scheduled function woken by ready work) is in
:mod:`tierq.maintenance.dispatcher` and :mod:`tierq.logic.wake`.
"""

from tierq.logic.dispatch.allow_list import (
    AllowList,
    ConsumerNotAllowed,
    allow_list,
    check_consumer,
    invalid_function,
)
from tierq.logic.dispatch.counters import (
    COUNTER_FIELDS,
    TURN_TTL_SECONDS,
    DispatchCounts,
    counters_key,
    read_counts,
    record_counts,
    saved_turn,
    turn_key,
)
from tierq.logic.dispatch.events import (
    DEFAULT_ACCOUNT,
    DEFAULT_REGION,
    EVENT_ENVELOPE,
    EVENT_LIMIT,
    RECORD_FIELDS_COST,
    claim_budget,
    event_source_arn,
    in_group_order,
    md5_of_message_attributes,
    read_response,
    sequence_number,
    sqs_event,
    sqs_record,
)
from tierq.logic.dispatch.invocation import (
    INVOCATIONS_POOL,
    Consumer,
    ConsumerFunctions,
    Invocation,
    InvocationSlots,
    Outcome,
    function_error_message,
    function_error_type,
    safe_name,
)
from tierq.logic.dispatch.loop import (
    DISPATCHER_WORKER,
    POLL_FIRST,
    CountsSink,
    Dispatcher,
    QueueState,
)
from tierq.logic.dispatch.settle import (
    FUNCTION_ERROR,
    INVALID_RESPONSE,
    INVOKE_FAILED,
    ITEM_FAILURE,
    release_tasks,
    settle,
    split_reported,
)
from tierq.logic.dispatch.shares import queue_shares, tenant_share

__all__ = [
    "COUNTER_FIELDS", "DEFAULT_ACCOUNT", "DEFAULT_REGION", "DISPATCHER_WORKER",
    "EVENT_ENVELOPE", "EVENT_LIMIT", "FUNCTION_ERROR", "INVALID_RESPONSE", "INVOCATIONS_POOL",
    "INVOKE_FAILED", "ITEM_FAILURE", "POLL_FIRST", "RECORD_FIELDS_COST", "TURN_TTL_SECONDS",
    "AllowList", "Consumer", "ConsumerFunctions", "ConsumerNotAllowed", "CountsSink",
    "DispatchCounts", "Dispatcher", "Invocation", "InvocationSlots", "Outcome", "QueueState",
    "allow_list", "check_consumer", "claim_budget", "counters_key", "event_source_arn",
    "function_error_message", "function_error_type", "in_group_order", "invalid_function",
    "md5_of_message_attributes", "queue_shares", "read_counts", "read_response",
    "record_counts", "release_tasks", "safe_name", "saved_turn", "sequence_number", "settle",
    "split_reported", "sqs_event", "sqs_record", "tenant_share", "turn_key",
]
