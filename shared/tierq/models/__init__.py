"""Pydantic models at the edges: what callers send and what tierq returns.

Each model is imported from its module on first use (``from tierq.models import TaskIn``
imports ``tierq.models.tasks`` only): the enqueue function never imports the lease models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierq.models.heartbeats import HeartbeatItem, HeartbeatResult, LeaseExtended
    from tierq.models.lease_outcomes import (
        AckItem,
        AckResult,
        NackItem,
        NackResult,
        Rejection,
        ReleaseItem,
        ReleaseResult,
    )
    from tierq.models.leases import ClaimedTask, ClaimRequest
    from tierq.models.names import KEY_PATTERN, NAME_PATTERN, QueueName, TenantName
    from tierq.models.queue_update import QueueSettingsUpdate
    from tierq.models.queue_views import (
        QueueCounts,
        QueueView,
        TenantCounts,
        TenantQueueView,
        WorkerSettings,
    )
    from tierq.models.queues import (
        BackoffSettings,
        ConsumerSettings,
        QueueSettings,
        RateLimit,
    )
    from tierq.models.running import RunningLease
    from tierq.models.tasks import Enqueued, EnqueueOutcome, TaskIn, TaskView

# Each name and the module that defines it.
_MODULES = {
    "AckItem": "tierq.models.lease_outcomes",
    "AckResult": "tierq.models.lease_outcomes",
    "ClaimedTask": "tierq.models.leases",
    "ClaimRequest": "tierq.models.leases",
    "HeartbeatItem": "tierq.models.heartbeats",
    "HeartbeatResult": "tierq.models.heartbeats",
    "LeaseExtended": "tierq.models.heartbeats",
    "NackItem": "tierq.models.lease_outcomes",
    "NackResult": "tierq.models.lease_outcomes",
    "Rejection": "tierq.models.lease_outcomes",
    "ReleaseItem": "tierq.models.lease_outcomes",
    "ReleaseResult": "tierq.models.lease_outcomes",
    "RunningLease": "tierq.models.running",
    "KEY_PATTERN": "tierq.models.names",
    "NAME_PATTERN": "tierq.models.names",
    "QueueName": "tierq.models.names",
    "TenantName": "tierq.models.names",
    "BackoffSettings": "tierq.models.queues",
    "ConsumerSettings": "tierq.models.queues",
    "QueueCounts": "tierq.models.queue_views",
    "QueueSettings": "tierq.models.queues",
    "QueueSettingsUpdate": "tierq.models.queue_update",
    "QueueView": "tierq.models.queue_views",
    "RateLimit": "tierq.models.queues",
    "TenantCounts": "tierq.models.queue_views",
    "TenantQueueView": "tierq.models.queue_views",
    "WorkerSettings": "tierq.models.queue_views",
    "Enqueued": "tierq.models.tasks",
    "EnqueueOutcome": "tierq.models.tasks",
    "TaskIn": "tierq.models.tasks",
    "TaskView": "tierq.models.tasks",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'tierq.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next read finds it without this function
    return value

__all__ = [
    "KEY_PATTERN",
    "NAME_PATTERN",
    "AckItem",
    "AckResult",
    "BackoffSettings",
    "ClaimRequest",
    "ClaimedTask",
    "ConsumerSettings",
    "EnqueueOutcome",
    "Enqueued",
    "HeartbeatItem",
    "HeartbeatResult",
    "LeaseExtended",
    "NackItem",
    "NackResult",
    "QueueCounts",
    "QueueName",
    "QueueSettings",
    "QueueSettingsUpdate",
    "QueueView",
    "RateLimit",
    "Rejection",
    "ReleaseItem",
    "ReleaseResult",
    "RunningLease",
    "TaskIn",
    "TaskView",
    "TenantCounts",
    "TenantName",
    "TenantQueueView",
    "WorkerSettings",
]
