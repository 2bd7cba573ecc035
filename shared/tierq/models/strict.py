"""The base of request bodies: a JSON ``true`` or ``false`` is not a number. Pydantic's lax
mode reads them as 1 and 0 for ``int`` and ``float`` fields, which the API document (JSON
Schema's ``integer`` / ``number``) does not allow; strict mode would also refuse ``3.0`` for
an integer, which JSON Schema allows. So booleans alone are refused, naming the field."""


import types
from dataclasses import replace
from typing import Any, ForwardRef, Union, get_args, get_origin

from pydantic import ValidationInfo, field_validator

from tierq.models.base import Model


def _numeric(annotation: Any) -> bool:
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_numeric(arg) for arg in get_args(annotation))
    return False


class RequestModel(Model):
    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None \
                and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError("must be a number, not true or false")
        return value

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """The check above given each model's numeric fields alone, before the model's
        validator is built (on first use): ``"*"`` calls it for every field a request
        gives, a Python call each (a seventh of validating an enqueue's tasks). Each model
        names its own fields, whatever its base named."""
        super().__pydantic_init_subclass__(**kwargs)
        validators = cls.__pydantic_decorators__.field_validators
        check = validators.get("_no_boolean_numbers")
        if check is None or getattr(cls, "__pydantic_complete__", False) \
                or not getattr(cls, "__pydantic_fields_complete__", True) \
                or any(isinstance(field.annotation, str | ForwardRef)
                       for field in cls.model_fields.values()):
            # (a model built already keeps "*", and so does one whose fields name a type
            # not defined yet: which of them are numbers is known only at its build)
            return
        numeric = tuple(name for name, field in cls.model_fields.items()
                        if _numeric(field.annotation))
        validators["_no_boolean_numbers"] = replace(check, info=replace(check.info,
                                                                        fields=numeric))
