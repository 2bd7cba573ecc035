"""Consumer functions on a developer's machine (``tierq dev``, the demo, the tests).

A queue's ``consumer.function`` is a function of template.yaml (its logical id,
``OrdersFunction``, or its code folder, ``orders``) or an importable ``module:function`` on
the Python path. It is called in this process with the same SQS-shaped event the dispatcher
sends a Lambda function on AWS, and a Lambda-like context.

Each invocation runs in an *execution environment* of its own, as on Lambda: concurrent
invocations of one function get separate copies of its module. A module-level Powertools
``BatchProcessor`` keeps state per invocation and is not safe to share between threads. An
environment is reused by the next invocation once free. The first environment of a
``module:function`` is the module as imported; the others are fresh copies loaded from the
same file.

As Lambda does, a function that raises is a function error (its answer holds its
``errorType`` and ``errorMessage``; the error type alone is what the dispatcher may record
on the batch's tasks), and the return value is what the function answered, encoded as
JSON. What Lambda's runtime writes to a function's log on a failure — ``[ERROR]``, the
error type and message and the traceback of a function that raised; ``Task timed out``;
``Runtime.MarshalError`` — goes to this module's logger (``tierq.local.consumers``), with
the function's name. A function cannot be stopped in-process: one that runs past its
timeout is answered as Lambda answers a timed-out function (a function error,
``Sandbox.Timedout``), after it returns.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import logging
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tierq.errors import InvalidInput
from tierq.local.gateway.lambdas import LambdaContext, LocalFunction
from tierq.logic.dispatch import DEFAULT_ACCOUNT, DEFAULT_REGION, Invocation, invalid_function

# the timeout of a module:function (a template function has its own)
DEFAULT_TIMEOUT_SECONDS = 60.0
_ENVIRONMENT_IDS = itertools.count(1)
_MODULE_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

Handler = Callable[[Any, Any], Any]

log = logging.getLogger(__name__)


@dataclass
class LocalFunctions:
    """The consumer functions of the local stack (see the module's documentation)."""

    template_functions: Mapping[str, LocalFunction] = field(default_factory=dict)
    default_timeout: float = DEFAULT_TIMEOUT_SECONDS
    region: str = DEFAULT_REGION
    account: str = DEFAULT_ACCOUNT
    invocations: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _free: dict[str, list[Handler]] = field(default_factory=dict)
    _created: set[str] = field(default_factory=set)

    def _template_function(self, function: str) -> LocalFunction | None:
        found = self.template_functions.get(function)
        if found is not None:
            return found
        for candidate in self.template_functions.values():
            if candidate.spec.name == function:
                return candidate
        return None

    def resolve(self, function: str) -> tuple[Handler, float, str]:
        """The handler (of the first environment), its timeout and its name; InvalidInput
        (422) naming what is wrong."""
        local = self._template_function(function)
        if local is not None:
            local.load()
            if local.handler is None:
                raise invalid_function(function, f"the template's function does not load: "
                                                 f"{local.error}")
            return local.handler, float(local.spec.timeout), f"tierq-local-{local.spec.name}"
        if not _MODULE_FUNCTION.match(function):
            known = sorted({*self.template_functions,
                            *(f.spec.name for f in self.template_functions.values())})
            raise invalid_function(
                function, "not a function of template.yaml"
                + (f" ({', '.join(known)})" if known else "")
                + " nor an importable module:function")
        module_name, _, attribute = function.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # an import error of any kind is the user's to see
            raise invalid_function(function, f"cannot import {module_name}: {exc!r}") from None
        handler = getattr(module, attribute, None)
        if not callable(handler):
            raise invalid_function(function, f"{module_name} has no function {attribute}")
        return handler, self.default_timeout, function.replace(":", "-").replace(".", "-")

    def _new_environment(self, function: str) -> Handler:
        """A handler of ``function`` in a fresh copy of its module."""
        local = self._template_function(function)
        if local is not None:
            copy = LocalFunction(local.spec, local.root)
            copy.load()
            if copy.handler is None:
                raise invalid_function(function, f"the template's function does not load: "
                                                 f"{copy.error}")
            return copy.handler
        module_name, _, attribute = function.partition(":")
        found = importlib.util.find_spec(module_name)
        if found is None or found.origin is None or found.loader is None:
            raise invalid_function(function, f"cannot find the file of {module_name}")
        name = f"tierq_local_env_{next(_ENVIRONMENT_IDS)}_{module_name.replace('.', '_')}"
        spec = importlib.util.spec_from_file_location(name, found.origin)
        if spec is None or spec.loader is None:
            raise invalid_function(function, f"cannot load {found.origin}")
        module = importlib.util.module_from_spec(spec)
        module.__package__ = module_name.rpartition(".")[0]  # its relative imports
        sys.modules[name] = module  # (dataclasses and pickling look their module up there)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        handler = getattr(module, attribute)
        if not callable(handler):
            raise invalid_function(function, f"{module_name} has no function {attribute}")
        return handler

    def _take_environment(self, function: str) -> Handler:
        with self._lock:
            free = self._free.setdefault(function, [])
            if free:
                return free.pop()
            first = function not in self._created
            self._created.add(function)
        return self.resolve(function)[0] if first else self._new_environment(function)

    def _give_back(self, function: str, handler: Handler) -> None:
        with self._lock:
            self._free.setdefault(function, []).append(handler)

    def check(self, function: str) -> None:
        self.resolve(function)

    def timeout_seconds(self, function: str) -> float:
        try:
            return self.resolve(function)[1]
        except InvalidInput:
            return self.default_timeout

    def invoke(self, function: str, event: bytes, *, read_timeout: float) -> Invocation:
        try:
            _, timeout, name = self.resolve(function)
            handler = self._take_environment(function)
        except InvalidInput as exc:
            return Invocation("not_invoked", error="ResourceNotFoundException",
                              detail=exc.message)
        except Exception as exc:  # a new environment's import failed: the function never ran
            return Invocation("not_invoked", error="Runtime.ImportModuleError",
                              detail=repr(exc))
        with self._lock:
            self.invocations += 1
        context = LambdaContext(function_name=name, memory_limit_in_mb=128,
                                timeout_seconds=timeout)
        started = time.monotonic()
        try:
            result = handler(orjson.loads(event), context)
        except Exception as exc:
            # as Lambda's Python runtime logs an unhandled exception (with its traceback)
            log.error("%s: [ERROR] %s: %s", name, type(exc).__name__, exc, exc_info=exc,
                      extra={"function": function})
            return Invocation("function_error", payload=_error_body(exc),
                              error=type(exc).__name__, detail=str(exc))
        finally:
            self._give_back(function, handler)
        if time.monotonic() - started > timeout:
            message = f"Task timed out after {timeout:.2f} seconds"
            log.error("%s: %s", name, message, extra={"function": function})
            return Invocation("function_error", payload=json.dumps(
                {"errorType": "Sandbox.Timedout", "errorMessage": message}).encode(),
                error="Sandbox.Timedout", detail=message)
        try:
            # as the Lambda runtime writes a handler's return value (python3.12+: UTF-8)
            payload = json.dumps(result, ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            message = f"Unable to marshal response: {exc}"
            log.error("%s: [ERROR] Runtime.MarshalError: %s", name, message,
                      extra={"function": function})
            return Invocation("function_error", payload=json.dumps(
                {"errorType": "Runtime.MarshalError", "errorMessage": message}).encode(),
                error="Runtime.MarshalError", detail=message)
        return Invocation("ok", payload=payload)


def _error_body(exc: BaseException) -> bytes:
    """What Lambda answers for a function that raised."""
    return json.dumps({"errorMessage": str(exc), "errorType": type(exc).__name__,
                       "stackTrace": traceback.format_tb(exc.__traceback__)}).encode()

