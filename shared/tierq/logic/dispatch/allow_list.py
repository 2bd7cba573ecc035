"""Which functions may be consumers: the deployment's allow-list (:class:`AllowList`) and
the check a queue's consumer passes before it is written (:func:`check_consumer`)."""

from __future__ import annotations

from dataclasses import dataclass

from tierq.errors import Forbidden, InvalidInput
from tierq.logic.context import Context


class ConsumerNotAllowed(Forbidden):
    """The function may not be a consumer here (not in the deployment's allow-list)."""

    code = "consumer_not_allowed"


def allow_list(raw: str) -> tuple[str, ...]:
    """TIERQ_CONSUMER_FUNCTIONS: comma-separated names (``name`` or ``name:qualifier``)."""
    return tuple(entry.strip() for entry in raw.split(",") if entry.strip())


@dataclass(frozen=True)
class AllowList:
    """The deployment's allow-list of consumer functions (the template's
    ``ConsumerFunctionArns``): Lambda functions, each listed by its ARN (as the template
    passes them) or, in the stack's account and region, by its name. A queue's consumer
    names one by its ARN or, in the stack's account and region, by its name: both sides are
    compared by name once ``arn_prefix`` is taken off (an ARN of another account or region
    must match in full)."""

    names: tuple[str, ...]
    arn_prefix: str = ""  # arn:<partition>:lambda:<region>:<account>:function:

    def name_of(self, function: str) -> str:
        if self.arn_prefix and function.startswith(self.arn_prefix):
            return function[len(self.arn_prefix):]
        return function

    def allows(self, function: str) -> bool:
        return self.name_of(function) in {self.name_of(entry) for entry in self.names}

    def check(self, function: str) -> None:
        if not self.names:
            raise ConsumerNotAllowed(
                f"consumer.function {function!r}: this deployment allows no consumer "
                "functions (the stack's ConsumerFunctionArns parameter, "
                "TIERQ_CONSUMER_FUNCTIONS, is empty)", details=[{"field": "consumer.function",
                                       "message": "not in the allow-list"}])
        if not self.allows(function):
            raise ConsumerNotAllowed(
                f"consumer.function {function!r} is not in the deployment's allow-list of "
                f"consumer functions ({', '.join(self.names)}); the stack's owner adds it "
                "with the ConsumerFunctionArns parameter",
                details=[{"field": "consumer.function", "message": "not in the allow-list"}])


def check_consumer(ctx: Context, function: str) -> None:
    """Whether ``function`` may be a consumer (PUT /v1/queues/{queue} with a consumer, an
    admin action): by the context's consumer functions, else by the allow-list of the
    settings."""
    functions = ctx.consumers
    if functions is not None:
        functions.check(function)
        return
    settings = ctx.settings
    AllowList(allow_list(getattr(settings, "consumer_functions", "")),
              getattr(settings, "consumer_arn_prefix", "")).check(function)


def invalid_function(function: str, why: str) -> InvalidInput:
    return InvalidInput(f"consumer.function {function!r}: {why}",
                        details=[{"field": "consumer.function", "message": why}])

