"""A queue's settings update (``PUT /v1/queues/{queue}``), apart from the settings: every
function reads a queue's settings, only the admin function and the command line change
them."""


from pydantic import ConfigDict, Field

from tierq.models.bounds import MAX_TIMEOUT_SECONDS
from tierq.models.queues import (
    GROUP_MAX_LEASED_MAX,
    LIMIT_MAX,
    WARM_MAX_BYTES_MAX,
    WARM_MAX_BYTES_MIN,
    BackoffSettings,
    ConsumerSettings,
    RateLimit,
)
from tierq.models.strict import RequestModel


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
    # The limits and the consumer: left out keeps the stored value, null clears it.
    max_leased: int | None = Field(default=None, ge=1, le=LIMIT_MAX)
    rate: RateLimit | None = None
    tenant_max_leased: int | None = Field(default=None, ge=1, le=LIMIT_MAX)
    tenant_rate: RateLimit | None = None
    consumer: ConsumerSettings | None = None
    # null restores the default (1)
    group_max_leased: int | None = Field(default=None, ge=1, le=GROUP_MAX_LEASED_MAX)
    # the time limit of an attempt of the queue's tasks without their own; null: none
    timeout_seconds: int | None = Field(default=None, ge=1, le=MAX_TIMEOUT_SECONDS)

    def clears(self, field: str) -> bool:
        """Whether ``field`` was given as null (to clear it), not left out."""
        return field in self.model_fields_set and getattr(self, field) is None

    def given(self, field: str) -> bool:
        """Whether ``field`` was given (a value, or null to clear it)."""
        return field in self.model_fields_set
