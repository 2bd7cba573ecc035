"""The base of tierq's pydantic models: validators and serializers built on first use.

A Lambda function imports every model of the engine but validates a few of them (the claim
function never builds a schedule). Building a model's validator is most of what defining it
costs, so each is built the first time it validates or serializes (``defer_build``), not at
import: a cold start pays only for the models its requests use. See docs/architecture.md
(the Lambda runtime)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter

T = TypeVar("T")
DEFERRED = ConfigDict(defer_build=True)


class Model(BaseModel):
    """A pydantic model built on first use (subclasses' own ``model_config`` merges in)."""

    model_config = DEFERRED


def deferred_adapter(annotation: type[T]) -> TypeAdapter[T]:
    """A ``TypeAdapter`` of ``annotation`` (e.g. ``list[TaskIn]``) built on first use."""
    return TypeAdapter(annotation, config=DEFERRED)
