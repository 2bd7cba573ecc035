"""Pydantic models at the edges: what callers send and what tierq returns.

Each model is imported from its module on first use (``from tierq.models import TaskIn``
imports ``tierq.models.tasks`` only): the enqueue function never imports the lease models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierq.models.leases import (
        AckItem,
        AckResult,
        ClaimedTask,
        ClaimRequest,
        HeartbeatItem,
        HeartbeatResult,
        LeaseExtended,
        NackItem,
        NackResult,
        Rejection,
        ReleaseItem,
        ReleaseResult,
        RunningLease,
    )
    from tierq.models.names import KEY_PATTERN, NAME_PATTERN, QueueName, TenantName
    from tierq.models.queues import (
        BackoffSettings,
        ConsumerSettings,
        QueueCounts,
        QueueSettings,
        QueueSettingsUpdate,
        QueueView,
        RateLimit,
        TenantCounts,
        TenantQueueView,
        WorkerSettings,
    )
    from tierq.models.tasks import Enqueued, EnqueueOutcome, TaskIn, TaskView

# Each name and the module that defines it.
_MODULES = {
    "AckItem": "tierq.models.leases",
    "AckResult": "tierq.models.leases",
    "ClaimedTask": "tierq.models.leases",
    "ClaimRequest": "tierq.models.leases",
    "HeartbeatItem": "tierq.models.leases",
    "HeartbeatResult": "tierq.models.leases",
    "LeaseExtended": "tierq.models.leases",
    "NackItem": "tierq.models.leases",
    "NackResult": "tierq.models.leases",
    "Rejection": "tierq.models.leases",
    "ReleaseItem": "tierq.models.leases",
    "ReleaseResult": "tierq.models.leases",
    "RunningLease": "tierq.models.leases",
    "KEY_PATTERN": "tierq.models.names",
    "NAME_PATTERN": "tierq.models.names",
    "QueueName": "tierq.models.names",
    "TenantName": "tierq.models.names",
    "BackoffSettings": "tierq.models.queues",
    "ConsumerSettings": "tierq.models.queues",
    "QueueCounts": "tierq.models.queues",
    "QueueSettings": "tierq.models.queues",
    "QueueSettingsUpdate": "tierq.models.queues",
    "QueueView": "tierq.models.queues",
    "RateLimit": "tierq.models.queues",
    "TenantCounts": "tierq.models.queues",
    "TenantQueueView": "tierq.models.queues",
    "WorkerSettings": "tierq.models.queues",
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
