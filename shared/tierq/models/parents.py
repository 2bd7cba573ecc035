"""A task's parents (``after``) as a claim or a task's view shows them.

Apart from :mod:`tierq.models.tasks` because every claimed task may carry them: the claim,
ack and dispatcher functions import this at their cold start, not the enqueue and view
models they never make."""

from typing import Any, Literal
from uuid import UUID

from tierq.models.base import Model

ParentState = Literal["done", "dead", "cancelled"]


class ParentView(Model):
    """A task's parent (``after``): its final state (None while it is not finished) and,
    in a claim of the released task, its result (left out when the parents' results
    together pass 256 KiB: read them with GET)."""

    id: UUID
    queue: str
    state: ParentState | None = None
    result: Any = None
