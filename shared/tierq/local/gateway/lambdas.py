"""Running a function's handler in this process as Lambda would: its ``app.py`` imported by
path once (module state is the execution environment's state), and a context object with
the function's name, memory, ARN, request id and remaining time."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierq.local.gateway.template import FunctionSpec

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"

Handler = Callable[[Any, Any], Any]


@dataclass
class LambdaContext:
    """The context argument of a local invocation."""

    function_name: str
    memory_limit_in_mb: int
    timeout_seconds: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    started: float = field(default_factory=time.monotonic)
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self._deadline = self.started + self.timeout_seconds

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"local/[{self.function_version}]{self.aws_request_id[:8]}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))

    def expire(self) -> None:
        """Make the invocation see no time left (the local stack is stopping)."""
        self._deadline = time.monotonic()


class FunctionLoadError(RuntimeError):
    """A function's code could not be imported."""


@dataclass
class LocalFunction:
    """One function of the template, loaded (or not) from its code folder."""

    spec: FunctionSpec
    root: Path
    handler: Handler | None = None
    error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def source(self) -> Path:
        module, _, _ = self.spec.handler.rpartition(".")
        return self.root / self.spec.code_uri / (module.replace(".", "/") + ".py")

    def load(self) -> None:
        """Import the handler's module by path (once); failures are kept, not raised."""
        with self._lock:
            if self.handler is not None or self.error is not None:
                return
            _, _, attribute = self.spec.handler.rpartition(".")
            path = self.source
            if not path.is_file():
                self.error = f"{self.spec.logical_id}: no code at {path}"
                return
            name = f"tierq_local_fn_{self.spec.name}"
            try:
                module_spec = importlib.util.spec_from_file_location(name, path)
                if module_spec is None or module_spec.loader is None:
                    raise FunctionLoadError(f"cannot import {path}")
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                module_spec.loader.exec_module(module)
                handler = getattr(module, attribute)
            except Exception:
                sys.modules.pop(name, None)
                self.error = f"{self.spec.logical_id}: importing {path} failed:\n" \
                    + traceback.format_exc()
                return
            if not callable(handler):
                self.error = f"{self.spec.logical_id}: {self.spec.handler} is not callable"
                return
            self.handler = handler

    def context(self) -> LambdaContext:
        return LambdaContext(function_name=f"tierq-local-{self.spec.name}",
                             memory_limit_in_mb=self.spec.memory,
                             timeout_seconds=float(self.spec.timeout))

    def invoke(self, event: Any, context: LambdaContext | None = None) -> Any:
        self.load()
        if self.handler is None:
            raise FunctionLoadError(self.error or f"{self.spec.logical_id} is not loaded")
        return self.handler(event, context or self.context())
