"""Every task PostgreSQL holds, whichever way the engine stored it: a SQL relation for
tests that count or read tasks by SQL.

| where the task is                                | what the relation gives            |
| ------------------------------------------------ | ---------------------------------- |
| a row of ``tierq_tasks``                         | the row                            |
| a member still in its batch row (``TIERQ_BATCH_ROWS``) | state ``warm``, read by place |
| a member ended or moved out (an end names its place) | nothing (a moved one is a row) |

A member's id is its batch's key with its place written in, as ``tierq.core.batch_ids``
makes it; its tenant, seq and payload are read by place, as migration 0030's functions
read them.
"""

from __future__ import annotations

# (id, queue, tenant, state, seq, payload) of every task; use it as a FROM item
EVERY_TASK = """(
    SELECT id, queue, tenant, state::text AS state, seq, payload FROM tierq_tasks
    UNION ALL
    SELECT overlay(b.id::text PLACING lpad(to_hex(p), 3, '0') FROM 30 FOR 3)::uuid, b.queue,
           tierq_batch_tenant(b.tenant_names, b.tenant_of, p), 'warm',
           tierq_batch_seq(b.first_seq, b.seq_offsets, p), b.payloads -> p
    FROM tierq_batches b, generate_series(0, b.tasks - 1) AS p
    WHERE NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                      WHERE e.batch = b.id AND p = ANY(e.places))
) AS every_task"""
