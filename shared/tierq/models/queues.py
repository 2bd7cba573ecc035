"""Per-queue settings, counts and views."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tierq.core.backoff import BackoffPolicy
from tierq.models.strict import RequestModel

# warm_max_bytes: from 1 KiB (tests, tiny queues) to 1 TiB
WARM_MAX_BYTES_MIN = 1024
WARM_MAX_BYTES_MAX = 1 << 40


class BackoffSettings(RequestModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["fixed", "linear", "exponential"] = "exponential"
    base_seconds: float = Field(default=2.0, ge=0, le=86_400)
    cap_seconds: float = Field(default=3600.0, ge=0, le=366 * 86_400)
    jitter: float = Field(default=0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> BackoffSettings:
        if self.cap_seconds < self.base_seconds:
            raise ValueError("cap_seconds must be >= base_seconds")
        return self

    def policy(self) -> BackoffPolicy:
        return BackoffPolicy(self.kind, self.base_seconds, self.cap_seconds, self.jitter)


class QueueSettings(BaseModel):
    """A queue's effective settings (stored values over the deployment defaults)."""

    warm_max: int = Field(ge=1, le=1_000_000)
    # (a default, so that a client still reads the settings of a server without it)
    warm_max_bytes: int = Field(default=64 * 1024 * 1024, ge=WARM_MAX_BYTES_MIN,
                                le=WARM_MAX_BYTES_MAX)
    lease_seconds: int = Field(ge=1, le=43_200)
    max_attempts: int = Field(ge=1, le=1000)
    backoff: BackoffSettings
    retention_seconds: int = Field(ge=0, le=10 * 366 * 86_400)
    paused: bool = False


class QueueSettingsUpdate(RequestModel):
    """PUT /v1/queues/{queue}: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    warm_max: int | None = Field(default=None, ge=1, le=1_000_000)
    # bytes of task data held warm per (queue, tenant); an empty warm set still takes one
    # task, however large
    warm_max_bytes: int | None = Field(default=None, ge=WARM_MAX_BYTES_MIN,
                                       le=WARM_MAX_BYTES_MAX)
    lease_seconds: int | None = Field(default=None, ge=1, le=43_200)
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    backoff: BackoffSettings | None = None
    retention_seconds: int | None = Field(default=None, ge=0, le=10 * 366 * 86_400)
    paused: bool | None = Field(default=None, strict=True)  # "true" or 1 is not a boolean


class QueueCounts(BaseModel):
    warm: int = 0  # ready in the warm tier
    cold: int = 0
    delayed: int = 0
    leased: int = 0
    dead: int = 0


class QueueView(BaseModel):
    queue: str
    settings: QueueSettings
    counts: QueueCounts
    mode: Literal["warm", "cold"]
    tenants: list[str] = Field(
        default_factory=list,
        description="The queue's first tenants by name, at most 100 (a queue may have "
                    "hundreds of thousands); `tenants_total` counts them all and "
                    "`/v1/metrics/queues/detailed?queue=` pages through every one.")
    tenants_total: int = Field(default=0, description="How many tenants the queue has.")
    tenants_truncated: bool = Field(
        default=False, description="Whether `tenants` lists only the first of them.")


class TenantCounts(BaseModel):
    queue: str
    tenant: str
    warm: int
    cold: int
    delayed: int
    leased: int
    dead: int
    mode: Literal["warm", "cold"] = "warm"
    oldest_ready_at: datetime | None = None
    oldest_ready_age_seconds: float | None = None
