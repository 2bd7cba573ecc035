"""Request models refuse a JSON ``true`` or ``false`` for each of their numeric fields, and
only there (models/strict.py): the check is given each model's numeric fields by name."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from pydantic import ValidationError

import tierq.models
from tierq.models.strict import RequestModel, _numeric


def request_models() -> list[type[RequestModel]]:
    for module in pkgutil.iter_modules(tierq.models.__path__):
        importlib.import_module(f"tierq.models.{module.name}")
    found: list[type[RequestModel]] = []
    todo: list[type[RequestModel]] = [RequestModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


MODELS = request_models()


def errors_of(cls: type[RequestModel], data: dict[str, Any]) -> list[Any]:
    try:
        cls.model_validate(data)
    except ValidationError as exc:
        return exc.errors()
    return []


def test_the_request_models_are_found() -> None:
    names = {cls.__name__ for cls in MODELS}
    assert {"TaskIn", "ClaimRequest", "QueueSettingsUpdate", "FlowTaskIn"} <= names


@pytest.mark.parametrize("cls", MODELS, ids=lambda cls: cls.__name__)
def test_a_boolean_is_refused_for_each_numeric_field_and_only_there(
        cls: type[RequestModel]) -> None:
    numeric = {name for name, field in cls.model_fields.items() if _numeric(field.annotation)}
    for name in cls.model_fields:
        refused = [e for e in errors_of(cls, {name: True})
                   if e["loc"] == (name,) and "not true or false" in e["msg"]]
        assert bool(refused) == (name in numeric), name


class _LaterNumber(RequestModel):
    """A model whose numeric field names a type defined after it."""

    count: LaterInt  # (defined below: the model's build, at its first use, resolves them)
    ratio: LaterFloat | None = None


LaterInt = int
LaterFloat = float


def test_a_field_whose_type_is_defined_later_still_refuses_a_boolean() -> None:
    """Which fields are numbers is not known when such a class is made: it keeps the check
    on every field, so its numbers still refuse true and false."""
    for body in ({"count": True}, {"count": 1, "ratio": False}):
        with pytest.raises(ValidationError, match="must be a number, not true or false"):
            _LaterNumber.model_validate(body)
    assert _LaterNumber.model_validate({"count": 3, "ratio": 0.5}).count == 3
