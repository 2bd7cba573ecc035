"""Pydantic models at the edges: what callers send and what tierq returns."""

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
    QueueCounts,
    QueueSettings,
    QueueSettingsUpdate,
    QueueView,
    TenantCounts,
)
from tierq.models.tasks import EnqueueOutcome, TaskIn, TaskView

__all__ = [
    "KEY_PATTERN",
    "NAME_PATTERN",
    "AckItem",
    "AckResult",
    "BackoffSettings",
    "ClaimRequest",
    "ClaimedTask",
    "EnqueueOutcome",
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
    "Rejection",
    "ReleaseItem",
    "ReleaseResult",
    "RunningLease",
    "TaskIn",
    "TaskView",
    "TenantCounts",
    "TenantName",
]
