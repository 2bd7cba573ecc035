"""The base of tierq's pydantic models: validators and serializers built on first use.

A Lambda function imports every model of the engine but validates a few of them (the claim
function never builds a schedule). Building a model's validator is most of what defining it
costs, so each is built the first time it validates or serializes (``defer_build``), not at
import: a cold start pays only for the models its requests use. See docs/architecture.md
(the Lambda runtime).

The model modules (and ``tierq.config``) leave out ``from __future__ import annotations``:
pydantic would evaluate each field's string annotation at class creation, about a third of
what defining a model costs at import; a name used before its class is defined is quoted."""


import functools
from collections.abc import Callable
from typing import Any, Self, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, PrivateAttr, TypeAdapter

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
DEFERRED = ConfigDict(defer_build=True)


class Model(BaseModel):
    """A pydantic model built on first use (subclasses' own ``model_config`` merges in)."""

    model_config = DEFERRED


class Replayable(Model):
    """The answer of an operation that takes an idempotency key: ``idempotent_replay`` is
    true when it is the kept answer of an earlier call with the key (nothing ran now). Not
    a field: it is neither serialised nor in the API document (the HTTP API says it in the
    ``Idempotent-Replayed`` header)."""

    _idempotent_replay: bool = PrivateAttr(default=False)

    @property
    def idempotent_replay(self) -> bool:
        return self._idempotent_replay

    def as_replay(self) -> Self:
        """This answer, marked as the kept answer of an earlier call."""
        self._idempotent_replay = True
        return self

    def __eq__(self, other: object) -> bool:
        """Equal answers have equal fields: a replayed answer equals the first."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__ \
            and self.__pydantic_extra__ == other.__pydantic_extra__


def deferred_adapter(annotation: type[T]) -> TypeAdapter[T]:
    """A ``TypeAdapter`` of ``annotation`` (e.g. ``list[TaskIn]``) built on first use."""
    return TypeAdapter(annotation, config=DEFERRED)


_on_first_call: list[Callable[[], TypeAdapter[Any]]] = []


def adapter_on_first_call(make: Callable[[], TypeAdapter[T]]) -> Callable[[], TypeAdapter[T]]:
    """``make`` cached: the adapter of models imported on first use, made (and its models
    imported) by the first call, not by the import of the module that names it.
    ``tierq.core.warm_up`` makes and builds each ahead (:func:`adapters_on_first_call`)."""
    cached = functools.cache(make)
    _on_first_call.append(cached)
    return cached


def adapters_on_first_call() -> list[TypeAdapter[Any]]:
    """The adapters of every :func:`adapter_on_first_call` of the loaded modules, made."""
    return [make() for make in _on_first_call]


# Ids parsed, or written as text, a list at a time (in Rust: ``UUID(text)`` and ``str(id)``
# cost about a microsecond each).
UUIDS: TypeAdapter[list[UUID]] = deferred_adapter(list[UUID])

_set = object.__setattr__
# the slots of a model besides its __dict__, set through their descriptors (cheaper than
# ``object.__setattr__``, which looks each up by name)
_fields_set, _extra, _private = (vars(BaseModel)[name].__set__ for name in (
    "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"))
# the classes found fit for ``made``: their fields, as a set and in order
_plain: dict[type, tuple[set[str], tuple[str, ...]]] = {}


def made(cls: type[M], rows: list[dict[str, Any]]) -> list[M]:
    """``cls`` models whose fields are each row's values as they are, not validated: for
    values tierq made itself from validated ones, each of its field's type (a claim's tasks
    from the blobs an enqueue wrote). Every row names every field, in the class's order
    (the first row is checked) and becomes its model's ``__dict__``: the model is what
    validating the row would build (its fields set: all of them), made as pydantic's
    ``model_construct`` makes one without that call's walk over the fields, in half the
    time validation takes. Only for a class without private attributes, extra fields,
    validators or ``model_post_init`` (TypeError)."""
    if not rows:
        return []
    known = _plain.get(cls)
    if known is None:
        decorators = cls.__pydantic_decorators__
        if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":
            raise TypeError(f"{cls.__name__} has private attributes or extra fields")
        if (decorators.validators or decorators.field_validators or decorators.root_validators
                or decorators.model_validators
                or cls.model_post_init is not BaseModel.model_post_init):
            # (each would be skipped: what the model makes of its values is not the values)
            raise TypeError(f"{cls.__name__} has validators or a model_post_init")
        known = _plain[cls] = (set(cls.model_fields), tuple(cls.model_fields))
    names, order = known
    if tuple(rows[0]) != order:
        raise TypeError(f"{cls.__name__} has fields {list(order)}, not {list(rows[0])}")
    out: list[M] = []
    append, new, copy = out.append, cls.__new__, names.copy
    for values in rows:
        model = new(cls)
        _set(model, "__dict__", values)
        _fields_set(model, copy())
        _extra(model, None)
        _private(model, None)
        append(model)
    return out
